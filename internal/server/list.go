package server

import (
	"cmp"
	"context"
	"fmt"
	"strconv"

	"connectrpc.com/connect"

	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fanout"
	"github.com/tenurehq/tenure/internal/route"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
)

// ListTasks walks the partitions of its scope in order, a page at a time.

// Page tokens name a partition and a position in it: the partition id in
// the top 24 bits, the position (a creation LSN) in the lower 40, written
// in decimal. Embedded mode's one partition is 0, so its tokens are the
// position alone.
const cursorBits = 40

func pageToken(partitionID, after uint64) (string, error) {
	if partitionID >= 1<<(64-cursorBits) || after >= 1<<cursorBits {
		return "", fmt.Errorf("%w: partition %d at position %d does not fit a page token", coordinator.ErrUnavailable, partitionID, after)
	}
	return strconv.FormatUint(partitionID<<cursorBits|after, 10), nil
}

func parsePageToken(tok string) (partitionID, after uint64, err error) {
	if tok == "" {
		return 0, 0, nil
	}
	c, err := strconv.ParseUint(tok, 10, 64)
	if err != nil {
		return 0, 0, &coordinator.FieldError{Field: "page_token", Problem: "not a token this server issued; pass next_page_token from the previous page"}
	}
	return c >> cursorBits, c & (1<<cursorBits - 1), nil
}

// list walks the partitions of the listing's scope in order, from the one
// its page token names, one after the other until the page is full. A
// forwarded listing covers exactly the partition its token names.
func (s *Server) list(ctx context.Context, msg *tenurev1.ListTasksRequest) (*tenurev1.ListTasksResponse, error) {
	f, err := s.listFilter(msg)
	if err != nil {
		return nil, err
	}
	startID, after, err := parsePageToken(msg.GetPageToken())
	if err != nil {
		return nil, err
	}
	scope, i, err := s.listScope(ctx, f, startID, msg.GetPageToken() != "")
	if err != nil {
		return nil, err
	}
	out := &tenurev1.ListTasksResponse{}
	for ; i < len(scope); i, after = i+1, 0 {
		p := scope[i]
		sub := f
		sub.Limit, sub.After = f.Limit-len(out.Tasks), after
		pg, err := fanout.Call(ctx, p, true, func(c *coordinator.Coordinator) (page, error) {
			return listHere(ctx, c, sub)
		}, func(peer route.Peer) (page, error) {
			return listThere(ctx, peer, p, msg, sub)
		})
		if err != nil {
			return nil, err
		}
		out.Tasks = append(out.Tasks, pg.tasks...)
		if pg.next != 0 {
			out.NextPageToken, err = pageToken(p.ID(), pg.next)
			return out, err
		}
		if len(out.Tasks) == f.Limit {
			if i+1 < len(scope) {
				out.NextPageToken, err = pageToken(scope[i+1].ID(), 0)
			}
			return out, err
		}
	}
	return out, nil
}

// listFilter is msg's filter and page size, checked.
func (s *Server) listFilter(msg *tenurev1.ListTasksRequest) (coordinator.ListFilter, error) {
	f := coordinator.ListFilter{Namespace: msg.GetNamespace(), Queue: msg.GetQueue(), Limit: int(msg.GetPageSize())}
	st, ok := TaskState(msg.GetState())
	if !ok {
		return f, &coordinator.FieldError{Field: "state", Problem: "unknown task state"}
	}
	f.State = st
	maxPage := cmp.Or(s.opts.Limits.MaxListPage, coordinator.DefaultLimits.MaxListPage)
	if f.Limit == 0 {
		f.Limit = 100
	}
	if f.Limit < 0 || f.Limit > maxPage {
		return f, &coordinator.FieldError{Field: "page_size", Problem: fmt.Sprintf("%d is outside 0..%d (0: the default, 100)", f.Limit, maxPage)}
	}
	return f, nil
}

// listScope returns the partitions a listing walks and the index of the
// one it starts from: startID's, with a page token.
func (s *Server) listScope(ctx context.Context, f coordinator.ListFilter, startID uint64, token bool) ([]route.Partition, int, error) {
	var scope []route.Partition
	if _, fw := route.Forwarded(ctx); fw {
		p, err := s.r.Partition(ctx, startID)
		if err != nil {
			return nil, 0, err
		}
		scope = []route.Partition{p}
	} else {
		var err error
		if scope, err = s.r.Scope(ctx, f.Namespace, f.Queue); err != nil {
			return nil, 0, err
		}
	}
	i := 0
	if token {
		for i < len(scope) && scope[i].ID() != startID {
			i++
		}
		if i == len(scope) {
			return nil, 0, &coordinator.FieldError{Field: "page_token", Problem: "names a partition this listing does not cover; pass next_page_token from the previous page"}
		}
	}
	return scope, i, nil
}

// page is what one partition lists: its tasks, and the position after
// the last one if it has more (0: none).
type page struct {
	tasks []*tenurev1.Task
	next  uint64
}

// listHere lists from a partition served here.
func listHere(ctx context.Context, c *coordinator.Coordinator, f coordinator.ListFilter) (page, error) {
	tasks, next, err := c.List(ctx, f)
	if err != nil {
		return page{}, err
	}
	out := page{tasks: make([]*tenurev1.Task, len(tasks)), next: next}
	for i, t := range tasks {
		out.tasks[i] = task(t)
	}
	return out, nil
}

// listThere lists from partition p through the node that serves it.
func listThere(ctx context.Context, peer route.Peer, p route.Partition, msg *tenurev1.ListTasksRequest, f coordinator.ListFilter) (page, error) {
	tok, err := pageToken(p.ID(), f.After)
	if err != nil {
		return page{}, err
	}
	m := &tenurev1.ListTasksRequest{Namespace: msg.GetNamespace(), Queue: msg.GetQueue(), State: msg.GetState(), PageSize: int32(f.Limit), PageToken: tok}
	resp, err := peer.ListTasks(ctx, connect.NewRequest(m))
	if err != nil {
		return page{}, err
	}
	id, next, err := parsePageToken(resp.Msg.GetNextPageToken())
	if err != nil || (next != 0 && id != p.ID()) {
		return page{}, badAnswer(peer, "ListTasks: next page token %q is not one of partition %d", resp.Msg.GetNextPageToken(), p.ID())
	}
	return page{tasks: resp.Msg.GetTasks(), next: next}, nil
}
