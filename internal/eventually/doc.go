// Package eventually waits, in tests, for what another process or
// goroutine does: it polls a condition until it holds.
//
// Its deadline only ends a hung test. Nothing asserts how fast the
// condition came to hold (a wall-clock assertion would flake on a loaded
// machine), so the deadline is generous, one for every wait: Deadline.
//
//	eventually.True(t, "the task is COMPLETED", func() bool { … })
//	eventually.NoError(t, "the server serves", func() error { … })
//
// A condition that can never hold any more (the process it waits on has
// exited) returns Stop(err): the wait ends at once with err. Wait is the
// form that returns the error instead of failing the test, for a caller
// that tries something else (another port) when a wait fails; Until also
// ends when its context does, for a wait whose bound is not an assertion.
package eventually
