package e2e

// Browser tests of the dashboard (docs/guides/dashboard.md): headless
// Chromium (Debian's chromium, driven over the DevTools protocol with
// chromedp) against a real `tenure server` process, embedded and a
// three-node cluster, with authentication on and off. Everything is
// asserted on the page's content; the waits only bound a hung test. Each
// page's screenshot is saved to $TENURE_SCREENSHOTS (default: the test's
// temporary directory).

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenurehq/tenure/internal/auth"
	"github.com/tenurehq/tenure/internal/auth/authtest"
	"github.com/tenurehq/tenure/internal/eventually"
	"github.com/tenurehq/tenure/internal/outbox/outboxtest"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// browserWait bounds one run of browser actions: it only fails a hung
// test. (A wait for the page to show something is until's.)
const browserWait = 30 * time.Second

// chromium is the browser the tests drive ($TENURE_CHROMIUM, default
// Debian's).
func chromium() string {
	if p := os.Getenv("TENURE_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// browser is one headless Chromium tab, with what its console reported.
type browser struct {
	t     *testing.T
	ctx   context.Context
	shots string
	mu    sync.Mutex
	errs  []string
	// allowNetwork is a part of a failed request's console message that
	// is expected (the 401 of asking without a token).
	allowNetwork string
}

// newBrowser starts headless Chromium for t. Without it the test is
// skipped, or fails under CI (CI=true), which installs it.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	if _, err := exec.LookPath(chromium()); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("browser test: %s is not installed (.ci/run installs Debian's chromium)", chromium())
		}
		t.Skipf("browser test: %s is not installed: apt-get install -y chromium (or set TENURE_CHROMIUM)", chromium())
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium()),
		chromedp.NoSandbox, // the tests may run as root
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("lang", "en-US"),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	// chromedp reports events it does not know (a newer browser's) as
	// errors: they are not the page's, so they are only logged.
	ctx, cancelCtx := chromedp.NewContext(alloc, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "unhandled") {
			t.Logf("chromedp: %s", msg)
		}
	}))
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})
	shots := os.Getenv("TENURE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, ctx: ctx, shots: shots}
	chromedp.ListenTarget(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeAssert {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				b.fail("console.error: " + strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			b.fail("uncaught: " + ev.ExceptionDetails.Error())
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.LevelError {
				b.mu.Lock()
				allowed := b.allowNetwork != "" && ev.Entry.Source == cdplog.SourceNetwork && strings.Contains(ev.Entry.Text, b.allowNetwork)
				b.mu.Unlock()
				if !allowed {
					b.fail(fmt.Sprintf("console (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
				}
			}
		}
	})
	if err := chromedp.Run(ctx, cdplog.Enable(), runtime.Enable()); err != nil {
		t.Fatalf("starting %s: %v", chromium(), err)
	}
	return b
}

func (b *browser) fail(msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, msg)
}

// run runs actions in the tab, failing the test on an error.
func (b *browser) run(what string, actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserWait)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\npage text:\n%s", what, err, b.text())
	}
}

// open loads url (a new document: the page starts again).
func (b *browser) open(url string) {
	b.t.Helper()
	b.run("open "+url, chromedp.Navigate(url))
}

// goTo follows a hash address within the page, as a link does.
func (b *browser) goTo(hash string) {
	b.t.Helper()
	b.run("go to "+hash, chromedp.Evaluate(fmt.Sprintf("location.hash = %q", hash), nil))
}

// text is the page's visible text, for failure messages.
func (b *browser) text() string {
	var s string
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	_ = chromedp.Run(ctx, chromedp.Evaluate(`document.body ? document.body.innerText : ""`, &s))
	return s
}

// until waits until the JavaScript expression cond is true
// (eventually), failing the test with what and the page's text if it does
// not become so. An evaluation that meets a document being replaced (a
// navigation) is tried again.
func (b *browser) until(what, cond string) {
	b.t.Helper()
	err := eventually.Wait(func() error {
		var ok bool
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		err := chromedp.Run(ctx, chromedp.Evaluate("Boolean("+cond+")", &ok))
		cancel()
		if err == nil && !ok {
			err = eventually.ErrNotYet
		}
		return err
	})
	if err != nil {
		b.t.Fatalf("%s: not shown: %v\npage text:\n%s", what, err, b.text())
	}
}

// eval returns the value of a JavaScript expression.
func (b *browser) eval(expr string, out any) {
	b.t.Helper()
	b.run("evaluate "+expr, chromedp.Evaluate(expr, out))
}

// textOf is a JavaScript expression: the trimmed text of the first match
// of a CSS selector ("" if none).
func textOf(sel string) string {
	return fmt.Sprintf(`(document.querySelector(%q)?.innerText ?? "").trim()`, sel)
}

// button is the XPath of the enabled-or-not button whose text is label.
func button(label string) string {
	return fmt.Sprintf(`//button[normalize-space()=%q]`, label)
}

// click clicks the first match of an XPath.
func (b *browser) click(xpath string) {
	b.t.Helper()
	b.run("click "+xpath, chromedp.Click(xpath, chromedp.BySearch))
}

// shot saves a screenshot of the whole page as name.png.
func (b *browser) shot(name string) {
	b.t.Helper()
	var png []byte
	b.run("screenshot "+name, chromedp.FullScreenshot(&png, 100))
	path := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot %s", path)
}

// phone and laptop set the viewport's size.
func (b *browser) viewport(w, h int64, mobile bool) {
	b.t.Helper()
	b.run("viewport", emulation.SetDeviceMetricsOverride(w, h, 1, mobile))
}

// checkBasics checks what a Lighthouse audit would, on the page as it is:
// every control (button, link, text box, select, checkbox) has an
// accessible name in the browser's accessibility tree, the page does not
// scroll sideways, and nothing was reported on the console so far.
func (b *browser) checkBasics(page string) {
	b.t.Helper()
	// The raw answer of Accessibility.getFullAXTree: only what is checked
	// here, so that a newer browser's additions cannot break the decoding.
	type value struct {
		Value any `json:"value"`
	}
	var tree struct {
		Nodes []struct {
			NodeID  string `json:"nodeId"`
			Ignored bool   `json:"ignored"`
			Role    *value `json:"role"`
			Name    *value `json:"name"`
		} `json:"nodes"`
	}
	b.run("accessibility tree of "+page, chromedp.ActionFunc(func(ctx context.Context) error {
		return cdp.Execute(ctx, "Accessibility.getFullAXTree", map[string]any{}, &tree)
	}))
	controls := map[string]bool{"button": true, "link": true, "textbox": true, "searchbox": true, "combobox": true, "checkbox": true, "listbox": true, "menuitem": true}
	seen := 0
	for _, n := range tree.Nodes {
		if n.Ignored || n.Role == nil {
			continue
		}
		role, _ := n.Role.Value.(string)
		if !controls[role] {
			continue
		}
		seen++
		name := ""
		if n.Name != nil {
			name, _ = n.Name.Value.(string)
		}
		if strings.TrimSpace(name) == "" {
			b.t.Errorf("%s: a %s has no accessible name (node %s)", page, role, n.NodeID)
		}
	}
	if seen == 0 {
		b.t.Errorf("%s: the accessibility tree shows no control at all", page)
	}
	var overflow bool
	b.eval(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow)
	if overflow {
		b.t.Errorf("%s: the page scrolls sideways", page)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		b.t.Errorf("%s: %s", page, e)
	}
	b.errs = nil
}

// api is the Go side of a test: the clients of one server, with a token.
type api struct {
	tasks     tenurev1connect.TaskServiceClient
	worker    tenurev1connect.WorkerServiceClient
	queues    tenurev1connect.QueueServiceClient
	schedules tenurev1connect.ScheduleServiceClient
	token     string
}

func newAPI(base, token string) *api {
	hc := &http.Client{Timeout: 10 * time.Second}
	return &api{
		tasks: tenurev1connect.NewTaskServiceClient(hc, base), worker: tenurev1connect.NewWorkerServiceClient(hc, base),
		queues: tenurev1connect.NewQueueServiceClient(hc, base), schedules: tenurev1connect.NewScheduleServiceClient(hc, base),
		token: token,
	}
}

// schedule creates the schedule name of queue q, firing every second
// (whether the last task is finished or not).
func (a *api) schedule(t *testing.T, q, name string) *tenurev1.Schedule {
	t.Helper()
	res, err := a.schedules.CreateSchedule(context.Background(), withToken(a, &tenurev1.CreateScheduleRequest{
		Queue: q, Name: name, Cron: "@every 1s", Overlap: tenurev1.OverlapPolicy_OVERLAP_POLICY_ALLOW, Payload: []byte(`{"digest":"daily"}`),
	}))
	if err != nil {
		t.Fatalf("create schedule %s/%s: %v", q, name, err)
	}
	return res.Msg.GetSchedule()
}

// getSchedule reads the schedule name of queue q.
func (a *api) getSchedule(t *testing.T, q, name string) *tenurev1.Schedule {
	t.Helper()
	res, err := a.schedules.GetSchedule(context.Background(), withToken(a, &tenurev1.GetScheduleRequest{Queue: q, Name: name}))
	if err != nil {
		t.Fatalf("get schedule %s/%s: %v", q, name, err)
	}
	return res.Msg.GetSchedule()
}

func withToken[T any](a *api, m *T) *connect.Request[T] {
	r := connect.NewRequest(m)
	if a.token != "" {
		r.Header().Set("Authorization", "Bearer "+a.token)
	}
	return r
}

// submit creates a task of queue q.
func (a *api) submit(t *testing.T, q string, payload string, maxAttempts uint32, priority int32) string {
	t.Helper()
	res, err := a.tasks.Submit(context.Background(), withToken(a, &tenurev1.SubmitRequest{
		Queue: q, Payload: []byte(payload), Priority: priority,
		RetryPolicy: &tenurev1.RetryPolicy{MaxAttempts: maxAttempts, InitialBackoff: durationpb.New(0), MaxBackoff: durationpb.New(time.Second)},
	}))
	if err != nil {
		t.Fatalf("submit to %s: %v", q, err)
	}
	return res.Msg.GetTask().GetTaskId()
}

// lease leases at most one task of queue q, waiting up to wait.
func (a *api) lease(t *testing.T, q string, wait time.Duration) *tenurev1.LeasedTask {
	t.Helper()
	res, err := a.worker.Lease(context.Background(), withToken(a, &tenurev1.LeaseRequest{WorkerId: "browser-test-worker", Queue: q, MaxTasks: 1, Wait: durationpb.New(wait)}))
	if err != nil {
		t.Fatalf("lease from %s: %v", q, err)
	}
	if ts := res.Msg.GetTasks(); len(ts) == 1 {
		return ts[0]
	}
	return nil
}

// mustLease leases the next task of q (bounded wait).
func (a *api) mustLease(t *testing.T, q string) *tenurev1.LeasedTask {
	t.Helper()
	var lt *tenurev1.LeasedTask
	eventually.True(t, "a task of "+q+" to lease", func() bool {
		lt = a.lease(t, q, time.Second)
		return lt != nil
	})
	return lt
}

// attempt runs one attempt of the next task of q: start, a heartbeat,
// then fail or commit and complete.
func (a *api) attempt(t *testing.T, q string, succeed bool) *tenurev1.LeasedTask {
	t.Helper()
	ctx := context.Background()
	lt := a.mustLease(t, q)
	id, lease := lt.GetTaskId(), lt.GetLeaseId()
	if _, err := a.worker.Start(ctx, withToken(a, &tenurev1.StartRequest{TaskId: id, LeaseId: lease})); err != nil {
		t.Fatal(err)
	}
	if _, err := a.worker.Heartbeat(ctx, withToken(a, &tenurev1.HeartbeatRequest{TaskId: id, LeaseId: lease})); err != nil {
		t.Fatal(err)
	}
	if !succeed {
		if _, err := a.worker.Fail(ctx, withToken(a, &tenurev1.FailRequest{TaskId: id, LeaseId: lease, Reason: fmt.Sprintf("attempt %d: upstream timed out", lt.GetAttempt())})); err != nil {
			t.Fatal(err)
		}
		return lt
	}
	if _, err := a.worker.Commit(ctx, withToken(a, &tenurev1.CommitRequest{TaskId: id, LeaseId: lease, Result: []byte(`{"sent":true}`)})); err != nil {
		t.Fatal(err)
	}
	if _, err := a.worker.Complete(ctx, withToken(a, &tenurev1.CompleteRequest{TaskId: id, LeaseId: lease, Result: []byte(`{"sent":true}`)})); err != nil {
		t.Fatal(err)
	}
	return lt
}

// snoozedTwice runs a task of q that its worker snoozes twice, then leases
// again and reports progress on: the task stays leased, at attempt 1.
func (a *api) snoozedTwice(t *testing.T, q string) (string, *tenurev1.LeasedTask) {
	t.Helper()
	ctx := context.Background()
	id := a.submit(t, q, `{"poll":"export-42"}`, 1, 0)
	for range 2 {
		lt := a.mustLease(t, q)
		if _, err := a.worker.Snooze(ctx, withToken(a, &tenurev1.SnoozeRequest{TaskId: id, LeaseId: lt.GetLeaseId(), Reason: "export not ready"})); err != nil {
			t.Fatal(err)
		}
	}
	lt := a.mustLease(t, q)
	pct := uint32(66)
	if _, err := a.worker.Heartbeat(ctx, withToken(a, &tenurev1.HeartbeatRequest{TaskId: id, LeaseId: lt.GetLeaseId(),
		Progress: &tenurev1.Progress{Message: "page 2 of 3", Percent: &pct}})); err != nil {
		t.Fatal(err)
	}
	return id, lt
}

// heartbeat reports progress on the lease of lt: pct% and msg.
func (a *api) heartbeat(t *testing.T, lt *tenurev1.LeasedTask, pct uint32, msg string) {
	t.Helper()
	if _, err := a.worker.Heartbeat(context.Background(), withToken(a, &tenurev1.HeartbeatRequest{TaskId: lt.GetTaskId(), LeaseId: lt.GetLeaseId(),
		Progress: &tenurev1.Progress{Message: msg, Percent: &pct}})); err != nil {
		t.Fatal(err)
	}
}

// pauseAndResume pauses queue q and resumes it.
func (a *api) pauseAndResume(t *testing.T, q string) {
	t.Helper()
	ctx := context.Background()
	if _, err := a.queues.PauseQueue(ctx, withToken(a, &tenurev1.PauseQueueRequest{Queue: q, Reason: "a moment"})); err != nil {
		t.Fatal(err)
	}
	if _, err := a.queues.ResumeQueue(ctx, withToken(a, &tenurev1.ResumeQueueRequest{Queue: q})); err != nil {
		t.Fatal(err)
	}
}

// fixture is what a flow sets up through the API before opening pages.
type fixture struct {
	flaky  string // failed twice, then succeeded
	failed string // failed for good (one attempt)
}

// setUp submits, through the API: three waiting tasks and one failed for
// good in queue "emails", and in queue "flaky" one task that failed twice
// and then succeeded.
func setUp(t *testing.T, a *api) fixture {
	t.Helper()
	var f fixture
	f.failed = a.submit(t, "emails", "\x00\x01binary\xff", 1, 10)
	for i := range 3 {
		a.submit(t, "emails", fmt.Sprintf(`{"to":"user%d@example.com"}`, i), 3, 0)
	}
	if lt := a.attempt(t, "emails", false); lt.GetTaskId() != f.failed {
		t.Fatalf("leased %s from emails, want the failing task %s (priority 10)", lt.GetTaskId(), f.failed)
	}
	f.flaky = a.submit(t, "flaky", `{"report":"weekly","pages":3}`, 3, 0)
	a.attempt(t, "flaky", false)
	a.attempt(t, "flaky", false)
	a.attempt(t, "flaky", true)
	return f
}

// dashboardFlow is the flow of the issue against the server at base: the
// overview's counts, a task's three attempts on its timeline, a retry with
// the button, and a pause with the button that stops a worker. a acts
// through the API (as a worker and submitter, with admin rights); name
// prefixes the screenshots.
func dashboardFlow(t *testing.T, b *browser, base string, a *api, name string) fixture {
	f := setUp(t, a)
	b.viewport(1280, 900, false)
	b.open(base + "/")

	// Overview: the counts of each queue.
	row := `tr[data-queue="default/emails"] td[data-count="%s"]`
	b.until("the overview shows emails: 3 waiting, 1 failed",
		fmt.Sprintf(`%s === "3" && %s === "1"`, textOf(fmt.Sprintf(row, "waiting")), textOf(fmt.Sprintf(row, "failed"))))
	b.until("the overview shows flaky: 1 completed", textOf(`tr[data-queue="default/flaky"] td[data-count="completed"]`)+` === "1"`)
	b.shot(name + "-overview")
	b.checkBasics(name + " overview")

	// The task that failed twice and succeeded: three attempts.
	b.goTo("#/task/" + f.flaky)
	b.until("the timeline shows three attempts", `document.querySelectorAll(".lanes .lane").length === 3`)
	var outcomes []string
	b.eval(`[...document.querySelectorAll(".lanes .lane")].map(l => l.dataset.outcome)`, &outcomes)
	if strings.Join(outcomes, ",") != "failed,failed,completed" {
		t.Errorf("the timeline's attempts ended %v, want failed, failed, completed", outcomes)
	}
	var lane3 string
	b.eval(textOf(`.lanes .lane[data-attempt="3"] .lane-label`), &lane3)
	if !strings.Contains(lane3, "Attempt 3") || !strings.Contains(lane3, "browser-test-worker") || !strings.Contains(lane3, "lease ") {
		t.Errorf("attempt 3's label: %q, want its worker and lease", lane3)
	}
	var marks int
	b.eval(`document.querySelectorAll(".lanes .mark.m-LeaseGranted, .lanes .mark.m-LeaseExtended, .lanes .mark.m-ExecutionStarted").length`, &marks)
	if marks != 9 {
		t.Errorf("%d grant, heartbeat and start marks on the lanes, want 3 of each", marks)
	}
	b.until("the payload is pretty-printed JSON", `document.querySelector("#payload-bytes")?.textContent.includes('"report": "weekly"')`)
	b.until("the raw history lists the records", `document.querySelectorAll(".history tbody tr").length >= 13`)
	b.until("the task used 3 of its 3 attempts", textOf("#attempts")+` === "3 of 3"`)
	b.shot(name + "-task")

	b.checkBasics(name + " task")

	// A task snoozed twice and running again: three lanes of attempt 1, and
	// the progress its worker reports, on its page and in its queue.
	polled, polledLease := a.snoozedTwice(t, "polling")
	b.goTo("#/task/" + polled)
	b.until("the timeline shows two snoozes and the running lease", `[...document.querySelectorAll(".lanes .lane")].map(l => l.dataset.outcome + l.dataset.attempt).join() === "snoozed1,snoozed1,running1"`)
	b.until("the task shows its worker's progress", textOf("#progress")+`.startsWith("66% page 2 of 3 (reported ")`)
	b.until("the task used 1 of its 1 attempt", textOf("#attempts")+` === "1 of 1"`)
	b.shot(name + "-task-progress")
	b.checkBasics(name + " task with progress")
	// The page follows the task's events as they happen (the event
	// stream), and a redraw keeps what the viewer opened: the running
	// lane's records stay expanded across three heartbeats, each an event
	// the page lists and redraws for.
	b.until("live refresh is on, from the event stream", `document.querySelector("#live").checked && document.querySelector(".live").dataset.stream === "on"`)
	records := `document.querySelector('details[data-key="records-3"]')`
	b.click(`//details[@data-key="records-3"]/summary`)
	b.until("the running lane's records are expanded", records+`.open`)
	b.eval(`window.expanded = `+records+`; true`, nil)
	b.waitRefreshes(3, func() { a.heartbeat(t, polledLease, 66, "page 2 of 3") })
	var kept struct {
		Open     bool `json:"open"`
		Redrawn  bool `json:"redrawn"`
		Attempts int  `json:"attempts"`
		Seen     int  `json:"seen"`
	}
	b.eval(`({open: `+records+`.open, redrawn: `+records+` !== window.expanded, attempts: document.querySelectorAll(".lanes .lane").length,
		seen: document.querySelectorAll('#live-events li[data-type="LeaseExtended"]').length})`, &kept)
	if !kept.Open || !kept.Redrawn || kept.Attempts != 3 || kept.Seen < 3 {
		t.Errorf("after three heartbeats the running lane's records are open: %v (redrawn: %v, %d lanes), %d heartbeats listed as they happened; want open, in a redrawn timeline of 3 lanes, 3 listed",
			kept.Open, kept.Redrawn, kept.Attempts, kept.Seen)
	}
	b.goTo("#/queue/default/polling")
	b.until("the queue lists the task's progress", textOf(fmt.Sprintf(`tr[data-task=%q] td[data-progress]`, polled))+` === "66% page 2 of 3"`)

	// Retry the failed task with the button: it is waiting.
	b.goTo("#/task/" + f.failed)
	b.until("the failed task's page", textOf(".details .badge")+` === "failed"`)
	b.until("its binary payload in hex", `document.querySelector("#payload-bytes")?.textContent.startsWith("00000000  00 01 62 69")`)
	b.click(button("Retry"))
	b.until("the confirmation", `document.querySelector("#confirm").open`)
	b.run("give a reason", chromedp.SendKeys("#confirm-reason", "fixed upstream", chromedp.ByQuery))
	b.click(`//button[@id="confirm-ok"]`)
	b.until("the retried task is waiting", textOf(".details .badge")+` === "waiting"`)
	b.until("the retried task has a fresh budget of attempts",
		textOf("#attempts")+` === "0 of 1 since an operator's retry (1 in all)"`)
	b.shot(name + "-task-retried")

	// A finished task's worker: its last attempt's.
	b.goTo("#/queue/default/flaky")
	b.until("the completed task's worker and attempts", fmt.Sprintf(`%s === "browser-test-worker" && %s === "3/3"`,
		textOf(fmt.Sprintf(`tr[data-task=%q] td[data-worker]`, f.flaky)), textOf(fmt.Sprintf(`tr[data-task=%q] td[data-attempts]`, f.flaky))))

	// Pause the queue with the button: a worker receives nothing more.
	b.goTo("#/queue/default/emails")
	b.until("the queue shows 4 waiting tasks", textOf(`dd[data-count="waiting"]`)+` === "4"`)
	b.until("the queue lists them", `document.querySelectorAll("tr[data-task]").length === 4`)
	b.shot(name + "-queue")
	b.checkBasics(name + " queue")
	b.click(button("Pause"))
	b.until("the queue is paused", textOf("#paused")+` === "paused"`)
	if lt := a.lease(t, "emails", time.Second); lt != nil {
		t.Fatalf("a worker leased %s from a paused queue", lt.GetTaskId())
	}
	b.until("the queue still shows 4 waiting tasks", textOf(`dd[data-count="waiting"]`)+` === "4"`)
	b.shot(name + "-queue-paused")
	b.click(button("Resume"))
	b.until("the queue runs again", textOf("#paused")+` === "running"`)
	a.mustLease(t, "emails")
	b.until("the page sees the lease", textOf(`dd[data-count="leased"]`)+` === "1"`)

	// The state filter and paging: a shareable address.
	b.goTo("#/queue/default/emails?state=leased")
	b.until("the filter shows the leased task only", `document.querySelectorAll("tr[data-task]").length === 1 && document.querySelector("#state").value === "leased"`)

	// A phone's width: nothing scrolls sideways, the controls keep names.
	b.viewport(390, 844, true)
	b.goTo("#/")
	b.until("the overview on a phone", `document.querySelector('tr[data-queue="default/emails"]') !== null`)
	b.shot(name + "-overview-phone")
	b.checkBasics(name + " overview on a phone")
	b.goTo("#/task/" + f.flaky)
	b.until("the timeline on a phone", `document.querySelectorAll(".lanes .lane").length === 3`)
	b.shot(name + "-task-phone")
	b.checkBasics(name + " task on a phone")
	// On a phone the tasks table scrolls sideways in its box: refreshes
	// keep where the viewer scrolled it, and what they typed unsent.
	b.goTo("#/queue/default/emails")
	tasksBox := `document.querySelector('[data-key="tasks-scroll"]')`
	b.until("the tasks table is wider than a phone", tasksBox+`?.scrollWidth > `+tasksBox+`?.clientWidth + 60`)
	b.eval(tasksBox+`.scrollLeft = 60; document.querySelector("#filter").value = "user1"; true`, nil)
	// Each pause and resume of the queue is an event the page redraws for.
	b.waitRefreshes(3, func() { a.pauseAndResume(t, "emails") })
	var scrolled struct {
		Left   float64 `json:"left"`
		Filter string  `json:"filter"`
	}
	b.eval(`({left: `+tasksBox+`.scrollLeft, filter: document.querySelector("#filter").value})`, &scrolled)
	if scrolled.Left < 59 || scrolled.Filter != "user1" {
		t.Errorf("after three refreshes the tasks table is scrolled to %v and the filter reads %q; want 60 and the text typed, user1", scrolled.Left, scrolled.Filter)
	}
	b.viewport(1280, 900, false)

	// Keyboard: the first Tab reaches the skip link, with a visible focus.
	b.open("about:blank")
	b.open(base + "/#/")
	b.until("the overview", `document.querySelector('tr[data-queue="default/emails"]') !== null`)
	b.run("press Tab", chromedp.KeyEvent(kb.Tab))
	var focus struct {
		Text    string `json:"text"`
		Outline string `json:"outline"`
	}
	b.eval(`(() => { const e = document.activeElement; const s = getComputedStyle(e); return {text: e.textContent.trim(), outline: s.outlineStyle + " " + s.outlineWidth}; })()`, &focus)
	if focus.Text != "Skip to content" || strings.HasPrefix(focus.Outline, "none") || strings.HasSuffix(focus.Outline, " 0px") {
		t.Errorf("after one Tab the focus is on %q with outline %q, want the skip link, visibly", focus.Text, focus.Outline)
	}
	return f
}

// waitRefreshes waits until the page's live refresh has drawn it n more
// times (the count its Live control keeps), calling event before each:
// something the page follows happens, and the event stream says so.
func (b *browser) waitRefreshes(n int, event func()) {
	b.t.Helper()
	const count = `Number(document.querySelector(".live")?.dataset.refreshes ?? 0)`
	for range n {
		var now int
		b.eval(count, &now)
		event()
		b.until(fmt.Sprintf("a live refresh (after %d)", now), fmt.Sprintf(`%s > %d`, count, now))
	}
}

// localInput is a JavaScript expression: the value of a datetime-local
// input (the page's zone, to the second) for the instant t.
func localInput(t time.Time) string {
	return fmt.Sprintf(`(() => { const d = new Date(%d); return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19); })()`, t.UnixMilli())
}

// expectRefusal runs step, during which the browser may report on its
// console the 400 the server answers a refused request with (that is the
// refusal the step checks); any other console error still fails.
func (b *browser) expectRefusal(step func()) {
	b.mu.Lock()
	before := b.allowNetwork
	b.allowNetwork = "status of 400"
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.allowNetwork = before
		b.mu.Unlock()
	}()
	step()
}

// backfill fills the backfill form with from and to, and confirms it.
func (b *browser) backfill(from, to time.Time) {
	b.t.Helper()
	b.eval(fmt.Sprintf(`document.querySelector("#backfill-from").value = %s; document.querySelector("#backfill-to").value = %s`, localInput(from), localInput(to)), nil)
	b.click(button("Backfill…"))
	b.until("the backfill's confirmation", `document.querySelector("#confirm").open`)
	b.click(`//button[@id="confirm-ok"]`)
}

// schedulesFlow is the Schedules part of the dashboard against the server
// at base: a schedule firing every second, created through the API, on
// the Schedules page; its page with fired ticks whose task links open the
// Task page; Pause with the button; a backfill (and a refused one naming
// its field); then a queue's limits set with the Queue page's form, shown
// there and on the overview (and a refused one naming its field); a
// task's deadline on its page. name prefixes the screenshots.
func schedulesFlow(t *testing.T, b *browser, base string, a *api, name string) {
	sc := a.schedule(t, "reports", "digest")
	created := sc.GetCreatedAt().AsTime()
	b.viewport(1280, 900, false)
	b.open(base + "/#/schedules")

	// The list: the schedule, its expression, its next fire, a fired tick.
	row := `tr[data-schedule="default/reports/digest"]`
	b.until("the Schedules page lists the schedule", textOf(row+" td.mono")+` === "@every 1s (UTC)"`)
	b.until("its last decision is a fired tick", fmt.Sprintf(`document.querySelector(%q)?.dataset.last === "fired" && document.querySelector(%q) !== null`, row+" td[data-last]", row+" td[data-next] time"))
	b.shot(name + "-schedules")
	b.checkBasics(name + " schedules page")

	// Its page: the fired ticks, with their tasks.
	b.click(`//tr[@data-schedule="default/reports/digest"]//a`)
	b.until("the schedule's page", `location.hash === "#/schedule/default/reports/digest" && `+textOf("#cron")+` === "@every 1s"`)
	b.until("two fired ticks with their waiting tasks", `[...document.querySelectorAll('.decisions tr[data-outcome="fired"]')].filter(r => r.dataset.task && r.innerText.includes("waiting")).length >= 2`)
	b.until("its next fires, in its zone and the viewer's", `document.querySelectorAll('#next-fires li [data-zone="schedule"] time').length === 5 && `+
		`document.querySelectorAll('#next-fires li [data-zone="viewer"] time').length === 5`)
	b.until("the payload of its tasks", `document.querySelector("#payload-bytes")?.textContent.includes('"digest": "daily"')`)
	b.shot(name + "-schedule")
	b.checkBasics(name + " schedule page")
	var task string
	b.eval(`document.querySelector('.decisions tr[data-outcome="fired"]').dataset.task`, &task)
	b.click(fmt.Sprintf(`//table[contains(@class, "decisions")]//tr[@data-task=%q]//a`, task))
	b.until("the fired task's page", fmt.Sprintf(`location.hash === %q && `, "#/task/"+task)+textOf(".details .badge")+` === "waiting"`)
	b.until("it links back to its schedule", textOf("#from-schedule")+` === "schedule digest"`)
	b.click(`//a[@id="from-schedule"]`)
	b.until("the schedule's page again", `location.hash === "#/schedule/default/reports/digest" && document.querySelector(".decisions") !== null`)

	// A schedule in another zone: its next fires in its zone, where its
	// expression's 2 o'clock is, and in the viewer's, each with its zone.
	if _, err := a.schedules.CreateSchedule(context.Background(), withToken(a, &tenurev1.CreateScheduleRequest{
		Queue: "reports-berlin", Name: "nightly", Cron: "0 2 * * *", TimeZone: "Europe/Berlin"})); err != nil {
		t.Fatal(err)
	}
	b.goTo("#/schedule/default/reports-berlin/nightly")
	b.until("the Berlin schedule's next fires at 2:00 in Berlin", `[...document.querySelectorAll('#next-fires [data-zone="schedule"]')].filter(e => /^\d+\/\d+\/\d+, 2:00:00 AM GMT\+[12]$/.test(e.innerText.trim())).length === 5`)
	var viewerFires []string
	b.eval(`[...document.querySelectorAll('#next-fires [data-zone="viewer"] time')].map(e => e.innerText)`, &viewerFires)
	for _, f := range viewerFires {
		if !regexp.MustCompile(`^\d+/\d+/\d+, \d+:\d\d:\d\d [AP]M \S+$`).MatchString(f) {
			t.Errorf("a next fire in the viewer's zone reads %q, want its zone after it", f)
		}
	}

	// A schedule whose ticks wait for its last task (overlap skip, no
	// worker): its page names the task, and the list says it waits.
	if _, err := a.schedules.CreateSchedule(context.Background(), withToken(a, &tenurev1.CreateScheduleRequest{
		Queue: "reports-berlin", Name: "every-second", Cron: "* * * * * *"})); err != nil {
		t.Fatal(err)
	}
	b.goTo("#/schedule/default/reports-berlin/every-second")
	b.until("the schedule's ticks wait for its last task", textOf("#schedule-waiting")+`.startsWith("Its ticks wait since ") && `+
		textOf("#schedule-waiting")+`.endsWith("of its last fire: the ticks due until it finishes are skipped then.") && `+
		`document.querySelector("#schedule-waiting a")?.getAttribute("href") === "#/task/" + document.querySelector('.decisions tr[data-outcome="fired"]')?.dataset.task`)
	b.goTo("#/schedules")
	b.until("the list says it waits", `document.querySelector('tr[data-schedule="default/reports-berlin/every-second"] [data-waiting]')?.innerText === "waiting for its last task"`)
	if _, err := a.schedules.DeleteSchedule(context.Background(), withToken(a, &tenurev1.DeleteScheduleRequest{Queue: "reports-berlin", Name: "every-second"})); err != nil {
		t.Fatal(err)
	}

	b.goTo("#/schedule/default/reports/digest")
	b.until("the schedule's page again", `document.querySelector(".decisions") !== null`)

	// Pause with the button: paused, no next fire.
	b.click(button("Pause"))
	b.until("the schedule is paused", textOf("#schedule-state .badge")+` === "paused" && `+textOf("#next-fires")+` === "None while it is paused."`)
	if got := a.getSchedule(t, "reports", "digest"); !got.GetPaused() || got.GetPause().GetReason() != "from the dashboard" {
		t.Errorf("after Pause the server has paused=%v, pause %v", got.GetPaused(), got.GetPause())
	}

	// A backfill whose end is in the future is refused, naming "end".
	b.expectRefusal(func() {
		b.backfill(created.Add(-10*time.Second), time.Now().Add(time.Hour))
		b.until("the refusal names the end", `document.querySelector("#backfill-outcome")?.dataset.field === "end" && document.querySelector("#backfill-to").getAttribute("aria-invalid") === "true"`)
	})
	// The ticks of five seconds before the schedule existed: fired now.
	b.backfill(created.Add(-10*time.Second), created.Add(-6*time.Second))
	b.until("the backfill's outcome", textOf("#backfill-outcome")+`.startsWith("Backfilled ")`)
	var outcome string
	b.eval(textOf("#backfill-outcome"), &outcome)
	if outcome != "Backfilled 5 ticks; 0 had fired before." {
		t.Errorf("the backfill of 5 seconds of @every 1s says %q", outcome)
	}
	b.until("the backfilled ticks among the decisions", `document.querySelectorAll('.decisions tr[data-outcome="backfilled"][data-task]').length === 5`)
	b.shot(name + "-schedule-paused")
	b.checkBasics(name + " paused schedule page")
	b.goTo("#/schedules")
	b.until("the list shows it paused", textOf(row+" [data-state]")+` === "paused"`)

	// The queue's limits, set with its form.
	b.goTo("#/queue/default/reports")
	b.until("the queue links to its schedule", textOf("#queue-schedules a")+` === "digest"`)
	b.until("the queue has no limits", textOf("#limits [data-limits]")+` === "none"`)
	b.run("type the limits",
		chromedp.SendKeys("#limit-concurrency", "5", chromedp.ByQuery),
		chromedp.SendKeys("#limit-rate", "2", chromedp.ByQuery))
	b.click(button("Set limits"))
	b.until("the queue shows its limits", textOf("#limits [data-limits]")+`.startsWith("at most 5 leases at once · 2/s, bursts of ")`)
	b.until("the form says what it did", textOf("#limits-outcome")+`.startsWith("Limits set: at most 5 leases at once")`)
	b.expectRefusal(func() {
		b.run("type a concurrency of 0", chromedp.SetValue("#limit-concurrency", "0", chromedp.ByQuery))
		b.click(button("Set limits"))
		b.until("the refusal names max_concurrency", `document.querySelector("#limits-outcome")?.dataset.field === "max_concurrency" && `+
			textOf("#limits-outcome")+`.startsWith("Max concurrency (max_concurrency): 0 would lease nothing") && document.activeElement.id === "limit-concurrency"`)
	})
	b.until("the queue keeps its limits", textOf("#limits [data-limits]")+`.startsWith("at most 5 leases at once")`)
	b.shot(name + "-queue-limits")
	b.checkBasics(name + " queue page with limits")
	b.goTo("#/")
	b.until("the overview shows the limits", textOf(`tr[data-queue="default/reports"] td[data-limits]`)+`.startsWith("at most 5 leases at once · 2/s")`)

	// Keys: the queue page counts them, shows the keys with the most
	// waiting tasks and what holds each back; the overview the key limits.
	for _, key := range []string{"acme", "acme", "acme", "beta"} {
		if _, err := a.tasks.Submit(context.Background(), withToken(a, &tenurev1.SubmitRequest{Queue: "reports", Payload: []byte("keyed"), Key: key})); err != nil {
			t.Fatal(err)
		}
	}
	one := uint32(1)
	if _, err := a.queues.SetQueueLimits(context.Background(), withToken(a, &tenurev1.SetQueueLimitsRequest{Queue: "reports", KeyMaxConcurrency: &one, Fair: proto.Bool(true)})); err != nil {
		t.Fatal(err)
	}
	b.goTo("#/queue/default/reports")
	b.until("the queue shows its keys", textOf("#keys [data-keys]")+` === "2 with unfinished tasks"`)
	b.until("acme has the most waiting tasks", `document.querySelector('#keys tr[data-key-name]')?.dataset.keyName === "acme" && `+
		textOf(`#keys tr[data-key-name="acme"] td.num`)+` === "3"`)
	b.until("the key limits", textOf("#limits [data-limits]")+`.endsWith("per key: at most 1 lease at once · fair")`)
	b.shot(name + "-queue-keys")
	b.checkBasics(name + " queue page with keys")

	// A task with a deadline and a kind: its page shows both, the exact
	// time on hover.
	res, err := a.tasks.Submit(context.Background(), withToken(a, &tenurev1.SubmitRequest{Queue: "reports", Payload: []byte("due"), Timeout: durationpb.New(time.Hour), Kind: "monthly_report"}))
	if err != nil {
		t.Fatal(err)
	}
	deadline := res.Msg.GetTask().GetDeadline().AsTime()
	b.goTo("#/task/" + res.Msg.GetTask().GetTaskId())
	b.until("the task's deadline", fmt.Sprintf(`document.querySelector("#deadline time")?.getAttribute("datetime") === %q && document.querySelector("#deadline time").title.length > 0`,
		deadline.UTC().Format("2006-01-02T15:04:05.000Z")))
	b.until("the task's kind", textOf("#kind")+` === "monthly_report"`)
	keyed, err := a.tasks.Submit(context.Background(), withToken(a, &tenurev1.SubmitRequest{Queue: "reports", Payload: []byte("keyed"), Key: "customer-42"}))
	if err != nil {
		t.Fatal(err)
	}
	b.goTo("#/task/" + keyed.Msg.GetTask().GetTaskId())
	b.until("the task's key", textOf("#key")+` === "customer-42"`)

	// A phone's width: the schedule's page does not scroll sideways.
	b.viewport(390, 844, true)
	b.goTo("#/schedule/default/reports/digest")
	b.until("the schedule on a phone", `document.querySelectorAll(".decisions tr[data-outcome]").length > 0`)
	b.shot(name + "-schedule-phone")
	b.checkBasics(name + " schedule page on a phone")
	b.viewport(1280, 900, false)
}

// TestDashboard: the flow against an embedded server.
func TestDashboard(t *testing.T) {
	b := newBrowser(t)
	p := startServerProc(t, filepath.Join(t.TempDir(), "data"))
	a := newAPI(p.url(), "")
	dashboardFlow(t, b, p.url(), a, "embedded")
	schedulesFlow(t, b, p.url(), a, "embedded")
	b.goTo("#/cluster")
	b.until("the cluster page says embedded", `document.querySelector("#embedded") !== null`)
	b.checkBasics("embedded cluster page")
}

// TestDashboardCluster: the same flow against a node of a three-node
// cluster (the tasks spread over the partitions of the other nodes too),
// and the cluster page: the lock holder, three nodes, the partition map.
func TestDashboardCluster(t *testing.T) {
	b := newBrowser(t)
	c, _ := newClTest(t, -1)
	base := c.nodes[0].url()
	// The flow's worker leases through another node than the page's.
	a := newAPI(c.nodes[1].url(), "")
	dashboardFlow(t, b, base, a, "cluster")
	schedulesFlow(t, b, base, a, "cluster")
	b.goTo("#/cluster")
	b.until("the cluster page lists three active nodes", `[...document.querySelectorAll("table.nodes tbody tr")].filter(r => r.innerText.includes("active") && !r.innerText.includes("inactive")).length === 3`)
	b.until("it names the lock holder", `/held by n[123] · epoch \d+/.test(`+textOf("#lock")+`)`)
	b.until("every node is eligible for partitions", `[...document.querySelectorAll("table.nodes td.eligible")].filter(td => td.innerText.trim() === "yes").length === 3`)
	var parts int
	b.eval(`document.querySelectorAll("table.partitions tbody tr").length`, &parts)
	// The flows' five queues: emails, flaky, polling, reports and reports-berlin.
	if parts != 5*clPartitions {
		t.Errorf("the partition map lists %d partitions, want %d (five queues of %d)", parts, 5*clPartitions, clPartitions)
	}
	b.shot("cluster-cluster")
	b.checkBasics("cluster page")
}

// TestDashboardAuth: with authentication on, no token shows the token
// prompt; a reader token sees everything with the actions disabled and
// the reason shown; an admin token's actions work.
func TestDashboardAuth(t *testing.T) {
	b := newBrowser(t)
	file := filepath.Join(t.TempDir(), "tokens.jsonl")
	tok := authtest.TokenFile(t, file)
	p := startServerProc(t, filepath.Join(t.TempDir(), "data"), "--auth-file", file)
	a := newAPI(p.url(), tok.Setup)
	failed := a.submit(t, "emails", "report", 1, 0)
	a.attempt(t, "emails", false)
	a.schedule(t, "emails", "digest")

	// No token: the prompt. Asking without one is answered 401, which the
	// browser reports on its console; nothing else may be.
	b.mu.Lock()
	b.allowNetwork = "401"
	b.mu.Unlock()
	b.open(p.url() + "/#/task/" + failed)
	b.until("the token prompt", `document.querySelector("form.signin input#token") !== null`)
	b.shot("auth-signin")
	b.checkBasics("sign-in page")

	signIn := func(token string) {
		b.run("type the token", chromedp.SendKeys("#token", token, chromedp.ByQuery))
		b.click(button("Sign in"))
	}
	// A wrong token: refused, the prompt again.
	signIn("tenure_wrong")
	b.until("the prompt says the token was refused", `document.querySelector("form.signin [role=alert]")?.innerText.includes("refused")`)

	// A reader: the task, with its actions disabled and why.
	signIn(tok.Star[auth.Reader])
	b.until("signed in as the reader", textOf("#whoami")+`.includes("reader-star (reader)")`)
	b.until("the task's page", textOf(".details .badge")+` === "failed"`)
	var retry struct {
		Disabled bool   `json:"disabled"`
		Why      string `json:"why"`
	}
	b.eval(`(() => { const el = [...document.querySelectorAll("button")].find(x => x.textContent === "Retry"); const why = document.getElementById(el.getAttribute("aria-describedby")); return {disabled: el.disabled, why: why ? why.innerText : ""}; })()`, &retry)
	if !retry.Disabled || !strings.Contains(retry.Why, "it needs role admin") {
		t.Errorf("a reader's Retry button: disabled %v, reason %q", retry.Disabled, retry.Why)
	}
	var stored string
	b.eval(`sessionStorage.getItem("tenure.token") + "|" + (localStorage.length === 0)`, &stored)
	if stored != tok.Star[auth.Reader]+"|true" {
		t.Errorf("the token is not kept in sessionStorage alone: %q", stored)
	}
	b.shot("auth-reader-task")
	b.goTo("#/queue/default/emails")
	b.until("the queue's actions are disabled, with the reason", `(() => { const el = [...document.querySelectorAll("button")].find(x => x.textContent === "Pause"); return el && el.disabled && document.getElementById(el.getAttribute("aria-describedby"))?.innerText.includes("it needs role admin"); })()`)
	b.until("the limits form is disabled, with the reason", `(() => { const el = document.querySelector("#limit-rate"); return el.disabled && document.getElementById(el.getAttribute("aria-describedby"))?.innerText.includes("it needs role admin"); })()`)
	b.shot("auth-reader-queue")
	b.checkBasics("reader's queue page")

	// The reader sees the schedule, with its buttons and backfill disabled.
	b.goTo("#/schedule/default/emails/digest")
	b.until("the schedule's page", textOf("#cron")+` === "@every 1s"`)
	var disabled []string
	b.eval(`[...document.querySelectorAll("main button, main input")].filter(el => el.id !== "live").map(el => (el.disabled ? "disabled " : "enabled ") + (el.id || el.textContent) + ": " + (document.getElementById(el.getAttribute("aria-describedby"))?.innerText ?? ""))`, &disabled)
	want := []string{"disabled Pause", "disabled backfill-from", "disabled backfill-to", "disabled Backfill…"}
	if len(disabled) != len(want) {
		t.Errorf("a reader's schedule controls: %q, want %q, each with the reason", disabled, want)
	}
	for i, d := range disabled {
		if i >= len(want) || !strings.HasPrefix(d, want[i]+": ") || !strings.Contains(d, "it needs role admin") {
			t.Errorf("a reader's schedule control: %q, want %q with the reason", d, want[i])
		}
	}
	b.shot("auth-reader-schedule")
	b.checkBasics("reader's schedule page")

	// An admin: the same button works.
	b.click(button("Sign out"))
	b.until("the prompt again", `document.querySelector("form.signin") !== null`)
	signIn(tok.Setup)
	b.until("signed in as the admin", textOf("#whoami")+`.includes("setup (admin)")`)
	b.goTo("#/task/" + failed)
	b.until("the task's page", textOf(".details .badge")+` === "failed"`)
	b.click(button("Retry"))
	b.until("the confirmation", `document.querySelector("#confirm").open`)
	b.click(`//button[@id="confirm-ok"]`)
	b.until("the retried task is waiting", textOf(".details .badge")+` === "waiting"`)
	b.checkBasics("admin's task page")
	res, err := a.tasks.GetTaskHistory(context.Background(), withToken(a, &tenurev1.GetTaskHistoryRequest{TaskId: failed}))
	if err != nil {
		t.Fatal(err)
	}
	last := res.Msg.GetEntries()[len(res.Msg.GetEntries())-1]
	if last.GetType() != "TaskRetried" || last.GetRequestedBy() != "setup" {
		t.Errorf("the retry's record: %v, want TaskRetried by the admin token's name", last)
	}
}

// TestDashboardOutbox: the overview lists the outboxes the server relays:
// rows waiting, rows relayed and failed rows, as ListOutboxes answers.
func TestDashboardOutbox(t *testing.T) {
	b := newBrowser(t)
	dsn, pool, _ := outboxtest.Migrated(t, sdkoutbox.PostgreSQL)
	p := startServerProc(t, filepath.Join(t.TempDir(), "data"), "--outbox-postgres", dsn)
	for _, row := range [][2]string{{"a", `{"queue": "emails"}`}, {"b", `{"queue": "emails", "priority": "high"}`}} {
		if _, err := pool.ExecContext(t.Context(), "INSERT INTO tenure_outbox (request_id, request) VALUES ($1, $2)", row[0], row[1]); err != nil {
			t.Fatal(err)
		}
	}
	name := outboxName(t, pool)
	b.open(p.url() + "/")
	row := fmt.Sprintf(`document.querySelector('table.outboxes tr[data-outbox=%q]')`, name)
	b.until("the outbox's row: one relayed, one failed, none waiting",
		row+` !== null && `+row+`.querySelector('[data-count="relayed"]').innerText === "1" && `+
			row+`.querySelector('[data-count="failed"]').innerText === "1" && `+row+`.querySelector('[data-count="rows"]').innerText === "0"`)
	b.shot("embedded-outboxes")
	b.checkBasics("overview with an outbox")
}

// TestDashboardWorkflow: a workflow's page draws its graph (a fan-out of
// 20 shows 5 boxes and one for the other 15), follows it live as its
// first task completes, cancels it and retries it; the list of workflows
// and the task page link to it.
func TestDashboardWorkflow(t *testing.T) {
	b := newBrowser(t)
	p := startServerProc(t, filepath.Join(t.TempDir(), "data"))
	c := sdk(t, p.url())
	ctx := t.Context()
	reqs := []client.SubmitRequest{{Queue: "extract", RequestID: "extract"}}
	var fan []string
	for i := range 20 {
		rid := fmt.Sprintf("transform-%d", i)
		reqs = append(reqs, client.SubmitRequest{Queue: "transform", RequestID: rid, DependsOn: []string{"extract"}})
		fan = append(fan, rid)
	}
	reqs = append(reqs, client.SubmitRequest{Queue: "load", DependsOn: fan})
	res, err := c.SubmitBatch(ctx, client.SubmitBatchRequest{WorkflowID: "etl", Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	root, join := res[0].TaskID, res[len(res)-1].TaskID

	b.open(p.url() + "/#/workflows")
	b.until("the list shows the workflow running", textOf(`tr[data-workflow="etl"] .badge`)+` === "running"`)
	b.checkBasics("workflows page")
	b.click(`//a[normalize-space()="etl"]`)
	node := func(id string) string { return fmt.Sprintf(`document.querySelector('svg.graph a[data-task=%q]')`, id) }
	b.until("the graph: the root, 5 of the fan-out, one box for the other 15, the join",
		`document.querySelectorAll("svg.graph a[data-task]").length === 7 && document.querySelector('svg.graph g.node.more[data-tasks="15"]') !== null`)
	b.until("the root is waiting, the join blocked", node(root)+`.dataset.state === "waiting" && `+node(join)+`.dataset.state === "blocked"`)
	var edges int
	b.eval(`document.querySelectorAll("svg.graph path.edge").length`, &edges)
	if edges != 12 { // root → 5 boxes and the rest's box, and each of those 6 → the join
		t.Errorf("the graph has %d edges, want 12", edges)
	}
	b.shot("workflow-graph")
	b.checkBasics("workflow page")

	l, err := c.Lease(ctx, client.LeaseRequest{WorkerID: "w", Queue: "extract"})
	if err != nil || len(l.Tasks) != 1 {
		t.Fatalf("lease the root: %+v %v", l, err)
	}
	if err := c.Complete(ctx, client.CompleteRequest{TaskID: root, LeaseID: l.Tasks[0].LeaseID}); err != nil {
		t.Fatal(err)
	}
	b.until("the page follows: the root completed, the fan-out waiting", node(root)+`.dataset.state === "completed" && `+
		fmt.Sprintf(`document.querySelector('svg.graph a[data-task=%q]').dataset.state === "waiting"`, res[1].TaskID))

	b.click(`//button[@data-key="action-Cancel"]`)
	b.until("the confirmation", `document.querySelector("#confirm").open`)
	b.click(`//button[@id="confirm-ok"]`)
	b.until("the workflow is cancelled", textOf("#workflow-state")+` === "cancelled" && `+node(join)+`.dataset.state === "dead"`)
	b.until("its tasks: 1 completed, 21 dead", textOf("#workflow-tasks")+` === "22: 1 completed, 21 dead"`)
	b.click(`//button[@data-key="action-Retry"]`)
	b.until("the confirmation", `document.querySelector("#confirm").open`)
	b.click(`//button[@id="confirm-ok"]`)
	b.until("the workflow runs again", textOf("#workflow-state")+` === "running" && `+node(join)+`.dataset.state === "blocked"`)
	b.shot("workflow-retried")

	b.click(fmt.Sprintf(`//*[local-name()="a" and @data-task=%q]`, join))
	b.until("the join's page links to its workflow and dependencies", textOf("#workflow")+` === "etl" && `+textOf("#depends-on")+`.includes("pending")`)
	b.checkBasics("task page of a workflow's join")

	b.viewport(390, 844, true)
	b.goTo("#/workflow/default/etl")
	b.until("the graph on a phone", `document.querySelectorAll("svg.graph a[data-task]").length === 7`)
	b.shot("workflow-phone")
	b.checkBasics("workflow page on a phone")
	b.viewport(1280, 900, false)
}
