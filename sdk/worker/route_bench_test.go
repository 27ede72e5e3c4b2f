package worker

import (
	"context"
	"testing"

	"github.com/tenurehq/tenure/sdk/client"
)

// benchArgs is the typed task of `tenure bench --runtime --typed`: a
// number and 64 characters.
type benchArgs struct {
	N    int    `json:"n"`
	Body string `json:"body"`
}

func (benchArgs) Kind() string { return "bench" }

// BenchmarkRoute is what a worker pays, per task, to route a leased task
// to its handler and call it, for a no-op handler: raw (HandleOther, the
// payload as it is) and typed (Handle, the payload decoded from JSON with
// the default codec). The difference is the typed path's own cost, which
// `tenure bench --runtime --typed` measures end to end.
func BenchmarkRoute(b *testing.B) {
	ctx := context.Background()
	run := func(b *testing.B, w *Worker, lt *client.LeasedTask) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			r := w.routeOf(lt.Kind)
			if r == nil {
				b.Fatalf("no route for kind %q", lt.Kind)
			}
			if _, err := r.run(ctx, lt); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("raw", func(b *testing.B) {
		w := &Worker{codec: client.JSON, routes: map[string]*route{}}
		HandleOther(w, func(context.Context, *Task[[]byte]) ([]byte, error) { return nil, nil }, nil)
		run(b, w, &client.LeasedTask{ID: "t", Payload: make([]byte, 64)})
	})
	b.Run("typed", func(b *testing.B) {
		w := &Worker{codec: client.JSON, routes: map[string]*route{}}
		Handle(w, func(_ context.Context, t *Task[benchArgs]) error {
			if t.Args.N != 12345 || len(t.Args.Body) != 64 {
				b.Fatalf("decoded %+v", t.Args)
			}
			return nil
		})
		run(b, w, &client.LeasedTask{ID: "t", Kind: "bench",
			Payload: []byte(`{"n":12345,"body":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`)})
	})
}
