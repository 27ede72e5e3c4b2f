// Package backoff computes the waits between retries: exponential growth
// from an initial wait up to a cap, with jitter so that many clients that
// failed together do not retry together.
//
// Wait is pure arithmetic: the caller counts its retries and supplies the
// random source, so a test can pin every wait exactly. Sleep does the
// waiting, on the time package's timers (a testing/synctest bubble's clock
// in tests).
package backoff
