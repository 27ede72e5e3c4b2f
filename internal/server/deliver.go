package server

import (
	"context"
	"io"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// createDelivered creates a delivery's tasks in partition p, which this
// node serves.
func (s *Server) createDelivered(ctx context.Context, p route.Partition, body io.Reader) ([]byte, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, &coordinator.FieldError{Field: "body", Problem: err.Error()}
	}
	d, err := coordinator.DecodeDelivered(b)
	if err != nil {
		return nil, err
	}
	return nil, p.Do(ctx, false, func(c *coordinator.Coordinator) error {
		return c.CreateDelivered(ctx, d)
	}, notServedHere(p))
}
