package member

import (
	"context"

	"github.com/tenurehq/tenure/internal/coordinator"
)

// Reconcile runs one assignment check now (tests use a long AssignInterval
// to decide when the node notices a change).
func (m *Member) Reconcile(ctx context.Context) { m.reconcile(ctx) }

// Deliver has a delivery created in its partition, as the host's
// delivery loop does.
func (m *Member) Deliver(ctx context.Context, d coordinator.Delivered) error {
	return m.deliver(ctx, d)
}
