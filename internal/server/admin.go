package server

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
	"github.com/tenurehq/tenure/internal/coordinator"
)

// Snapshotter is the optional capability of a Backend to take a snapshot on
// demand (node.Node in embedded mode).
type Snapshotter interface {
	Snapshot(ctx context.Context) (coordinator.SnapshotResult, error)
}

type adminService struct{ s *Server }

func (h adminService) Snapshot(ctx context.Context, _ *connect.Request[tenurev1.SnapshotRequest]) (*connect.Response[tenurev1.SnapshotResponse], error) {
	sn, ok := h.s.b.(Snapshotter)
	if !ok {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this server does not keep snapshots"))
	}
	res, err := sn.Snapshot(ctx)
	if err != nil {
		return nil, apiError(err)
	}
	return connect.NewResponse(&tenurev1.SnapshotResponse{
		Lsn:             res.LSN,
		Tasks:           uint64(res.Tasks),
		Path:            res.Path,
		Purged:          uint64(res.Purged),
		DeletedSegments: uint32(res.DeletedSegments),
		Pause:           durationpb.New(res.Pause),
	}), nil
}
