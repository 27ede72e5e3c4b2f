package client

import (
	"context"
	"net/http"

	"google.golang.org/protobuf/proto"
)

// Interceptor runs around a call the client makes: it may look at the
// call, add headers, change ctx, time it, and see its error; it must call
// next once to make the call (or return an error without making it). One
// interceptor run covers the call's retries (a call answered unavailable
// is tried again inside next), and each try sends call.Header.
//
// A logging interceptor:
//
//	func logCalls(ctx context.Context, call *client.Call, next func(context.Context) error) error {
//		start := time.Now()
//		err := next(ctx)
//		slog.InfoContext(ctx, "tenure call", "op", call.Op, "took", time.Since(start), "err", err)
//		return err
//	}
//
// Interceptors are set in Options.Interceptors, the first outermost. They
// run on the goroutine of the call, for every call: keep them quick.
type Interceptor func(ctx context.Context, call *Call, next func(ctx context.Context) error) error

// Call is what an interceptor sees of one call.
type Call struct {
	// Op is the API's method: "Submit", "Lease", "CompleteBatch", ... (the
	// Client method's name, or, for ListTasks, "ListTasks" once per page).
	Op string
	// Header holds HTTP headers sent with each try of the call (gRPC
	// metadata alike); an interceptor may add to it before it calls next.
	// The client's own (content type, Authorization) are set after it.
	Header http.Header
	// Reply is the API's answer to the call, as the server sent it (a
	// *tenurev1.GetTaskResponse for GetTask), before the client turns it
	// into its own types: set once next returned nil, nil until then and
	// after an error. The tenure CLI prints it (protojson) for --json.
	Reply proto.Message
}
