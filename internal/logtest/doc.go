// Package logtest is a conformance suite for implementations of
// coordinator.Log: the embedded file WAL (internal/wal) and the cluster's
// MySQL log (internal/cluster/mysqllog) must behave alike, because the
// coordinator cannot tell them apart.
//
// Run checks what the coordinator relies on: dense LSNs from 1 in call
// order; Append copies payloads and rejects type 0 and oversized records
// without side effects; Wait(lsn) returns only once everything up to lsn is
// durable, and what was waited for survives Close and reopening; Replay
// visits exactly the durable records from any LSN, in order, and stops at
// fn's error; concurrent appenders lose, duplicate and reorder nothing
// (group commit); and, where the subject can inject a failure, a failed
// log is sticky: nothing after the failure is acknowledged, and what was
// acknowledged before it survives.
package logtest
