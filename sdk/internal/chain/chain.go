// Package chain composes the wrappers of a call (the client's
// interceptors, the worker's middleware) into one.
package chain

import "context"

// Of is ws as one wrapper, the first outermost: each calls the next
// through its next argument, the last the call itself. Nil for none.
func Of[W ~func(ctx context.Context, c C, next func(context.Context) R) R, C, R any](ws []W) W {
	switch len(ws) {
	case 0:
		return nil
	case 1:
		return ws[0]
	}
	outer, inner := ws[0], Of(ws[1:])
	return func(ctx context.Context, c C, next func(context.Context) R) R {
		return outer(ctx, c, func(ctx context.Context) R { return inner(ctx, c, next) })
	}
}
