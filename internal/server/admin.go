package server

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
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

// WhoAmI describes the caller's token and what its role may call; with
// authentication off, only that it is off.
func (h adminService) WhoAmI(ctx context.Context, _ *connect.Request[tenurev1.WhoAmIRequest]) (*connect.Response[tenurev1.WhoAmIResponse], error) {
	cl, _ := ctx.Value(callerKey{}).(*caller)
	if h.s.opts.Auth == nil || cl == nil {
		return connect.NewResponse(&tenurev1.WhoAmIResponse{}), nil
	}
	out := &tenurev1.WhoAmIResponse{
		AuthEnabled: true,
		Name:        cl.p.Name,
		Role:        string(cl.p.Role),
		Namespaces:  cl.p.Namespaces,
		Queues:      cl.p.Queues,
	}
	for _, perm := range auth.Permissions(cl.p) {
		out.Calls = append(out.Calls, &tenurev1.CallPermission{Call: perm.Call, Allowed: perm.Allowed, Reason: perm.Reason})
	}
	return connect.NewResponse(out), nil
}

// GetCluster describes the server: embedded, or the cluster its router
// (a route.Describer) reads from the cluster database.
func (h adminService) GetCluster(ctx context.Context, _ *connect.Request[tenurev1.GetClusterRequest]) (*connect.Response[tenurev1.GetClusterResponse], error) {
	d, ok := h.s.r.(route.Describer)
	if !ok {
		return connect.NewResponse(&tenurev1.GetClusterResponse{Mode: tenurev1.ServerMode_SERVER_MODE_EMBEDDED}), nil
	}
	c, err := d.Describe(ctx)
	if err != nil {
		return nil, h.s.apiError(fmt.Errorf("%w: %v", coordinator.ErrUnavailable, err))
	}
	return connect.NewResponse(clusterToAPI(c)), nil
}

// clusterToAPI is the API's message of a cluster's description.
func clusterToAPI(c route.Cluster) *tenurev1.GetClusterResponse {
	out := &tenurev1.GetClusterResponse{Mode: tenurev1.ServerMode_SERVER_MODE_CLUSTER, NodeId: c.NodeID, EligibilityFallback: c.EligibilityFallback}
	if c.Lock != nil {
		out.Coordinator = &tenurev1.CoordinatorLock{Holder: c.Lock.Holder, Epoch: c.Lock.Epoch, ExpiresAt: timestamppb.New(c.Lock.ExpiresAt), Live: c.Lock.Live}
	}
	owned := make(map[string]uint32)
	for _, p := range c.Partitions {
		out.Partitions = append(out.Partitions, &tenurev1.ClusterPartition{Id: p.ID, Namespace: p.Namespace, Queue: p.Queue, Index: p.Index, Owner: p.Owner, Epoch: p.Epoch})
		if p.Owner != "" {
			owned[p.Owner]++
		}
	}
	for _, n := range c.Nodes {
		out.Nodes = append(out.Nodes, &tenurev1.ClusterNode{
			NodeId: n.ID, AdvertiseAddr: n.AdvertiseAddr, Active: n.Active,
			LastHeartbeat: timestamppb.New(n.LastHeartbeat), Silent: durationpb.New(n.Silent), Partitions: owned[n.ID],
			Eligible: n.Eligible, Eligibility: n.Eligibility,
		})
	}
	return out
}
