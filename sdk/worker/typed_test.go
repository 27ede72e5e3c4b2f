//go:build go1.25

package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/worker"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// scripted is a WorkerService that leases the tasks it holds, once each,
// and records every report: "complete t1 <result>", "commit t1 <result>",
// "fail t1 permanent <reason>"; and the queues each Lease named.
type scripted struct {
	tenurev1connect.UnimplementedWorkerServiceHandler

	mu      sync.Mutex
	tasks   []*tenurev1.LeasedTask
	reports []string
	queues  [][]string
	done    chan struct{} // closed when every task has a final report
	left    int
}

func newScripted(tasks ...*tenurev1.LeasedTask) *scripted {
	for i, t := range tasks {
		t.LeaseId = fmt.Sprint("l", i)
		t.Attempt = max(t.Attempt, 1)
		t.LeaseExpiry = timestamppb.New(time.Now().Add(time.Minute))
		t.ExecutionWindow = durationpb.New(time.Minute)
	}
	return &scripted{tasks: tasks, done: make(chan struct{}), left: len(tasks)}
}

func (s *scripted) report(final bool, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports = append(s.reports, fmt.Sprintf(format, args...))
	if final {
		if s.left--; s.left == 0 {
			close(s.done)
		}
	}
}

func (s *scripted) Lease(ctx context.Context, req *connect.Request[tenurev1.LeaseRequest]) (*connect.Response[tenurev1.LeaseResponse], error) {
	s.mu.Lock()
	qs := req.Msg.GetQueues()
	if len(qs) == 0 {
		qs = []string{req.Msg.GetQueue()}
	}
	s.queues = append(s.queues, qs)
	n := min(int(req.Msg.GetMaxTasks()), len(s.tasks))
	out := s.tasks[:n]
	s.tasks = s.tasks[n:]
	s.mu.Unlock()
	if len(out) == 0 {
		<-ctx.Done()
	}
	return connect.NewResponse(&tenurev1.LeaseResponse{Tasks: out}), nil
}

func (s *scripted) Commit(_ context.Context, req *connect.Request[tenurev1.CommitRequest]) (*connect.Response[tenurev1.CommitResponse], error) {
	s.report(false, "commit %s %s", req.Msg.GetTaskId(), req.Msg.GetResult())
	return connect.NewResponse(&tenurev1.CommitResponse{FencingToken: &tenurev1.FencingToken{TaskId: req.Msg.GetTaskId(), Attempt: 1}}), nil
}

func (s *scripted) CompleteBatch(_ context.Context, req *connect.Request[tenurev1.CompleteBatchRequest]) (*connect.Response[tenurev1.CompleteBatchResponse], error) {
	for _, it := range req.Msg.GetItems() {
		s.report(true, "complete %s %s", it.GetTaskId(), it.GetResult())
	}
	return connect.NewResponse(&tenurev1.CompleteBatchResponse{}), nil
}

func (s *scripted) Fail(_ context.Context, req *connect.Request[tenurev1.FailRequest]) (*connect.Response[tenurev1.FailResponse], error) {
	how := "retry"
	st := tenurev1.TaskState_TASK_STATE_WAITING
	if req.Msg.GetPermanent() {
		how, st = "permanent", tenurev1.TaskState_TASK_STATE_FAILED
	}
	s.report(true, "fail %s %s %s", req.Msg.GetTaskId(), how, req.Msg.GetReason())
	return connect.NewResponse(&tenurev1.FailResponse{State: st}), nil
}

func (s *scripted) GetTask(_ context.Context, req *connect.Request[tenurev1.GetTaskRequest]) (*connect.Response[tenurev1.GetTaskResponse], error) {
	return nil, connect.NewError(connect.CodeNotFound, errors.New("not kept by the test"))
}

// run serves s, runs a worker of queues with opts until every task has a
// final report, and returns the reports, sorted.
func (s *scripted) run(t *testing.T, queues []string, opts worker.Options, register func(*worker.Worker)) []string {
	t.Helper()
	_, h := tenurev1connect.NewWorkerServiceHandler(s)
	c := inMemory(t, h)
	opts.Queues = queues
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w, err := worker.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	recv(t, s.done, "every task's report")
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(slices.Values(s.reports))
}

func args(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

type resize struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

func (resize) Kind() string { return "resize" }

// TestTypedRouting: a worker of two queues leases from both in one call,
// routes each task by its kind to the handler of its type with its
// arguments decoded, completes it with the handler's result (encoded, or
// as it is for []byte), and fails for good, saying why, a task of a kind
// it does not know and one whose payload does not decode.
func TestTypedRouting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted(
			&tenurev1.LeasedTask{TaskId: "e1", Queue: "emails", Kind: "send_email", Payload: args(sendEmail{To: "ada@example.com"})},
			&tenurev1.LeasedTask{TaskId: "r1", Queue: "images", Kind: "resize", Payload: args(resize{Image: "a.png", Width: 64})},
			&tenurev1.LeasedTask{TaskId: "x1", Queue: "images", Kind: "transcode", Payload: []byte("{}")},
			&tenurev1.LeasedTask{TaskId: "e2", Queue: "emails", Kind: "send_email", Payload: []byte("not json")},
			&tenurev1.LeasedTask{TaskId: "n1", Queue: "emails", Payload: []byte("raw bytes")},
		)
		var mu sync.Mutex
		var sent []string
		got := s.run(t, []string{"emails", "images"}, worker.Options{Concurrency: 8}, func(w *worker.Worker) {
			worker.Handle(w, func(ctx context.Context, t *worker.Task[sendEmail]) error {
				mu.Lock()
				sent = append(sent, t.Args.To+" via "+t.Queue)
				mu.Unlock()
				return nil
			})
			worker.HandleResult(w, func(ctx context.Context, t *worker.Task[resize]) (string, error) {
				return fmt.Sprintf("%s@%d", t.Args.Image, t.Args.Width), nil
			})
			worker.HandleRaw(w, "", func(ctx context.Context, t *worker.Task[[]byte]) ([]byte, error) {
				return append([]byte("echo "), t.Args...), nil
			}, nil)
		})
		want := []string{
			"complete e1 ",
			"complete n1 echo raw bytes",
			`complete r1 "a.png@64"`,
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("no report %q in %q", w, got)
			}
		}
		if len(got) != 5 {
			t.Errorf("reports %q; want one per task", got)
		}
		for _, r := range got {
			switch {
			case strings.HasPrefix(r, "fail x1 "):
				if !strings.HasPrefix(r, `fail x1 permanent worker: no handler for kind "transcode"`) || !strings.Contains(r, "(none), resize, send_email") {
					t.Errorf("the task of an unknown kind: %q; want it failed for good, naming its kind and those the worker handles", r)
				}
			case strings.HasPrefix(r, "fail e2 "):
				if !strings.HasPrefix(r, "fail e2 permanent worker: the payload of task e2 (kind \"send_email\") does not decode into a worker_test.sendEmail") {
					t.Errorf("the task whose payload does not decode: %q; want it failed for good, saying so", r)
				}
			}
		}
		if len(sent) != 1 || sent[0] != "ada@example.com via emails" {
			t.Errorf("the send_email handler ran for %q; want once, with the decoded arguments", sent)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.queues) == 0 || !slices.Equal(s.queues[0], []string{"emails", "images"}) {
			t.Errorf("Lease calls named %q; want both queues in one call", s.queues)
		}
	})
}

type charge struct {
	Card   string `json:"card"`
	Amount int    `json:"amount"`
}

func (charge) Kind() string { return "charge" }

type receipt struct {
	ID string `json:"id"`
}

// TestHandleEffects: compute's result is committed before apply runs with
// it and the fencing token, then the task completes; on a finalisation
// lease apply runs with the committed result, decoded, and compute does
// not run.
func TestHandleEffects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted(
			&tenurev1.LeasedTask{TaskId: "c1", Queue: "billing", Kind: "charge", Payload: args(charge{Card: "4242", Amount: 5})},
			&tenurev1.LeasedTask{TaskId: "c2", Queue: "billing", Kind: "charge", Payload: args(charge{Card: "1111", Amount: 7}),
				Committed: true, CommittedResult: args(receipt{ID: "rc-2"}), Attempt: 2},
		)
		var mu sync.Mutex
		var log []string
		got := s.run(t, []string{"billing"}, worker.Options{}, func(w *worker.Worker) {
			worker.HandleEffects(w, func(ctx context.Context, t *worker.Task[charge]) (receipt, error) {
				mu.Lock()
				log = append(log, "compute "+t.ID)
				mu.Unlock()
				return receipt{ID: "rc-" + t.ID}, nil
			}, func(ctx context.Context, t *worker.Task[charge], r receipt, tok worker.FencingToken) error {
				mu.Lock()
				log = append(log, fmt.Sprintf("apply %s %s card %s token %s/%d", t.ID, r.ID, t.Args.Card, tok.TaskID, tok.Attempt))
				mu.Unlock()
				return nil
			})
		})
		if want := []string{"commit c1 " + string(args(receipt{ID: "rc-c1"})), "complete c1 ", "complete c2 "}; !slices.Equal(got, want) {
			t.Errorf("reports %q; want %q", got, want)
		}
		slices.Sort(log)
		want := []string{"apply c1 rc-c1 card 4242 token c1/1", "apply c2 rc-2 card 1111 token c2/2", "compute c1"}
		if !slices.Equal(log, want) {
			t.Errorf("ran %q; want %q", log, want)
		}
	})
}

// TestMiddleware: middleware runs around each attempt, the first
// outermost, sees the task and how its attempt ended (the server's
// answer), and the ctx it passes reaches the handler; a handler's panic
// reaches it as a *PanicError.
func TestMiddleware(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScripted(
			&tenurev1.LeasedTask{TaskId: "ok", Queue: "q", Kind: "send_email", Payload: args(sendEmail{To: "a"})},
			&tenurev1.LeasedTask{TaskId: "boom", Queue: "q", Kind: "send_email", Payload: args(sendEmail{To: "panic"})},
		)
		type key struct{}
		var mu sync.Mutex
		var seen []string
		mw := func(name string) worker.Middleware {
			return func(ctx context.Context, t *client.LeasedTask, next func(context.Context) worker.Finish) worker.Finish {
				mu.Lock()
				seen = append(seen, name+" before "+t.ID)
				mu.Unlock()
				f := next(context.WithValue(ctx, key{}, name))
				var p *worker.PanicError
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%s after %s: %s panic=%v", name, t.ID, f.Outcome, errors.As(f.Err, &p) && p.Value == "no recipient"))
				mu.Unlock()
				return f
			}
		}
		var values []any
		s.run(t, []string{"q"}, worker.Options{Middleware: []worker.Middleware{mw("outer"), mw("inner")}}, func(w *worker.Worker) {
			worker.Handle(w, func(ctx context.Context, t *worker.Task[sendEmail]) error {
				mu.Lock()
				values = append(values, ctx.Value(key{}))
				mu.Unlock()
				if t.Args.To == "panic" {
					panic("no recipient")
				}
				return nil
			})
		})
		mu.Lock()
		defer mu.Unlock()
		for _, id := range []string{"ok", "boom"} {
			var mine []string
			for _, s := range seen {
				if strings.Contains(s, " "+id) {
					mine = append(mine, s)
				}
			}
			outcome, panicked := "completed", false
			if id == "boom" {
				outcome, panicked = "retrying", true
			}
			want := []string{"outer before " + id, "inner before " + id,
				fmt.Sprintf("inner after %s: %s panic=%v", id, outcome, panicked), fmt.Sprintf("outer after %s: %s panic=%v", id, outcome, panicked)}
			if !slices.Equal(mine, want) {
				t.Errorf("middleware around %s: %q; want %q", id, mine, want)
			}
		}
		if len(values) != 2 || values[0] != "inner" || values[1] != "inner" {
			t.Errorf("the handlers' ctx held %v; want the innermost middleware's value", values)
		}
	})
}
