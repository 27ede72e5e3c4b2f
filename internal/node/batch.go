package node

import (
	"context"

	"github.com/tenurehq/tenure/internal/coordinator"
)

// CompleteBatch forwards to the current coordinator's CompleteBatch.
func (n *Node) CompleteBatch(ctx context.Context, items []coordinator.CompleteItem) ([]error, error) {
	return do(n, func(c *coordinator.Coordinator) ([]error, error) { return c.CompleteBatch(ctx, items) })
}
