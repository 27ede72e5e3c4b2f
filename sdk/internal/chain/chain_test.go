package chain_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tenurehq/tenure/sdk/internal/chain"
)

type wrapper func(ctx context.Context, c *[]string, next func(context.Context) string) string

// mark notes its name on the way in and out, around the call.
func mark(name string) wrapper {
	return func(ctx context.Context, c *[]string, next func(context.Context) string) string {
		*c = append(*c, name+" in")
		r := next(ctx)
		*c = append(*c, name+" out")
		return name + "(" + r + ")"
	}
}

// TestOf: the first wrapper is outermost, each calls the next, the last
// the call; one wrapper is itself; none is nil.
func TestOf(t *testing.T) {
	if chain.Of([]wrapper(nil)) != nil {
		t.Fatal("Of of no wrappers is not nil")
	}
	for _, tc := range []struct {
		names       []string
		trace, want string
	}{
		{[]string{"a"}, "a in,call,a out", "a(r)"},
		{[]string{"a", "b", "c"}, "a in,b in,c in,call,c out,b out,a out", "a(b(c(r)))"},
	} {
		var ws []wrapper
		for _, n := range tc.names {
			ws = append(ws, mark(n))
		}
		var trace []string
		got := chain.Of(ws)(context.Background(), &trace, func(context.Context) string {
			trace = append(trace, "call")
			return "r"
		})
		if got != tc.want || strings.Join(trace, ",") != tc.trace {
			t.Errorf("%v: %q, trace %v; want %q, %s", tc.names, got, trace, tc.want, tc.trace)
		}
	}
}
