//go:build go1.25

package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	"github.com/tenurehq/tenure/sdk/internal/inproc"
	"google.golang.org/protobuf/proto"
)

// The client's tests that need no tenure server: retries (on the clock of
// a testing/synctest bubble, against a handler served in memory), options,
// and answers of older servers. Its tests against a real server are in
// the server's module (internal/sdktests/client), which can run one.

var protocols = []string{client.ProtocolConnect, client.ProtocolJSON, client.ProtocolGRPC}

// inMemory returns a client of h, served in memory (see package inproc),
// with opts (HTTPClient set). Connect protocol only.
func inMemory(t *testing.T, h http.Handler, opts client.Options) *client.Client {
	t.Helper()
	opts.HTTPClient = inproc.Client(h)
	c, err := client.New("http://tenure.test", opts)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	return c
}

// failing answers every request with code and counts the requests; at
// records when each arrived, on the clock of the caller's bubble.
type failing struct {
	code  connect.Code
	count atomic.Int32
	at    []time.Time
}

func (f *failing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.count.Add(1)
	f.at = append(f.at, time.Now()) // one call at a time: no lock needed
	connect.NewErrorWriter().Write(w, r, connect.NewError(f.code, errors.New("injected by the test")))
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		url  string
		opts client.Options
		want string
	}{
		{"127.0.0.1:7070", client.Options{}, "http://"},
		{"ftp://host", client.Options{}, "http://"},
		{"http://", client.Options{}, "no host"},
		{"http://h:1/?a=b", client.Options{}, "query"},
		{"http://h\x00", client.Options{}, "not a URL"},
		{"http://h:1", client.Options{Protocol: "grpc-web"}, "Options.Protocol"},
		{"http://h:1", client.Options{MaxRetries: 1000}, "Options.MaxRetries"},
		{"http://h:1", client.Options{RetryBackoff: -1}, "Options.RetryBackoff"},
		{"http://h:1", client.Options{RetryBackoff: time.Minute}, "Options.RetryBackoff"},
	} {
		_, err := client.New(tc.url, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %+v) = %v; want an error mentioning %q", tc.url, tc.opts, err, tc.want)
		}
	}
	for _, url := range []string{"http://127.0.0.1:7070", "https://tenure.example.com/api/"} {
		for _, p := range append(protocols, "") {
			if _, err := client.New(url, client.Options{Protocol: p}); err != nil {
				t.Errorf("New(%q, %q): %v", url, p, err)
			}
		}
	}
}

// batchServer answers SubmitBatch with ids t0, t1, ... (t1 a duplicate),
// GetTask with a task of that id in queue "q", and CompleteBatch with item
// 1 failed; with wrong set, each answer names one item too few.
type batchServer struct {
	tenurev1connect.UnimplementedTaskServiceHandler
	tenurev1connect.UnimplementedWorkerServiceHandler
	wrong bool
}

func (s batchServer) SubmitBatch(_ context.Context, req *connect.Request[tenurev1.SubmitBatchRequest]) (*connect.Response[tenurev1.SubmitBatchResponse], error) {
	out := &tenurev1.SubmitBatchResponse{}
	for i := range req.Msg.GetRequests() {
		out.TaskIds, out.Duplicates = append(out.TaskIds, fmt.Sprintf("t%d", i)), append(out.Duplicates, i == 1)
	}
	if s.wrong {
		out.TaskIds = out.TaskIds[1:]
	}
	return connect.NewResponse(out), nil
}

func (batchServer) GetTask(_ context.Context, req *connect.Request[tenurev1.GetTaskRequest]) (*connect.Response[tenurev1.GetTaskResponse], error) {
	return connect.NewResponse(&tenurev1.GetTaskResponse{Task: &tenurev1.Task{TaskId: req.Msg.GetTaskId(), Queue: "q"}}), nil
}

func (s batchServer) CompleteBatch(_ context.Context, req *connect.Request[tenurev1.CompleteBatchRequest]) (*connect.Response[tenurev1.CompleteBatchResponse], error) {
	i := 1
	if s.wrong {
		i = len(req.Msg.GetItems())
	}
	return connect.NewResponse(&tenurev1.CompleteBatchResponse{Failed: []*tenurev1.CompleteResult{
		{TaskId: req.Msg.GetItems()[1].GetTaskId(), Index: uint32(i), Code: "not_found", Message: "no such task"},
	}}), nil
}

// TestBatchAnswers: the client turns a SubmitBatch's ids and duplicate
// flags into a result per request (reading each whole task with
// ReturnTasks), and a CompleteBatch's failures into an error per item,
// nil for the items not named; an answer that does not fit the request is
// an error.
func TestBatchAnswers(t *testing.T) {
	for _, wrong := range []bool{false, true} {
		mux := http.NewServeMux()
		mux.Handle(tenurev1connect.NewTaskServiceHandler(batchServer{wrong: wrong}))
		mux.Handle(tenurev1connect.NewWorkerServiceHandler(batchServer{wrong: wrong}))
		srv := httptest.NewServer(mux)
		c, err := client.New(srv.URL, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		reqs := []client.SubmitRequest{{Queue: "q"}, {Queue: "q"}}
		got, err := c.SubmitBatch(t.Context(), client.SubmitBatchRequest{Requests: reqs})
		want := []client.SubmitResult{{TaskID: "t0"}, {TaskID: "t1", Duplicate: true}}
		if wrong && (err == nil || !strings.Contains(err.Error(), "1 task ids and 2 duplicate flags for 2 requests")) {
			t.Errorf("SubmitBatch answered one id short: %+v, %v; want an error naming the counts", got, err)
		} else if !wrong && (err != nil || !slices.Equal(got, want)) {
			t.Errorf("SubmitBatch: %+v, %v; want %+v", got, err, want)
		}
		if !wrong {
			got, err = c.SubmitBatch(t.Context(), client.SubmitBatchRequest{Requests: reqs, ReturnTasks: true})
			if err != nil || len(got) != 2 || got[1].Task == nil || got[1].Task.ID != "t1" || got[1].Task.Queue != "q" || !got[1].Duplicate {
				t.Errorf("SubmitBatch with ReturnTasks: %+v, %v; want each whole task", got, err)
			}
		}
		res, err := c.CompleteBatch(t.Context(), client.CompleteBatchRequest{Items: []client.CompleteRequest{{TaskID: "a", LeaseID: "l"}, {TaskID: "b", LeaseID: "l"}, {TaskID: "c", LeaseID: "l"}}})
		errs := res.Errors
		if wrong && (err == nil || !strings.Contains(err.Error(), "does not fit the 3 items")) {
			t.Errorf("CompleteBatch answered a failure of item 3 of 3: %v, %v; want an error", errs, err)
		} else if !wrong && (err != nil || len(errs) != 3 || errs[0] != nil || !errors.Is(errs[1], client.ErrNotFound) || errs[2] != nil) {
			t.Errorf("CompleteBatch: %v, %v; want item 1 not found, the others done", errs, err)
		}
		srv.Close()
	}
}

// lateServer is a batchServer whose GetTask answers NOT_FOUND for task t1
// the first missing times (as a workflow's task placed in another
// partition in cluster mode, created there moments after the submit is
// answered), and for t0 always if lost; it counts the reads of each.
type lateServer struct {
	batchServer
	missing int32
	lost    bool
	reads   [2]atomic.Int32
}

func (s *lateServer) GetTask(ctx context.Context, req *connect.Request[tenurev1.GetTaskRequest]) (*connect.Response[tenurev1.GetTaskResponse], error) {
	notFound := false
	switch req.Msg.GetTaskId() {
	case "t0":
		s.reads[0].Add(1)
		notFound = s.lost
	case "t1":
		notFound = s.reads[1].Add(1) <= s.missing
	}
	if notFound {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such task"))
	}
	return s.batchServer.GetTask(ctx, req)
}

// TestSubmitBatchReturnTasksAsksAgain: with ReturnTasks, a task not found
// yet is asked again until it is there, and a task never found is asked a
// bounded number of times (21, within about 10 s of backoff) before
// SubmitBatch says reading it back failed, NOT_FOUND.
func TestSubmitBatchReturnTasksAsksAgain(t *testing.T) {
	reqs := []client.SubmitRequest{{Queue: "q"}, {Queue: "q"}}
	synctest.Test(t, func(t *testing.T) {
		s := &lateServer{missing: 3}
		mux := http.NewServeMux()
		mux.Handle(tenurev1connect.NewTaskServiceHandler(s))
		c := inMemory(t, mux, client.Options{})
		got, err := c.SubmitBatch(t.Context(), client.SubmitBatchRequest{Requests: reqs, ReturnTasks: true})
		if err != nil || len(got) != 2 || got[1].Task == nil || got[1].Task.ID != "t1" {
			t.Fatalf("SubmitBatch with ReturnTasks, t1 not found the first 3 times: %+v, %v; want t1 read", got, err)
		}
		if n := s.reads[1].Load(); n != 4 {
			t.Errorf("t1 was read %d times, want 4 (3 not found, then found)", n)
		}
		if n := s.reads[0].Load(); n != 1 {
			t.Errorf("t0, found at once, was read %d times, want 1", n)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s := &lateServer{lost: true}
		mux := http.NewServeMux()
		mux.Handle(tenurev1connect.NewTaskServiceHandler(s))
		c := inMemory(t, mux, client.Options{})
		start := time.Now()
		_, err := c.SubmitBatch(t.Context(), client.SubmitBatchRequest{Requests: reqs, ReturnTasks: true})
		if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "ReturnTasks") {
			t.Fatalf("SubmitBatch with ReturnTasks, t0 never found: %v; want NOT_FOUND, reading back failed", err)
		}
		if n := s.reads[0].Load(); n != 21 {
			t.Errorf("t0, never found, was read %d times, want 21", n)
		}
		if d := time.Since(start); d < 5*time.Second || d > 20*time.Second {
			t.Errorf("SubmitBatch gave up on t0 after %v; want about 10 s", d)
		}
	})
}

// TestRetryGivesUp: a call answered unavailable is tried 1 + MaxRetries
// times, then fails saying so.
func TestRetryGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &failing{code: connect.CodeUnavailable}
		c := inMemory(t, f, client.Options{MaxRetries: 2})
		_, err := c.Lease(t.Context(), client.LeaseRequest{WorkerID: "w", Queue: "q"})
		if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "tried 3 times") {
			t.Fatalf("Lease: %v; want unavailable, tried 3 times", err)
		}
		if got := f.count.Load(); got != 3 {
			t.Errorf("server saw %d requests, want 3 (1 + 2 retries)", got)
		}
	})
}

// TestRetryWaitsBackOff: each retry waits at least half the doubled
// backoff, and at most the whole of it: a call is not retried before its
// wait passed. The bubble's clock moves only while the client waits, so
// the times between the requests are the waits exactly.
func TestRetryWaitsBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &failing{code: connect.CodeUnavailable}
		c := inMemory(t, f, client.Options{MaxRetries: 2, RetryBackoff: time.Second})
		if err := c.Start(t.Context(), client.StartRequest{TaskID: "t", LeaseID: "l"}); !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("Start: %v; want unavailable", err)
		}
		if len(f.at) != 3 {
			t.Fatalf("server saw %d requests, want 3", len(f.at))
		}
		for retry, least := range []time.Duration{500 * time.Millisecond, time.Second} {
			if wait := f.at[retry+1].Sub(f.at[retry]); wait < least || wait > 2*least {
				t.Errorf("retry %d came %v after the try before; want %v to %v", retry+1, wait, least, 2*least)
			}
		}
	})
}

// TestRetryStopsWithContext: the backoff ends when ctx does.
func TestRetryStopsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &failing{code: connect.CodeUnavailable}
		c := inMemory(t, f, client.Options{MaxRetries: 100})
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := c.GetTask(ctx, client.GetTaskRequest{TaskID: "x"})
			errc <- err
		}()
		synctest.Wait() // in its first backoff wait, which only ctx can end
		if got := f.count.Load(); got != 1 {
			t.Fatalf("server saw %d requests before the wait, want 1", got)
		}
		cancel()
		err := <-errc
		if !errors.Is(err, context.Canceled) || !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("GetTask: %v; want the unavailable error and context.Canceled", err)
		}
	})
}

// TestInterceptors: interceptors run once per call, the first outermost,
// around the call's retries; each try sends the headers they added; they
// see the call's name, its error or its answer (Reply), and may end a call
// without making it.
func TestInterceptors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tries []string // the X-Trace header of each try
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tries = append(tries, r.Header.Get("X-Trace"))
			connect.NewErrorWriter().Write(w, r, connect.NewError(connect.CodeUnavailable, errors.New("injected by the test")))
		})
		var order []string
		outer := func(ctx context.Context, call *client.Call, next func(context.Context) error) error {
			order = append(order, "outer "+call.Op)
			call.Header.Set("X-Trace", "t-1")
			err := next(ctx)
			order = append(order, fmt.Sprintf("outer saw unavailable: %v", errors.Is(err, client.ErrUnavailable)))
			return err
		}
		inner := func(ctx context.Context, call *client.Call, next func(context.Context) error) error {
			order = append(order, "inner "+call.Header.Get("X-Trace"))
			return next(ctx)
		}
		c := inMemory(t, h, client.Options{MaxRetries: 2, Interceptors: []client.Interceptor{outer, inner}})
		if _, err := c.GetTask(t.Context(), client.GetTaskRequest{TaskID: "x"}); !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("GetTask: %v; want unavailable", err)
		}
		if want := "outer GetTask,inner t-1,outer saw unavailable: true"; strings.Join(order, ",") != want {
			t.Errorf("interceptors ran %q, want %q", strings.Join(order, ","), want)
		}
		if want := "t-1,t-1,t-1"; strings.Join(tries, ",") != want {
			t.Errorf("the tries carried X-Trace %q, want %q (three tries, each with the header)", strings.Join(tries, ","), want)
		}

		// The call's answer, as the server sent it, once next returned;
		// none before, and none after an error.
		var replies []proto.Message
		reply := func(ctx context.Context, call *client.Call, next func(context.Context) error) error {
			if call.Reply != nil {
				t.Errorf("%s: Reply %v before the call", call.Op, call.Reply)
			}
			err := next(ctx)
			replies = append(replies, call.Reply)
			return err
		}
		_, got := tenurev1connect.NewTaskServiceHandler(batchServer{})
		if _, err := inMemory(t, got, client.Options{Interceptors: []client.Interceptor{reply}}).GetTask(t.Context(), client.GetTaskRequest{TaskID: "t9"}); err != nil {
			t.Fatal(err)
		}
		if _, err := inMemory(t, h, client.Options{MaxRetries: -1, Interceptors: []client.Interceptor{reply}}).GetTask(t.Context(), client.GetTaskRequest{TaskID: "x"}); err == nil {
			t.Fatal("GetTask of a failing server succeeded")
		}
		want := &tenurev1.GetTaskResponse{Task: &tenurev1.Task{TaskId: "t9", Queue: "q"}}
		if len(replies) != 2 || !proto.Equal(replies[0], want) || replies[1] != nil {
			t.Errorf("Call.Reply after a call that succeeded and one that failed: %v; want %v and nil", replies, want)
		}

		refused := errors.New("refused by the interceptor")
		tries = nil
		c = inMemory(t, h, client.Options{Interceptors: []client.Interceptor{
			func(context.Context, *client.Call, func(context.Context) error) error { return refused },
		}})
		if _, err := c.Submit(t.Context(), client.SubmitRequest{Queue: "q"}); err != refused || len(tries) != 0 {
			t.Errorf("Submit through an interceptor that refuses it: %v with %d tries; want its error and no try", err, len(tries))
		}
		if _, err := client.New("http://h:1", client.Options{Interceptors: []client.Interceptor{nil}}); err == nil || !strings.Contains(err.Error(), "Interceptors[0]") {
			t.Errorf("New with a nil interceptor: %v; want an error naming it", err)
		}
	})
}

// noTask answers GetTask, KillTask and RetryTask without the task.
type noTask struct {
	tenurev1connect.UnimplementedTaskServiceHandler
}

func (noTask) GetTask(context.Context, *connect.Request[tenurev1.GetTaskRequest]) (*connect.Response[tenurev1.GetTaskResponse], error) {
	return connect.NewResponse(&tenurev1.GetTaskResponse{}), nil
}

func (noTask) KillTask(context.Context, *connect.Request[tenurev1.KillTaskRequest]) (*connect.Response[tenurev1.KillTaskResponse], error) {
	return connect.NewResponse(&tenurev1.KillTaskResponse{}), nil
}

func (noTask) RetryTask(context.Context, *connect.Request[tenurev1.RetryTaskRequest]) (*connect.Response[tenurev1.RetryTaskResponse], error) {
	return connect.NewResponse(&tenurev1.RetryTaskResponse{}), nil
}

// TestAnswerWithoutATask: an answer that lacks the task it must carry is
// a server bug, and the error says so, naming the call and, for an
// action, how to see whether it took effect.
func TestAnswerWithoutATask(t *testing.T) {
	_, h := tenurev1connect.NewTaskServiceHandler(noTask{})
	c := inMemory(t, h, client.Options{})
	for call, do := range map[string]func() (*client.Task, error){
		"client: GetTask: the server answered without a task (a server bug)": func() (*client.Task, error) {
			return c.GetTask(t.Context(), client.GetTaskRequest{TaskID: "t"})
		},
		"client: KillTask: the server answered without a task (a server bug); GetTask shows whether it was killed": func() (*client.Task, error) {
			return c.KillTask(t.Context(), client.KillTaskRequest{TaskID: "t"})
		},
		"client: RetryTask: the server answered without a task (a server bug); GetTask shows whether it was retried": func() (*client.Task, error) {
			return c.RetryTask(t.Context(), client.RetryTaskRequest{TaskID: "t"})
		},
	} {
		if task, err := do(); task != nil || err == nil || err.Error() != call {
			t.Errorf("%v, %v; want the error %q", task, err, call)
		}
	}
}
