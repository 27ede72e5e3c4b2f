package route

import (
	"context"

	"github.com/tenurehq/tenure/internal/coordinator"
)

// Host is one partition served here (host.Host).
type Host interface {
	// Do runs fn on the serving coordinator, or answers
	// coordinator.ErrUnavailable while there is none.
	Do(fn func(*coordinator.Coordinator) error) error
	Err() error
}

// Local is the router of an embedded node: every request goes to its one
// partition, served here.
func Local(h Host) Router { return &local{h} }

type local struct{ h Host }

func (l *local) Partition(_ context.Context, id uint64) (Partition, error) {
	if id != 0 {
		return nil, &coordinator.FieldError{Field: "page_token", Problem: "names a partition of a cluster, not of this server; pass next_page_token from the previous page"}
	}
	return l, nil
}

func (l *local) Task(context.Context, string) (Partition, error) { return l, nil }

func (l *local) Place(context.Context, string, string, string) (Partition, error) { return l, nil }

func (l *local) Queue(context.Context, string, string) ([]Partition, []Peer, error) {
	return []Partition{l}, nil, nil
}

func (l *local) Scope(context.Context, string, string) ([]Partition, error) {
	return []Partition{l}, nil
}

func (l *local) Err() error { return l.h.Err() }

func (*local) ID() uint64 { return 0 }

func (*local) Peer(context.Context) Peer { return nil }

func (l *local) Do(_ context.Context, _ bool, fn func(*coordinator.Coordinator) error, _ func(Peer) error) error {
	return l.h.Do(fn)
}
