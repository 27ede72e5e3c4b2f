package member

import "context"

// Reconcile runs one assignment check now (tests use a long AssignInterval
// to decide when the node notices a change).
func (m *Member) Reconcile(ctx context.Context) { m.reconcile(ctx) }
