package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/sdk/client"
)

// Task is one leased attempt of a task, as its handler sees it: the leased
// task (its ID, Kind, Queue, Attempt, LeaseID, Payload, ...) and its
// arguments, decoded from the payload into a T. It does not change while
// the attempt runs (LeaseExpiry is the expiry at lease time; heartbeats
// move the real one). For a raw handler (HandleRaw, HandleOther), T is
// []byte and Args is the payload.
type Task[T any] struct {
	*client.LeasedTask
	Args T
}

// Handler runs a task of a raw kind (HandleRaw, HandleOther): it gets the
// payload as it is and returns the task's result. It must return soon
// after ctx ends (lease lost or shutdown); its result is then discarded.
// Wrap an error with Permanent to fail the task without retries.
type Handler func(ctx context.Context, t *Task[[]byte]) (result []byte, err error)

// Effects applies a committed result's external effects (HandleRaw,
// HandleOther). It must be idempotent keyed by token.TaskID: it may run
// again, with the same result, on a finalisation lease after a crash or
// after it failed. It is never run for a result that lost the commit.
type Effects func(ctx context.Context, t *Task[[]byte], result []byte, token FencingToken) error

// route is what a Worker runs for the tasks of one kind.
type route struct {
	// run runs the handler of lt and returns the task's result, encoded.
	run func(ctx context.Context, lt *client.LeasedTask) ([]byte, error)
	// apply, when set, applies a committed result's effects: the result
	// is committed first, and the task completed after.
	apply func(ctx context.Context, lt *client.LeasedTask, result []byte, tok FencingToken) error
}

// Handle registers fn for the tasks of T's kind (T.Kind()): the worker
// decodes each task's payload into a T with its codec and completes the
// task when fn returns nil. A handler error fails the attempt: the task
// is retried per its retry policy, or fails for good if the error is
// wrapped with Permanent; a payload that does not decode into a T fails
// the task for good. fn must return soon after ctx ends (lease lost or
// shutdown).
//
// Register every handler before Run. Handle panics if T's kind already has
// a handler, or is not a valid kind: like http.Handle, a programming
// error found at start.
func Handle[T client.Args](w *Worker, fn func(ctx context.Context, t *Task[T]) error) {
	if fn == nil {
		panic("worker: Handle: the handler is nil")
	}
	register(w, kindOf[T]("Handle"), &route{run: func(ctx context.Context, lt *client.LeasedTask) ([]byte, error) {
		t, err := decode[T](w.codec, lt)
		if err != nil {
			return nil, err
		}
		return nil, fn(ctx, t)
	}})
}

// HandleResult is Handle for a handler with a result: the worker encodes
// the R that fn returns with its codec as the task's result (GetTask's
// Result), which the submitter reads. A []byte result is kept as it is.
func HandleResult[T client.Args, R any](w *Worker, fn func(ctx context.Context, t *Task[T]) (R, error)) {
	if fn == nil {
		panic("worker: HandleResult: the handler is nil")
	}
	register(w, kindOf[T]("HandleResult"), &route{run: resultOf(w, fn)})
}

// resultOf is the work of a kind whose handler fn has a result: fn runs
// on the task decoded with the worker's codec, and its result is encoded
// with it.
func resultOf[T client.Args, R any](w *Worker, fn func(ctx context.Context, t *Task[T]) (R, error)) func(context.Context, *client.LeasedTask) ([]byte, error) {
	return func(ctx context.Context, lt *client.LeasedTask) ([]byte, error) {
		t, err := decode[T](w.codec, lt)
		if err != nil {
			return nil, err
		}
		r, err := fn(ctx, t)
		if err != nil {
			return nil, err
		}
		return encodeResult(w.codec, r)
	}
}

// HandleEffects registers a kind whose work has external effects, with
// the commit boundary: compute works out the result without side effects;
// the worker commits it; only if that commit wins does apply run, with the
// fencing token; then the task is completed. So across all attempts and
// workers, apply runs for one result only: a stalled attempt whose lease
// expired while another ran never applies its own.
//
// apply may still run more than once for that result (see the package
// documentation): after a crash, or when it keeps failing, a finalisation
// lease runs it again with the committed result, decoded into an R,
// without running compute. It must be idempotent, keyed by
// token.TaskID: charge the card with that idempotency key, send the mail
// with it.
func HandleEffects[T client.Args, R any](w *Worker, compute func(ctx context.Context, t *Task[T]) (R, error),
	apply func(ctx context.Context, t *Task[T], result R, token FencingToken) error) {
	if compute == nil || apply == nil {
		panic("worker: HandleEffects: compute and apply must both be set")
	}
	register(w, kindOf[T]("HandleEffects"), &route{
		run: resultOf(w, compute),
		apply: func(ctx context.Context, lt *client.LeasedTask, result []byte, tok FencingToken) error {
			t, err := decode[T](w.codec, lt)
			if err != nil {
				return err
			}
			var r R
			if err := decodeResult(w.codec, result, &r); err != nil {
				return fmt.Errorf("worker: the committed result of task %s does not decode into a %T: %w", lt.ID, r, err)
			}
			return apply(ctx, t, r, tok)
		},
	})
}

// HandleRaw registers h for the tasks of kind as they are: the payload as
// bytes, for the tasks of other languages' clients (or any whose payload
// you decode yourself). Kind "" is the tasks submitted without a kind.
// effects, if not nil, runs with the commit boundary as in HandleEffects.
func HandleRaw(w *Worker, kind string, h Handler, effects Effects) {
	if h == nil {
		panic("worker: HandleRaw: the handler is nil")
	}
	if kind != "" {
		if err := checkKind(kind); err != nil {
			panic("worker: HandleRaw: " + err.Error())
		}
	}
	register(w, kind, rawRoute(h, effects))
}

// HandleOther registers h for every kind no other handler is registered
// for, raw as in HandleRaw (a generic worker, such as tenure worker
// --exec). Without it, a task of a kind the worker does not know fails for
// good, with a reason that names the kind.
func HandleOther(w *Worker, h Handler, effects Effects) {
	if h == nil {
		panic("worker: HandleOther: the handler is nil")
	}
	if w.started.Load() {
		panic("worker: HandleOther after Run: register every handler before Run")
	}
	if w.other != nil {
		panic("worker: HandleOther: registered twice")
	}
	w.other = rawRoute(h, effects)
}

func rawRoute(h Handler, effects Effects) *route {
	r := &route{run: func(ctx context.Context, lt *client.LeasedTask) ([]byte, error) {
		return h(ctx, &Task[[]byte]{LeasedTask: lt, Args: lt.Payload})
	}}
	if effects != nil {
		r.apply = func(ctx context.Context, lt *client.LeasedTask, result []byte, tok FencingToken) error {
			return effects(ctx, &Task[[]byte]{LeasedTask: lt, Args: lt.Payload}, result, tok)
		}
	}
	return r
}

// register adds r for kind.
func register(w *Worker, kind string, r *route) {
	if w.started.Load() {
		panic(fmt.Sprintf("worker: a handler for kind %q registered after Run: register every handler before Run", kind))
	}
	if _, ok := w.routes[kind]; ok {
		panic(fmt.Sprintf("worker: kind %q has a handler already", kind))
	}
	w.routes[kind] = r
}

// routeOf returns the handler of kind, or nil.
func (w *Worker) routeOf(kind string) *route {
	if r, ok := w.routes[kind]; ok {
		return r
	}
	return w.other
}

// kinds lists the kinds the worker handles, sorted, "" shown as (none).
func (w *Worker) kinds() []string {
	out := make([]string, 0, len(w.routes)+1)
	for k := range w.routes {
		if k == "" {
			k = "(none)"
		}
		out = append(out, k)
	}
	slices.Sort(out)
	if w.other != nil {
		out = append(out, "(any other)")
	}
	return out
}

// unknownKind is the error of a task of a kind no handler of the worker
// takes.
func (w *Worker) unknownKind(kind string) error {
	what := fmt.Sprintf("kind %q", kind)
	if kind == "" {
		what = `tasks without a kind (register one with worker.HandleRaw(w, "", ...))`
	}
	return fmt.Errorf("worker: no handler for %s on worker %s, which handles %s; register one, or retry the task (tenure task retry) once a worker that handles it runs",
		what, w.opts.WorkerID, strings.Join(w.kinds(), ", "))
}

// kindOf is T's kind, checked; call names the registration for its panic.
func kindOf[T client.Args](call string) string {
	var zero T
	kind := zero.Kind()
	if err := checkKind(kind); err != nil {
		panic(fmt.Sprintf("worker: %s[%T]: %v", call, zero, err))
	}
	return kind
}

// checkKind checks a kind as the server does: 1 to 128 bytes of letters,
// digits and . _ - : /.
func checkKind(kind string) error {
	if kind == "" || len(kind) > 128 {
		return fmt.Errorf("kind %q: a kind is 1 to 128 bytes", kind)
	}
	for i := 0; i < len(kind); i++ {
		switch c := kind[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-', c == ':', c == '/':
		default:
			return fmt.Errorf("kind %q holds %q: a kind is letters, digits and . _ - : / only", kind, c)
		}
	}
	return nil
}

// decode is lt as a Task[T], its payload decoded with codec; a payload
// that does not decode fails the task for good (no retry would help).
func decode[T any](codec client.Codec, lt *client.LeasedTask) (*Task[T], error) {
	t := &Task[T]{LeasedTask: lt}
	if err := codec.Unmarshal(lt.Payload, &t.Args); err != nil {
		return nil, Permanent(fmt.Errorf("worker: the payload of task %s (kind %q) does not decode into a %T: %w", lt.ID, lt.Kind, t.Args, err))
	}
	return t, nil
}

// encodeResult encodes a handler's result; a []byte is kept as it is.
func encodeResult[R any](codec client.Codec, r R) ([]byte, error) {
	if b, ok := any(r).([]byte); ok {
		return b, nil
	}
	b, err := codec.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("worker: encoding the result (%T): %w", r, err)
	}
	return b, nil
}

// decodeResult is the inverse of encodeResult.
func decodeResult[R any](codec client.Codec, b []byte, r *R) error {
	if p, ok := any(r).(*[]byte); ok {
		*p = b
		return nil
	}
	return codec.Unmarshal(b, r)
}
