package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tenurehq/tenure/internal/clock"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/client"
)

// The headers of an event delivered by `tenure events --post`
// (docs/guides/events.md).
const (
	// signatureHeader: "sha256=" and the lowercase hex HMAC-SHA256 of the
	// body with the shared secret.
	signatureHeader = "Tenure-Signature"
	// eventIDHeader: "partition:lsn", the same for every delivery of one
	// event (deduplicate by it).
	eventIDHeader = "Tenure-Event-Id"
	// eventTypeHeader: the record type's name.
	eventTypeHeader = "Tenure-Event-Type"
	// cursorHeader: the cursor after the event.
	cursorHeader = "Tenure-Cursor"
)

// Bounds of the deliveries of --post: the wait between two tries of one
// event grows from postBackoffMin to postBackoffMax; the cursor file is
// written at most every cursorSaveEvery (and at the end).
const (
	postBackoffMin  = 100 * time.Millisecond
	postBackoffMax  = 30 * time.Second
	cursorSaveEvery = 200 * time.Millisecond
)

// eventsCmd is `tenure events`.
type eventsCmd struct {
	client     clientFlags
	follow     bool
	from       string
	cursorFile string
	filter     client.EventFilter
	post       string
	secretFile string
	timeout    time.Duration
}

func (*eventsCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "events [--follow] [--from CURSOR] [flags]",
		Short: "print the log's events, or deliver each to an HTTP endpoint (--post)",
		Long: `Print every event of the server's log the filter selects — one per
decision: a task created, leased, completed, a queue paused... — in log
order, one line each; with --follow, keep printing them as they happen
(Ctrl-C stops), else stop once the events durable now are printed. Over a
dropped connection or a server restart it goes on from the last event,
once and in order (docs/guides/events.md).

--from says where to start: a cursor of an earlier event, "now" (the
default with --follow) or "oldest" (the default without: everything the
log still holds). With --cursor-file FILE it starts from the cursor in
FILE if there is one, and keeps the cursor of the last event handled
there, so that a restart resumes where it stopped.

--json prints the API's answers as the server sends them, one JSON object
a line (protojson of tenure.v1.WatchEventsResponse: its events, the cursor
after them, caught_up).

--post URL delivers each event to URL instead: a POST of the event as JSON
(protojson of tenure.v1.Event), with the headers Tenure-Signature
("sha256=" and the hex HMAC-SHA256 of the body with the secret of
--secret-file), Tenure-Event-Id (partition:lsn, the same for each delivery
of one event), Tenure-Event-Type and Tenure-Cursor. An event is delivered
once URL answers 2xx; until then it is sent again, waiting 100ms doubling
to 30s between tries, and no later event is sent: every event is delivered
at least once, in order (so each task's events in order). --post needs
--cursor-file.`,
		Example: `  tenure events --follow --queue emails --namespace default
  tenure events --from oldest --task 01JH8ZQ5T0W9Q3V6M2X4C7B1NA --json
  tenure events --follow --workflow order-7
  tenure events --follow --post https://hooks.example.com/tenure --secret-file hook.secret --cursor-file hook.cursor`,
	}
}

func (c *eventsCmd) define(fs *pflag.FlagSet) {
	c.client.add(fs)
	fs.BoolVar(&c.follow, "follow", false, "keep going: print (or deliver) each event as it happens, until Ctrl-C or SIGTERM")
	fs.StringVar(&c.from, "from", "", `where to start: a cursor, "now" or "oldest" (default: now with --follow, oldest without)`)
	fs.StringVar(&c.cursorFile, "cursor-file", "", "start from the cursor in this file if it has one, and keep the cursor of the last event handled in it")
	fs.StringVar(&c.filter.Namespace, "namespace", "", "only the events of this namespace")
	fs.StringVar(&c.filter.Queue, "queue", "", "only the events of this queue (of --namespace)")
	fs.StringVar(&c.filter.TaskID, "task", "", "only the events of this task")
	fs.StringVar(&c.filter.WorkflowID, "workflow", "", `only the events of this workflow's tasks, and its cancellations and retries (of --namespace, default "default")`)
	fs.StringArrayVar(&c.filter.Types, "type", nil, "only events of this record type, e.g. TaskCompleted (repeat the flag for several)")
	fs.StringVar(&c.post, "post", "", "deliver each event to this URL (POST, signed) instead of printing it; needs --secret-file and --cursor-file")
	fs.StringVar(&c.secretFile, "secret-file", "", "with --post: the file of the shared secret the signatures are made with")
	fs.DurationVar(&c.timeout, "post-timeout", 30*time.Second, "with --post: how long one delivery may take before it is tried again (a stop waits for the delivery in flight, at most this long)")
}

func (c *eventsCmd) run(ctx context.Context, a *app, fs *pflag.FlagSet, _ []string) error {
	if c.filter.WorkflowID != "" && c.filter.Namespace == "" {
		c.filter.Namespace = "default" // a workflow id is its namespace's
	}
	from, err := c.start()
	if err != nil {
		return err
	}
	var post *poster
	if c.post != "" {
		if post, err = c.poster(a); err != nil {
			return err
		}
		if c.client.json {
			return usageError{"--json and --post: --post delivers the events instead of printing them; pass one of them"}
		}
	}
	cl, err := c.client.connect()
	if err != nil {
		return err
	}
	saved := &cursorSaver{path: c.cursorFile, clk: a.clock}
	defer saved.flush()
	for ans, err := range cl.WatchAnswers(ctx, c.filter, from) {
		if err != nil {
			return err
		}
		if c.client.json && post == nil {
			if err := printLine(a.stdout, ans); err != nil {
				return err
			}
		}
		for _, ev := range ans.GetEvents() {
			switch {
			case post != nil:
				if err := post.deliver(ctx, ev); err != nil {
					return nil // stopped (Ctrl-C, SIGTERM) before it was delivered: the cursor stays before it
				}
			case !c.client.json:
				fmt.Fprintln(a.stdout, eventLine(ev))
			}
			saved.set(ev.GetCursor())
		}
		saved.set(ans.GetCursor())
		if !c.follow && ans.GetCaughtUp() {
			break
		}
	}
	return saved.flush()
}

// start is where the events start: the cursor file's, else --from's.
func (c *eventsCmd) start() (string, error) {
	from := cmp.Or(c.from, map[bool]string{true: client.CursorNow, false: client.CursorOldest}[c.follow])
	if c.cursorFile == "" {
		return from, nil
	}
	b, err := os.ReadFile(c.cursorFile)
	if errors.Is(err, os.ErrNotExist) {
		return from, nil
	}
	if err != nil {
		return "", fmt.Errorf("--cursor-file: %w", err)
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return s, nil
	}
	return from, nil
}

// poster delivers events to --post.
type poster struct {
	url     string
	secret  []byte
	hc      *http.Client
	timeout time.Duration
	clk     clock.Clock
	stderr  io.Writer
}

func (c *eventsCmd) poster(a *app) (*poster, error) {
	if c.secretFile == "" || c.cursorFile == "" {
		return nil, usageError{"--post needs --secret-file (the shared secret the deliveries are signed with) and --cursor-file (where delivery resumes after a restart)"}
	}
	if !strings.HasPrefix(c.post, "http://") && !strings.HasPrefix(c.post, "https://") {
		return nil, usageError{fmt.Sprintf("--post %q is not an http:// or https:// URL", c.post)}
	}
	secret, err := os.ReadFile(c.secretFile)
	if err != nil {
		return nil, fmt.Errorf("--secret-file: %w", err)
	}
	secret = bytes.TrimRight(secret, "\r\n")
	if len(secret) < 16 {
		return nil, fmt.Errorf("--secret-file %s holds %d bytes: a secret of at least 16 is needed (for instance: head -c 32 /dev/urandom | base64 > %s)", c.secretFile, len(secret), c.secretFile)
	}
	return &poster{url: c.post, secret: secret, hc: &http.Client{}, timeout: c.timeout, clk: a.clock, stderr: a.stderr}, nil
}

// sign returns the value of signatureHeader for body: "sha256=" and the hex
// HMAC-SHA256 of body with secret.
func sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// deliver posts ev until the endpoint answers 2xx, waiting longer between
// tries; it returns only ctx's error.
func (p *poster) deliver(ctx context.Context, ev *tenurev1.Event) error {
	body, err := protojson.Marshal(ev)
	if err != nil {
		return err
	}
	wait := postBackoffMin
	for {
		err := p.try(ctx, ev, body)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Equal jitter: half the wait, and a random share of the rest.
		d := wait/2 + time.Duration(rand.Int64N(int64(wait/2)+1))
		fmt.Fprintf(p.stderr, "tenure events: delivering event %d:%d (%s) failed: %v; trying again in %v\n",
			ev.GetPartition(), ev.GetLsn(), ev.GetType(), err, d.Round(time.Millisecond))
		if err := clock.Sleep(ctx, p.clk, d); err != nil {
			return err
		}
		wait = min(2*wait, postBackoffMax)
	}
}

// try makes one delivery of ev. A stop (ctx) does not cut a delivery in
// flight: it ends within the timeout, so that an event the endpoint
// acknowledged as the command stops is saved in the cursor file, not
// delivered again at the next start.
func (p *poster) try(ctx context.Context, ev *tenurev1.Event, body []byte) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(signatureHeader, sign(p.secret, body))
	req.Header.Set(eventIDHeader, fmt.Sprintf("%d:%d", ev.GetPartition(), ev.GetLsn()))
	req.Header.Set(eventTypeHeader, ev.GetType())
	req.Header.Set(cursorHeader, ev.GetCursor())
	resp, err := p.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", p.url, resp.Status)
	}
	return nil
}

// cursorSaver keeps the cursor of the last event handled in a file (none:
// nowhere), written at most every cursorSaveEvery and by flush.
type cursorSaver struct {
	path    string
	clk     clock.Clock
	cursor  string
	written string
	at      time.Time
}

func (s *cursorSaver) set(cursor string) {
	if cursor == "" || s.path == "" {
		return
	}
	s.cursor = cursor
	if now := s.clk.Now(); now.Sub(s.at) >= cursorSaveEvery {
		s.at = now
		_ = s.flush() // tried again at the next event, and at the end
	}
}

// flush writes the cursor if it moved: a file beside it, fsynced and
// renamed over it, so that a crash leaves the old cursor or the new.
func (s *cursorSaver) flush() error {
	if s.path == "" || s.cursor == s.written {
		return nil
	}
	tmp := s.path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("--cursor-file: %w", err)
	}
	_, err = f.WriteString(s.cursor + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		return fmt.Errorf("--cursor-file: writing %s: %w", s.path, err)
	}
	if d, err := os.Open(filepath.Dir(s.path)); err == nil {
		d.Sync()
		d.Close()
	}
	s.written = s.cursor
	return nil
}

// eventLine is an event as a line of text: where it is in the log, when,
// what, about what, by whom.
func eventLine(ev *tenurev1.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d:%d  %s  %-20s", ev.GetPartition(), ev.GetLsn(), fmtTime(ev.GetAt().AsTime()), ev.GetType())
	if ev.GetNamespace() != "" || ev.GetQueue() != "" {
		fmt.Fprintf(&b, "  %s/%s", ev.GetNamespace(), ev.GetQueue())
	}
	if ev.GetTaskId() != "" {
		b.WriteString("  " + ev.GetTaskId())
	}
	if by := ev.GetRequestedBy(); by != "" {
		b.WriteString("  by " + by)
	}
	return b.String()
}
