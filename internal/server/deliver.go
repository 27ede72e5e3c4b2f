package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
)

// mountDeliver answers, on a cluster node, another node's delivery of
// tasks that a record of its partition created for a partition served
// here (route.DeliverPath; docs/design/workflows.md, "Cluster mode"):
// they are created there unless they exist, and the answer is 200 once
// they are durable. Only a node of this cluster may call it.
func (s *Server) mountDeliver(mux *http.ServeMux) {
	if _, ok := s.r.(route.NodeIdentity); !ok {
		return
	}
	mux.HandleFunc("POST "+route.DeliverPath, func(w http.ResponseWriter, r *http.Request) {
		if _, fw := route.Forwarded(r.Context()); !fw {
			http.Error(w, "only a node of this cluster may deliver tasks: the request must be signed as forwarded by a node (docs/design/cluster.md)", http.StatusUnauthorized)
			return
		}
		err := s.createDelivered(r.Context(), r.Header.Get(route.PartitionHeader), r.Body)
		switch {
		case err == nil:
			w.WriteHeader(http.StatusOK)
		case errors.Is(err, coordinator.ErrUnavailable):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			var fe *coordinator.FieldError
			if errors.As(err, &fe) || errors.Is(err, coordinator.ErrInvalidDelivery) {
				http.Error(w, err.Error(), http.StatusUnprocessableEntity)
				return
			}
			s.opts.Logger.Error("creating delivered tasks failed", "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}

// createDelivered creates a delivery's tasks in partition part (decimal),
// which this node serves.
func (s *Server) createDelivered(ctx context.Context, part string, body io.Reader) error {
	id, err := strconv.ParseUint(part, 10, 64)
	if err != nil {
		return &coordinator.FieldError{Field: route.PartitionHeader, Problem: fmt.Sprintf("%q is not a partition id", part)}
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return &coordinator.FieldError{Field: "body", Problem: err.Error()}
	}
	d, err := coordinator.DecodeDelivered(b)
	if err != nil {
		return err
	}
	p, err := s.r.Partition(ctx, id)
	if err != nil {
		return err
	}
	return p.Do(ctx, false, func(c *coordinator.Coordinator) error {
		return c.CreateDelivered(ctx, d)
	}, func(route.Peer) error {
		return fmt.Errorf("%w: partition %d is not served here; retry", coordinator.ErrUnavailable, id)
	})
}
