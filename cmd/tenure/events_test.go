package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/apitest"
	"github.com/tenurehq/tenure/internal/eventually"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/client"
)

// hookReceiver is an HTTP endpoint that fails some deliveries, and keeps
// what it accepted.
type hookReceiver struct {
	t      *testing.T
	secret []byte
	mu     sync.Mutex
	rnd    *rand.Rand
	// firsts: the event ids in the order of their first delivery;
	// acked: the ids answered 2xx at least once; deliveries counts every
	// accepted delivery; badSig the deliveries whose signature did not
	// verify.
	firsts     []string
	seen       map[string]*tenurev1.Event
	acked      map[string]bool
	deliveries int
	failed     int
	badSig     int
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !hmac.Equal([]byte(r.Header.Get(signatureHeader)), []byte(sign(h.secret, body))) {
		h.badSig++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	// 30% of the deliveries fail: half before the endpoint takes the
	// event, half after (the sender cannot tell, and delivers it again).
	roll := h.rnd.Float64()
	if roll < 0.15 {
		h.failed++
		http.Error(w, "unlucky", http.StatusServiceUnavailable)
		return
	}
	var ev tenurev1.Event
	if err := protojson.Unmarshal(body, &ev); err != nil {
		h.t.Errorf("a delivery is not an event: %v: %s", err, body)
	}
	id := r.Header.Get(eventIDHeader)
	if want := fmt.Sprintf("%d:%d", ev.GetPartition(), ev.GetLsn()); id != want || r.Header.Get(eventTypeHeader) != ev.GetType() || r.Header.Get(cursorHeader) != ev.GetCursor() {
		h.t.Errorf("headers %v of event %s", r.Header, want)
	}
	h.deliveries++
	if h.seen[id] == nil {
		h.seen[id] = &ev
		h.firsts = append(h.firsts, id)
	}
	if roll < 0.30 {
		h.failed++
		http.Error(w, "took it, then failed", http.StatusInternalServerError)
		return
	}
	h.acked[id] = true
}

// serveOn serves h on addr ("" for a new port) until the returned stop.
func serveOn(t *testing.T, addr string, h http.Handler) (string, func()) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	return ln.Addr().String(), func() { srv.Close() }
}

// TestEventsPost: `tenure events --follow --post` delivers every event of
// the log at least once, signed, the first delivery of each in log order
// (so every task's events in order), to an endpoint that fails 30% of the
// deliveries and is restarted once, while tasks are submitted and worked
// and the command itself is stopped and started again on its cursor file.
func TestEventsPost(t *testing.T) {
	t.Parallel()
	addr := startInProcess(t)
	dir := t.TempDir()
	secret, cursorFile := filepath.Join(dir, "secret"), filepath.Join(dir, "cursor")
	if err := os.WriteFile(secret, []byte("a shared secret of 32 bytes, ok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hook := &hookReceiver{t: t, secret: []byte("a shared secret of 32 bytes, ok"), rnd: rand.New(rand.NewPCG(38, 1)), seen: map[string]*tenurev1.Event{}, acked: map[string]bool{}}
	hookAddr, stopHook := serveOn(t, "", hook)
	post := func(ctx context.Context) <-chan int {
		done := make(chan int, 1)
		go func() {
			var out, errs bytes.Buffer
			done <- run(ctx, []string{"events", "--addr", addr, "--follow", "--from", "oldest", "--post", "http://" + hookAddr + "/hook",
				"--secret-file", secret, "--cursor-file", cursorFile}, &out, &errs)
		}()
		return done
	}
	ctx1, stop1 := context.WithCancel(t.Context())
	first := post(ctx1)

	c := sdk(t, addr)
	const tasks = 60
	for i := range tasks {
		if _, err := c.Submit(t.Context(), client.SubmitRequest{Queue: "hooks", Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	received := func() int {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		return len(hook.firsts)
	}
	eventually.True(t, "a third of the creations delivered", func() bool { return received() >= tasks/3 })
	// The endpoint restarts: down for a moment, then back on its address.
	stopHook()
	time.Sleep(200 * time.Millisecond)
	_, stopHook = serveOn(t, hookAddr, hook)
	defer func() { stopHook() }()
	eventually.True(t, "half the creations delivered", func() bool { return received() >= tasks/2 })
	// The command stops (SIGTERM) and starts again from its cursor file.
	stop1()
	if code := <-first; code != 0 {
		t.Fatalf("tenure events --post stopped with exit %d", code)
	}
	ctx2, stop2 := context.WithCancel(t.Context())
	defer stop2()
	second := post(ctx2)
	work(t, c, tasks)
	last := apitest.LastLSN(t, c)
	// The command moves on from an event only once the endpoint answered
	// 2xx, so the last event acknowledged is every event delivered; its
	// first receipt is not (the endpoint may have failed it after taking
	// it, and the command is still trying it again).
	eventually.True(t, fmt.Sprintf("every event up to lsn %d delivered", last), func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		return hook.acked[fmt.Sprintf("0:%d", last)]
	})
	stop2()
	if code := <-second; code != 0 {
		t.Fatalf("the second tenure events --post stopped with exit %d", code)
	}

	hook.mu.Lock()
	defer hook.mu.Unlock()
	for i, id := range hook.firsts {
		if want := fmt.Sprintf("0:%d", i+1); id != want {
			t.Fatalf("delivery %d was first of event %s, want %s: events first delivered out of order", i, id, want)
		}
	}
	if hook.badSig != 0 || hook.failed == 0 || hook.deliveries <= len(hook.firsts) {
		t.Fatalf("%d bad signatures, %d failed deliveries, %d deliveries of %d events", hook.badSig, hook.failed, hook.deliveries, len(hook.firsts))
	}
	t.Logf("%d events delivered at least once in log order, %d deliveries, %d failed, every signature verified", len(hook.firsts), hook.deliveries, hook.failed)
	if b, _ := os.ReadFile(cursorFile); !strings.HasPrefix(string(b), hook.seen[hook.firsts[len(hook.firsts)-1]].GetCursor()) {
		t.Fatalf("the cursor file holds %q, not the last event's cursor", b)
	}
}

// work leases and completes n tasks of queue hooks.
func work(t *testing.T, c *client.Client, n int) {
	t.Helper()
	for done := 0; done < n; {
		leased, err := c.Lease(t.Context(), client.LeaseRequest{WorkerID: "w", Queue: "hooks", MaxTasks: min(10, n-done), Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for _, lt := range leased.Tasks {
			if err := c.Complete(t.Context(), client.CompleteRequest{TaskID: lt.ID, LeaseID: lt.LeaseID}); err != nil {
				t.Fatal(err)
			}
			done++
		}
	}
}

// streamRecorder is a proxy in front of a server that keeps the messages
// of every WatchEvents answer as they pass (Connect streaming, protobuf).
type streamRecorder struct {
	t    *testing.T
	mu   sync.Mutex
	msgs []*tenurev1.WatchEventsResponse
}

func (r *streamRecorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if ct := req.Header.Get("Content-Type"); ct != "application/connect+proto" {
			r.t.Errorf("the SDK streams with %q; this recorder reads application/connect+proto", ct)
		}
		h.ServeHTTP(&envelopes{ResponseWriter: w, r: r}, req)
	})
}

// envelopes passes a stream's answer on and decodes its envelopes as
// they come: a flag byte, a 4-byte length, the message; flag 2 marks the
// end of the stream (its trailer).
type envelopes struct {
	http.ResponseWriter
	r   *streamRecorder
	buf []byte
}

func (e *envelopes) Unwrap() http.ResponseWriter { return e.ResponseWriter }

func (e *envelopes) Write(b []byte) (int, error) {
	e.buf = append(e.buf, b...)
	for len(e.buf) >= 5 {
		n := int(e.buf[1])<<24 | int(e.buf[2])<<16 | int(e.buf[3])<<8 | int(e.buf[4])
		if len(e.buf) < 5+n {
			break
		}
		if e.buf[0]&2 == 0 {
			m := &tenurev1.WatchEventsResponse{}
			if err := proto.Unmarshal(e.buf[5:5+n], m); err != nil {
				e.r.t.Errorf("recorder: %v", err)
			}
			e.r.mu.Lock()
			e.r.msgs = append(e.r.msgs, m)
			e.r.mu.Unlock()
		}
		e.buf = e.buf[5+n:]
	}
	return e.ResponseWriter.Write(b)
}

// TestCLIEventsJSONIsTheAPIsAnswers: `tenure events --json` prints each
// answer of the stream as the server sent it, one protojson object a line;
// without --follow it stops at the answer that caught up.
func TestCLIEventsJSONIsTheAPIsAnswers(t *testing.T) {
	t.Parallel()
	target := startInProcess(t)
	c := sdk(t, target)
	for i := range 5 {
		if _, err := c.Submit(t.Context(), client.SubmitRequest{Queue: "hooks", Payload: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	work(t, c, 2)
	u, _ := url.Parse(target)
	rec := &streamRecorder{t: t}
	srv := httptest.NewServer(rec.wrap(httputil.NewSingleHostReverseProxy(u)))
	defer srv.Close()
	out := mustCLI(t, "events", "--json", "--addr", srv.URL, "--queue", "hooks", "--namespace", "default")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	// The proxy reads the stream's answers once the stream ends.
	eventually.True(t, "the proxy saw the stream", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.msgs) >= len(lines)
	})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(lines) != len(rec.msgs) || len(lines) < 2 {
		t.Fatalf("printed %d lines for %d answers:\n%s", len(lines), len(rec.msgs), out)
	}
	events := 0
	for i, m := range rec.msgs {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if api := compact(t, "the API's answer", b); lines[i] != api {
			t.Errorf("line %d is\n%s\nnot the API's answer\n%s", i, lines[i], api)
		}
		events += len(m.GetEvents())
	}
	if last := rec.msgs[len(rec.msgs)-1]; !last.GetCaughtUp() || events != 5+2*2 {
		t.Fatalf("the last answer printed is %v, after %d events; want the one that caught up, after 9", last, events)
	}

	// The text: a line an event.
	text := mustCLI(t, "events", "--addr", target, "--type", "TaskCompleted")
	if got := strings.Count(text, "TaskCompleted"); got != 2 || !strings.Contains(text, "default/hooks") {
		t.Fatalf("tenure events --type TaskCompleted printed\n%s", text)
	}
}

// TestCLIEventsWorkflow: `tenure events --workflow` prints the events of
// that workflow's tasks only, of namespace default unless told.
func TestCLIEventsWorkflow(t *testing.T) {
	t.Parallel()
	target := startInProcess(t)
	c := sdk(t, target)
	ids := map[string][]string{}
	for _, wf := range []string{"wf-a", "wf-b"} {
		res, err := c.SubmitBatch(t.Context(), client.SubmitBatchRequest{WorkflowID: wf,
			Requests: []client.SubmitRequest{{Queue: "hooks", Payload: []byte(wf)}, {Queue: "hooks", Payload: []byte(wf)}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			ids[wf] = append(ids[wf], r.TaskID)
		}
	}
	work(t, c, 4)
	out := mustCLI(t, "events", "--addr", target, "--workflow", "wf-a")
	// Its TasksSubmitted, then a lease and a completion for each task.
	if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != 1+2*2 || !strings.Contains(out, "TasksSubmitted") {
		t.Fatalf("tenure events --workflow wf-a printed %d lines:\n%s", n, out)
	}
	for _, id := range ids["wf-a"] {
		if strings.Count(out, id) != 2 {
			t.Errorf("task %s of wf-a is on %d lines, want 2:\n%s", id, strings.Count(out, id), out)
		}
	}
	for _, id := range ids["wf-b"] {
		if strings.Contains(out, id) {
			t.Errorf("task %s of wf-b was printed:\n%s", id, out)
		}
	}
	if other := mustCLI(t, "events", "--addr", target, "--workflow", "wf-a", "--namespace", "other"); strings.Contains(other, ids["wf-a"][0]) {
		t.Fatalf("wf-a of namespace other printed default's:\n%s", other)
	}
}
