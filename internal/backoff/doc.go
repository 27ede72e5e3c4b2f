// Package backoff computes the waits between retries: exponential growth
// from an initial wait up to a cap, with jitter so that many clients that
// failed together do not retry together.
//
// It is pure arithmetic: the caller counts its retries, supplies the random
// source and does the waiting (on its clock), so a test can pin every wait
// exactly.
package backoff
