// Package principal carries, in a request's context, the name of who asks:
// the token's name when authentication is on. The coordinator writes it
// into the records a request appends (their By field), so that the log
// answers "who did this" (docs/design/records.md).
//
// It is only the context key, so that the packages that read it (the
// coordinator) need not depend on how callers are authenticated.
package principal

import "context"

type key struct{}

// With returns ctx carrying the principal name.
func With(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, key{}, name)
}

// From returns the principal name ctx carries, or "" when none does
// (authentication off, or an internal caller).
func From(ctx context.Context) string {
	name, _ := ctx.Value(key{}).(string)
	return name
}
