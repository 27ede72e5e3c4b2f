package main

// The --json output of a command that calls the API is the API's answer:
// the response message the server sent, as protojson with the options of
// the Connect JSON codec the server answers with (field names in
// lowerCamelCase, enums by their names, bytes in base64, 64-bit integers
// as strings, durations as "1.500s", times in RFC 3339, fields at their
// zero value left out), indented. It is what curl shows for the same
// call, spacing aside; TestCLIJSONIsTheAPIsAnswer holds every such
// command to it. The command takes the answer from the SDK
// (client.Call.Reply, kept with --json by the interceptor keepAnswers),
// and draws its text from the SDK's types.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/sdk/client"
)

// answers are the API's answers to the calls a command made with a
// context of capture: what its --json prints.
type answers struct {
	mu      sync.Mutex
	replies []proto.Message
}

type answersKey struct{}

// capture returns ctx for the calls whose answers are kept.
func (r *answers) capture(ctx context.Context) context.Context {
	return context.WithValue(ctx, answersKey{}, r)
}

// keepAnswers is the interceptor of the CLI's clients: it keeps the answer
// of a call made with a context of capture.
func keepAnswers(ctx context.Context, call *client.Call, next func(context.Context) error) error {
	err := next(ctx)
	if r, ok := ctx.Value(answersKey{}).(*answers); ok && err == nil && call.Reply != nil {
		r.mu.Lock()
		r.replies = append(r.replies, call.Reply)
		r.mu.Unlock()
	}
	return err
}

// all returns the answers kept, in the order of their calls.
func (r *answers) all() []proto.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.replies
}

// print prints the one answer kept.
func (r *answers) print(w io.Writer) error {
	got := r.all()
	if len(got) != 1 {
		return fmt.Errorf("the command kept %d answers of the API to print, not one (a bug of the command)", len(got))
	}
	return printJSON(w, got[0])
}

// ask makes a command's one call of the API, with the client connect
// returns and a context of capture, and prints its answer: with --json the
// API's answer, else what show prints of the SDK's result.
func ask[T any](ctx context.Context, a *app, f *clientFlags, connect func() (*client.Client, error),
	call func(context.Context, *client.Client) (T, error), show func(T) error) error {
	cl, err := connect()
	if err != nil {
		return err
	}
	res, err := call(f.capture(ctx), cl)
	if err != nil {
		return err
	}
	if f.json {
		return f.answers.print(a.stdout)
	}
	return show(res)
}

// table returns a writer of the CLI's tables: tab-separated cells, in
// columns two spaces apart once Flush writes them.
func table(out io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(out, 0, 4, 2, ' ', 0) }

// fieldTable returns a table of one thing's fields, as the get commands
// print it, and the function that adds a field's line: its name, then
// its value.
func fieldTable(out io.Writer) (*tabwriter.Writer, func(name, value string)) {
	w := table(out)
	return w, func(name, value string) { fmt.Fprintf(w, "%s\t%s\n", name, value) }
}

// printJSON prints a message of the API as the server's Connect JSON codec
// writes it (protojson, default options), indented by encoding/json: the
// same spacing for every build (protojson's own varies on purpose).
func printJSON(w io.Writer, m proto.Message) error {
	return writeJSON(w, m, func(out *bytes.Buffer, b []byte) error { return json.Indent(out, b, "", "  ") })
}

// printLine prints a message of the API as protojson on one line, without
// spaces: a line of a stream.
func printLine(w io.Writer, m proto.Message) error { return writeJSON(w, m, json.Compact) }

// writeJSON writes m as protojson with default options, spaced by layout
// (encoding/json's Indent or Compact: protojson's own spacing varies on
// purpose), and a newline.
func writeJSON(w io.Writer, m proto.Message, layout func(out *bytes.Buffer, b []byte) error) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := layout(&out, b); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = out.WriteTo(w)
	return err
}
