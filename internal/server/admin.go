package server

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenurehq/tenure/api/tenurev1"
)

type adminService struct{ s *Server }

func (h adminService) Snapshot(ctx context.Context, _ *connect.Request[tenurev1.SnapshotRequest]) (*connect.Response[tenurev1.SnapshotResponse], error) {
	sn := h.s.opts.Snapshots
	if sn == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this server does not keep snapshots"))
	}
	res, err := sn.Snapshot(ctx)
	if err != nil {
		return nil, h.s.apiError(err)
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
