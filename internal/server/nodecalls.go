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

// mountNodeCalls mounts, on a cluster node, what only the cluster's
// other nodes call: a delivery of tasks that a record of another
// partition created for a partition served here (route.DeliverPath;
// docs/design/workflows.md, "Cluster mode"), answered once they are
// durable, and the question of where tasks of a partition served here
// are (route.WherePath; docs/design/events.md, "Filters").
func (s *Server) mountNodeCalls(mux *http.ServeMux) {
	s.mountNodeCall(mux, "POST "+route.DeliverPath, "deliver tasks", s.createDelivered)
	s.mountNodeCall(mux, "POST "+route.WherePath, "ask where tasks are", s.where)
}

// mountNodeCall mounts, on a cluster node, serve at pattern for the calls
// of the cluster's other nodes only, each about the partition
// route.PartitionHeader names: a request the forwarded middleware did not
// verify as signed by a node of this cluster gets 401, saying what the
// path does (who). serve's answer goes back with 200 (as JSON when it is
// not empty); its error with 503 when the partition is not served here
// now (the caller asks its owner, or again), 422 for what the caller sent
// wrong, else 500, logged.
func (s *Server) mountNodeCall(mux *http.ServeMux, pattern, who string, serve func(ctx context.Context, p route.Partition, body io.Reader) ([]byte, error)) {
	if _, ok := s.r.(route.NodeIdentity); !ok {
		return
	}
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if _, fw := route.Forwarded(r.Context()); !fw {
			http.Error(w, "only a node of this cluster may "+who+": the request must be signed as forwarded by a node (docs/design/cluster.md)", http.StatusUnauthorized)
			return
		}
		answer, err := s.nodeCall(r, serve)
		switch {
		case err == nil:
			if len(answer) > 0 {
				w.Header().Set("Content-Type", "application/json")
			}
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(answer)
		case errors.Is(err, coordinator.ErrUnavailable):
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			var fe *coordinator.FieldError
			if errors.As(err, &fe) || errors.Is(err, coordinator.ErrInvalidDelivery) {
				http.Error(w, err.Error(), http.StatusUnprocessableEntity)
				return
			}
			s.opts.Logger.Error("a node's call failed", "path", r.URL.Path, "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}

// nodeCall runs serve for the partition r's route.PartitionHeader names.
func (s *Server) nodeCall(r *http.Request, serve func(context.Context, route.Partition, io.Reader) ([]byte, error)) ([]byte, error) {
	h := r.Header.Get(route.PartitionHeader)
	id, err := strconv.ParseUint(h, 10, 64)
	if err != nil {
		return nil, &coordinator.FieldError{Field: route.PartitionHeader, Problem: fmt.Sprintf("%q is not a partition id", h)}
	}
	p, err := s.r.Partition(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return serve(r.Context(), p, r.Body)
}

// notServedHere refuses a node's call for partition p, which another
// node serves (the caller's map was behind): the caller asks again.
func notServedHere(p route.Partition) func(route.Peer) error {
	return func(route.Peer) error {
		return fmt.Errorf("%w: partition %d is not served here; retry", coordinator.ErrUnavailable, p.ID())
	}
}
