// Package lincheck is the one sequential model of a task's state machine
// (docs/design/state-machine.md) that porcupine checks histories against, with the
// recorder that collects those histories and the resolution of calls that
// got no answer.
//
// It exists because two tests check linearizability: the simulation and
// the power-cut workload of internal/coordinator, which call the
// coordinator, and the kill -9 test of cmd/tenure, which calls the real
// server over its API. Test files cannot be imported across packages, so
// the model lives here, and each test converts what it calls and hears to
// the shared In and Out (and its final state to Task) where it records.
//
// What it promises: the model is per task (Model partitions a history by
// In.Task); it has no clock, and applies a lease's expiry lazily, only
// when an answer reveals it, which accepts exactly the histories that some
// placement of the expiries explains; answers no expiry explains (an
// acknowledged submit missing, a completed task leased again, two winning
// commits) are rejected. An acknowledged operation is never rewritten by
// Resolve, so a lost acknowledgement cannot be explained away. The package
// depends on porcupine and the standard library only; states are the
// plain names the coordinator and the API print (WAITING, LEASED, ...).
package lincheck
