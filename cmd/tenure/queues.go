package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/sdk/client"
)

// The queue commands: `tenure queues`, `tenure queue get|pause|resume|limit`.

// queuesCmd is `tenure queues`.
type queuesCmd struct {
	client    clientFlags
	namespace string
}

func (*queuesCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "queues [flags]",
		Short: "list the queues: tasks by state, oldest waiting, pauses, limits, the last hour",
		Long: `List the queues that exist (with a task, paused, with limits, or with an
event in the last hour), ordered by namespace and queue, one line each:

  WAITING … DEAD   tasks in each state
  OLDEST-WAITING   how long the oldest due waiting task has waited ("-": none due)
  LEASES           leases held now (LEASED tasks, COMMITTED ones being finalised)
  PAUSED           yes, no, or "k/n" partitions while a pause or resume is partial
  LIMITS           flow control, such as conc=10,rate=5/s,burst=20 ("-": none)
  DONE/1H FAILED/1H EXPIRED/1H
                   tasks completed, tasks failed and leases expired in the last hour

The server keeps these counters as it goes: asking is cheap. With --json it
prints the API's ListQueuesResponse, with the last minute, the last 5
minutes and each of the last 60 minutes too.`,
		Example: `  tenure queues
  tenure queues --namespace billing --json | jq '.queues[] | {queue, tasks}'`,
	}
}

func (c *queuesCmd) define(fs *pflag.FlagSet) {
	c.client.add(fs)
	fs.StringVar(&c.namespace, "namespace", "", "only the queues of this namespace (default: all)")
}

func (c *queuesCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	return ask(ctx, a, &c.client, c.client.connect, func(ctx context.Context, cl *client.Client) ([]*client.Queue, error) {
		return client.Collect(cl.ListQueues(ctx, client.ListQueuesRequest{Namespace: c.namespace}))
	}, func(qs []*client.Queue) error {
		if len(qs) == 0 {
			fmt.Fprintln(a.stderr, "no queues")
			return nil
		}
		w := table(a.stdout)
		fmt.Fprintln(w, "NAMESPACE\tQUEUE\tWAITING\tLEASED\tCOMMITTED\tCOMPLETED\tFAILED\tDEAD\tOLDEST-WAITING\tLEASES\tPAUSED\tLIMITS\tDONE/1H\tFAILED/1H\tEXPIRED/1H")
		for _, q := range qs {
			n := q.Tasks
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%s\t%d\t%d\t%d\n", q.Namespace, q.Queue,
				n.Waiting, n.Leased, n.Committed, n.Completed, n.Failed, n.Dead, fmtAge(q.OldestWaitingAge), q.ActiveLeases,
				pausedColumn(q), limitsColumn(q), q.LastHour.Completed, q.LastHour.Failed, q.LastHour.LeaseExpired)
		}
		return w.Flush()
	})
}

// pausedColumn is the PAUSED column: yes, no, or paused/all partitions
// while only some are paused.
func pausedColumn(q *client.Queue) string {
	switch {
	case q.Paused:
		return "yes"
	case q.PausedPartitions > 0:
		return fmt.Sprintf("%d/%d", q.PausedPartitions, q.Partitions)
	}
	return "no"
}

// fmtAge shows how long a task waited, to a precision that suits its
// size; "-" for none.
func fmtAge(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

// queueGetCmd is `tenure queue get`.
type queueGetCmd struct {
	client clientFlags
	ns     namespaceFlag
}

func (*queueGetCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "get [flags] QUEUE",
		Args:  oneArg("queue"),
		Short: "show a queue: tasks by state, oldest waiting, pause, limits, recent events",
		Long: `Show one queue: its tasks by state, how long its oldest due waiting task
has waited, the leases held, whether it is paused (since when, by whom,
why), its flow control (` + "`tenure queue limit`" + `), and what happened over the last
minute, 5 minutes and hour. A queue that does not exist (no task, not
paused, no limits, no event in the last hour) is an error. With --json it prints the API's GetQueueResponse.`,
		Example: `  tenure queue get emails
  tenure queue get invoices --namespace billing --json`,
	}
}

func (c *queueGetCmd) define(fs *pflag.FlagSet) {
	c.client.add(fs)
	c.ns.add(fs, "queue")
}

func (c *queueGetCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	name := args[0]
	return ask(ctx, a, &c.client, c.client.connect, func(ctx context.Context, cl *client.Client) (*client.Queue, error) {
		return cl.GetQueue(ctx, client.GetQueueRequest{Namespace: c.ns.namespace, Queue: name})
	}, func(q *client.Queue) error {
		printQueue(a.stdout, q)
		return nil
	})
}

// printQueue prints a queue as `tenure queue get` shows it.
func printQueue(out io.Writer, q *client.Queue) {
	w, row := fieldTable(out)
	row("queue", q.Namespace+"/"+q.Queue)
	state := "running"
	switch {
	case q.Paused:
		state = "paused " + pauseText(q.Pause)
	case q.PausedPartitions > 0:
		state = fmt.Sprintf("partly paused: %d of %d partitions (a pause or resume is under way, or failed part way: repeat it) %s",
			q.PausedPartitions, q.Partitions, pauseText(q.Pause))
	}
	row("state", state)
	n := q.Tasks
	row("tasks", fmt.Sprintf("%d waiting, %d leased, %d committed, %d completed, %d failed, %d dead",
		n.Waiting, n.Leased, n.Committed, n.Completed, n.Failed, n.Dead))
	row("oldest waiting", strings.Replace(fmtAge(q.OldestWaitingAge), "-", "none due", 1))
	row("active leases", fmt.Sprint(q.ActiveLeases))
	row("limits", limitsText(q))
	if q.Limits != nil && q.LimitedPartitions != q.Partitions {
		row("", fmt.Sprintf("only %d of %d partitions have them (a change is under way, or failed part way: repeat it)", q.LimitedPartitions, q.Partitions))
	}
	if k := q.Keys; k != nil {
		row("keys", keysText(k))
	}
	if q.Partitions > 1 {
		row("partitions", fmt.Sprint(q.Partitions))
	}
	fmt.Fprintln(w, "events\tSUBMITTED\tCOMPLETED\tFAILED\tLEASES-EXPIRED")
	for _, e := range []struct {
		name string
		ev   client.QueueEvents
	}{{"  last minute", q.LastMinute}, {"  last 5 minutes", q.Last5Minutes}, {"  last hour", q.LastHour}} {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", e.name, e.ev.Submitted, e.ev.Completed, e.ev.Failed, e.ev.LeaseExpired)
	}
	if k := q.Keys; k != nil && len(k.Top) > 0 {
		fmt.Fprintln(w, "top keys\tWAITING\tLEASED\tHELD-BY")
		for _, t := range k.Top {
			fmt.Fprintf(w, "  %s\t%d\t%d\t%s\n", t.Key, t.Waiting, t.Leased, cmp.Or(t.Held, "-"))
		}
	}
	w.Flush()
}

// keysText says how many keys a queue has and how many a limit holds
// back: "3 with unfinished tasks; held back: 1 by concurrency, 2 by rate".
func keysText(k *client.QueueKeys) string {
	s := fmt.Sprintf("%d with unfinished tasks", k.Keys)
	var held []string
	for _, h := range []struct {
		n   uint64
		why string
	}{{k.HeldByConcurrency, "concurrency"}, {k.HeldByRate, "rate"}, {k.HeldByOrder, "order"}} {
		if h.n > 0 {
			held = append(held, fmt.Sprintf("%d by %s", h.n, h.why))
		}
	}
	if len(held) > 0 {
		s += "; held back: " + strings.Join(held, ", ")
	}
	return s
}

// pauseText says when, by whom and why a queue was paused: "(since T by
// X: reason)".
func pauseText(p *client.QueuePause) string {
	if p == nil {
		return ""
	}
	return sinceText(p.PausedAt, p.RequestedBy, p.Reason)
}

// sinceText says when, by whom and why an operator changed something:
// "(since T by X: reason)".
func sinceText(at time.Time, by, reason string) string {
	s := "since " + fmtTime(at)
	if by != "" {
		s += " by " + by
	}
	if reason != "" {
		s += ": " + reason
	}
	return "(" + s + ")"
}

// queueControlCmd is `tenure queue pause` (pause set) and `tenure queue
// resume`.
type queueControlCmd struct {
	pause   bool
	control controlFlags
	ns      namespaceFlag
}

func (c *queueControlCmd) spec() *cobra.Command {
	if c.pause {
		return &cobra.Command{
			Use:   "pause [flags] QUEUE",
			Args:  oneArg("queue"),
			Short: "pause a queue: workers lease nothing more from it until resume",
			Long: `Pause a queue: it leases nothing more (workers' long-polls wait) but its
COMMITTED tasks, to be finalised. It still accepts submits, and leases held
already keep their authority. The pause is a WAL record, with who asked
(--requested-by) and why (--reason): it holds across restarts until
` + "`tenure queue resume`" + `. Pausing a paused queue changes nothing; a queue that
does not exist is an error. With --json it prints the API's
PauseQueueResponse.`,
			Example: `  tenure queue pause emails --reason 'incident 42: SMTP relay down'`,
		}
	}
	return &cobra.Command{
		Use:   "resume [flags] QUEUE",
		Args:  oneArg("queue"),
		Short: "resume a paused queue",
		Long: `Resume a paused queue: it leases again, and workers waiting on it get tasks
at once. Resuming a running queue changes nothing; a queue that does not
exist is an error. With --json it prints the API's ResumeQueueResponse.`,
		Example: `  tenure queue resume emails --reason 'relay back'`,
	}
}

func (c *queueControlCmd) define(fs *pflag.FlagSet) {
	c.control.add(fs, "")
	c.ns.add(fs, "queue")
}

func (c *queueControlCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, args []string) error {
	name := args[0]
	return ask(ctx, a, &c.control.client, c.control.connect, func(ctx context.Context, cl *client.Client) (client.QueueControlResult, error) {
		if c.pause {
			return cl.PauseQueue(ctx, client.PauseQueueRequest{Namespace: c.ns.namespace, Queue: name, Reason: c.control.reason})
		}
		return cl.ResumeQueue(ctx, client.ResumeQueueRequest{Namespace: c.ns.namespace, Queue: name, Reason: c.control.reason})
	}, func(res client.QueueControlResult) error {
		q, path := &res.Queue, res.Queue.Namespace+"/"+res.Queue.Queue
		switch {
		case c.pause && res.Changed:
			fmt.Fprintf(a.stdout, "paused queue %s\n", path)
		case c.pause:
			fmt.Fprintf(a.stdout, "queue %s was already paused %s\n", path, pauseText(q.Pause))
		case res.Changed:
			fmt.Fprintf(a.stdout, "resumed queue %s\n", path)
		default:
			fmt.Fprintf(a.stdout, "queue %s was not paused\n", path)
		}
		if q.Paused != c.pause {
			verb := "pause"
			if !c.pause {
				verb = "resume"
			}
			return fmt.Errorf("only %d of the queue's %d partitions are paused: run `tenure queue %s --namespace %s %s` again",
				q.PausedPartitions, q.Partitions, verb, shellQuote(q.Namespace), shellQuote(q.Queue))
		}
		return nil
	})
}

// queueLimitCmd is `tenure queue limit`.
type queueLimitCmd struct {
	control                   controlFlags
	ns                        namespaceFlag
	maxConcurrency, rate, bst string
	// The limits of the queue's keys.
	keyMaxConcurrency, keyRate, keyBurst string
	keyOrdered, fair                     bool
	keyWeights                           []string
}

func (*queueLimitCmd) spec() *cobra.Command {
	return &cobra.Command{
		Use:   "limit [flags] QUEUE",
		Args:  oneArg("queue"),
		Short: "set or clear a queue's flow control: max concurrency, rate and burst, for the queue and per key",
		Long: `Set or clear a queue's flow control:

  --max-concurrency N   at most N leases of the queue live at once, across all
                        workers (LEASED tasks and COMMITTED ones being finalised)
  --rate R              at most R leases per second on average (a token bucket;
                        R may be a fraction, to the thousandth: 0.5 is one every
                        2 seconds)
  --burst B             the leases a full bucket grants at once (default with a
                        new rate: the queue's burst if it has a rate, otherwise
                        R rounded up)

and per key (a task's --key; docs/design/keys.md):

  --key-max-concurrency N   at most N leases of one key live at once
  --key-rate R              at most R leases of one key per second (a token
                            bucket per key), with --key-burst B
  --key-ordered             a key's tasks run one at a time, in creation
                            order (a failed task waiting for its retry holds
                            its key's place); --key-ordered=false ends it
  --fair                    leasing takes turns across the keys with tasks
                            to lease, instead of the queue's order of
                            priority then age; --fair=false ends it
  --key-weight KEY=W        with --fair, KEY takes W turns (1 to 1000) for
                            one of a key of weight 1; repeat it for several
                            keys; KEY=1 removes KEY's weight, none all

A limit not given is kept as it is; "none" clears one (--rate none clears
the burst too, --key-rate none the key burst). Workers long-polling a queue at its limits get a task as
soon as a lease ends or a token arrives. Lowering a limit revokes no lease.
Each change is a WAL record, with who asked (--requested-by) and why
(--reason). In cluster mode the limits are split over the queue's
partitions and the leases of all of them together never exceed them (see
docs/guides/flow-control.md); the key limits are not split: every task of
a key is in one partition. A queue that does not exist yet is created.
It prints the resulting limits; with --json the API's
SetQueueLimitsResponse.`,
		Example: `  tenure queue limit emails --max-concurrency 10
  tenure queue limit payments --rate 5 --burst 20 --reason 'provider allows 5/s'
  tenure queue limit payments --rate none
  tenure queue limit payments --key-max-concurrency 2 --key-rate 5 --fair
  tenure queue limit ledger --key-ordered`,
	}
}

func (c *queueLimitCmd) define(fs *pflag.FlagSet) {
	c.control.add(fs, "")
	c.ns.add(fs, "queue")
	fs.StringVar(&c.maxConcurrency, "max-concurrency", "", "at most this many leases live at once, or none")
	fs.StringVar(&c.rate, "rate", "", "at most this many leases per second, or none")
	fs.StringVar(&c.bst, "burst", "", "the leases a full token bucket grants at once")
	fs.StringVar(&c.keyMaxConcurrency, "key-max-concurrency", "", "at most this many leases of one key live at once, or none")
	fs.StringVar(&c.keyRate, "key-rate", "", "at most this many leases of one key per second, or none")
	fs.StringVar(&c.keyBurst, "key-burst", "", "the leases of one key a full bucket grants at once")
	fs.BoolVar(&c.keyOrdered, "key-ordered", false, "run a key's tasks one at a time, in creation order (--key-ordered=false: no longer)")
	fs.BoolVar(&c.fair, "fair", false, "take turns across the keys (--fair=false: no longer)")
	fs.StringArrayVar(&c.keyWeights, "key-weight", nil, "KEY=W: the fair weight of a key, 1 to 1000 (repeat for several keys; KEY=1 removes one, none removes all)")
}

func (c *queueLimitCmd) run(ctx context.Context, a *app, fs *pflag.FlagSet, args []string) error {
	name := args[0]
	req := client.SetQueueLimitsRequest{Namespace: c.ns.namespace, Queue: name, Reason: c.control.reason}
	for _, err := range []error{
		limitArg(fs, "max-concurrency", c.maxConcurrency, parseCount, &req.ClearMaxConcurrency, &req.MaxConcurrency),
		limitArg(fs, "rate", c.rate, parseRate, &req.ClearRate, &req.Rate),
		limitArg(fs, "burst", c.bst, parseCount, nil, &req.Burst),
		limitArg(fs, "key-max-concurrency", c.keyMaxConcurrency, parseCount, &req.ClearKeyMaxConcurrency, &req.KeyMaxConcurrency),
		limitArg(fs, "key-rate", c.keyRate, parseRate, &req.ClearKeyRate, &req.KeyRate),
		limitArg(fs, "key-burst", c.keyBurst, parseCount, nil, &req.KeyBurst),
	} {
		if err != nil {
			return err
		}
	}
	if fs.Changed("key-ordered") {
		req.KeyOrdered = &c.keyOrdered
	}
	if fs.Changed("fair") {
		req.Fair = &c.fair
	}
	for _, kw := range c.keyWeights {
		if kw == "none" {
			req.ClearKeyWeights = true
			continue
		}
		key, w, ok := strings.Cut(kw, "=")
		n, err := strconv.ParseUint(w, 10, 32)
		if !ok || key == "" || err != nil {
			return usageError{fmt.Sprintf("--key-weight %q: want KEY=W, such as acme=5 (or none to remove every weight)", kw)}
		}
		req.KeyWeights = append(req.KeyWeights, client.KeyWeight{Key: key, Weight: uint32(n)})
	}
	if req.MaxConcurrency == nil && req.Rate == nil && req.Burst == nil && !req.ClearMaxConcurrency && !req.ClearRate &&
		req.KeyMaxConcurrency == nil && req.KeyRate == nil && req.KeyBurst == nil && !req.ClearKeyMaxConcurrency && !req.ClearKeyRate &&
		req.KeyOrdered == nil && req.Fair == nil && len(req.KeyWeights) == 0 && !req.ClearKeyWeights {
		return usageError{"no limit given: set or clear --max-concurrency, --rate or --burst, or a limit of the keys (--key-max-concurrency, --key-rate, --key-burst, --key-ordered, --fair, --key-weight)"}
	}
	return ask(ctx, a, &c.control.client, c.control.connect, func(ctx context.Context, cl *client.Client) (client.QueueControlResult, error) {
		return cl.SetQueueLimits(ctx, req)
	}, func(res client.QueueControlResult) error {
		q, path := &res.Queue, res.Queue.Namespace+"/"+res.Queue.Queue
		if res.Changed {
			fmt.Fprintf(a.stdout, "queue %s limits: %s\n", path, limitsText(q))
		} else {
			fmt.Fprintf(a.stdout, "queue %s had these limits already: %s\n", path, limitsText(q))
		}
		if want := q.Partitions; q.Limits != nil && q.LimitedPartitions != want || q.Limits == nil && q.LimitedPartitions != 0 {
			return fmt.Errorf("only %d of the queue's %d partitions have these limits: run the same `tenure queue limit` again", q.LimitedPartitions, q.Partitions)
		}
		return nil
	})
}

// limitArg sets a limit of a request from its flag, if the command line
// gives it: "none" clears the limit (sets clear; a burst, which has no
// clear of its own, is cleared with its rate), otherwise parse gives the
// value.
func limitArg[T any](fs *pflag.FlagSet, flag, v string, parse func(string) (T, error), clear *bool, val **T) error {
	switch {
	case !fs.Changed(flag):
		return nil
	case v == "none" && clear == nil:
		rate := strings.Replace(flag, "burst", "rate", 1)
		return usageError{fmt.Sprintf("--%s none: the %s is cleared with the %s (--%s none)",
			flag, strings.ReplaceAll(flag, "-", " "), strings.ReplaceAll(rate, "-", " "), rate)}
	case v == "none":
		*clear = true
		return nil
	}
	x, err := parse(v)
	if err != nil {
		return usageError{fmt.Sprintf("--%s %q: %v, or none to clear the limit", flag, v, err)}
	}
	*val = &x
	return nil
}

func parseCount(v string) (uint32, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, errors.New("want a whole number")
	}
	return uint32(n), nil
}

func parseRate(v string) (float64, error) {
	r, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, errors.New("want a number of leases per second")
	}
	return r, nil
}

// limitsText says a queue's limits in words: "max concurrency 10, rate
// 5/s (burst 20), key max concurrency 2, fair (since T by X: reason)", or
// "none".
func limitsText(q *client.Queue) string {
	l := q.Limits
	if l == nil {
		return "none"
	}
	text := strings.Join(limitParts(q, limitWords), ", ")
	if l.SetAt.IsZero() { // key weights alone: their record keeps no limits
		return text
	}
	return text + " " + sinceText(l.SetAt, l.RequestedBy, l.Reason)
}

// limitsColumn is the LIMITS column of `tenure queues`: one word, such as
// conc=10,rate=5/s,burst=20,keyconc=2,fair; "-" for none.
func limitsColumn(q *client.Queue) string {
	if q.Limits == nil {
		return "-"
	}
	return strings.Join(limitParts(q, limitColumn), ",")
}

// limitFormats are the formats of each limit: the max concurrency, the
// rate and burst, and the same of the keys, ordered keys and fair turns.
type limitFormats struct{ conc, rate, keyConc, keyRate, ordered, fair, weights, sep string }

var (
	limitWords = limitFormats{"max concurrency %d", "rate %s/s (burst %d)", "key max concurrency %d", "key rate %s/s (burst %d)", "keys ordered", "fair",
		"key weights %s", " "}
	limitColumn = limitFormats{"conc=%d", "rate=%s/s,burst=%d", "keyconc=%d", "keyrate=%s/s,keyburst=%d", "ordered", "fair", "weights=%s", "+"}
)

// limitParts says each limit of q in the formats f.
func limitParts(q *client.Queue, f limitFormats) []string {
	l := q.Limits
	var parts []string
	if l.MaxConcurrency > 0 {
		parts = append(parts, fmt.Sprintf(f.conc, l.MaxConcurrency))
	}
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf(f.rate, fmtRate(l.Rate), l.Burst))
	}
	if l.KeyMaxConcurrency > 0 {
		parts = append(parts, fmt.Sprintf(f.keyConc, l.KeyMaxConcurrency))
	}
	if l.KeyRate > 0 {
		parts = append(parts, fmt.Sprintf(f.keyRate, fmtRate(l.KeyRate), l.KeyBurst))
	}
	if l.KeyOrdered {
		parts = append(parts, f.ordered)
	}
	if l.Fair {
		parts = append(parts, f.fair)
	}
	if len(q.KeyWeights) > 0 {
		var ws []string
		for _, w := range q.KeyWeights {
			ws = append(ws, fmt.Sprintf("%s=%d", w.Key, w.Weight))
		}
		parts = append(parts, fmt.Sprintf(f.weights, strings.Join(ws, f.sep)))
	}
	return parts
}

func fmtRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }
