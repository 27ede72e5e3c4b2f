package client

import (
	"fmt"
	"iter"
	"math"
)

// Collect gathers a listing's items (ListTasks, ListQueues,
// ListSchedules) into a slice, or returns the first error: for a short
// listing read whole. A long one is best read in a loop, as it pages.
func Collect[T any](seq iter.Seq2[T, error]) ([]T, error) {
	var out []T
	for v, err := range seq {
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}

// pages is a listing as a sequence that fetches its pages as the loop
// asks for them: page returns the items of the page at token (first for
// the first page) and the next page's token ("" after the last); of
// converts each item. A failed call ends the sequence with its error, an
// item that does not convert with its (zero) value and error.
func pages[P, T any](first string, page func(token string) ([]P, string, error), of func(P) (T, error)) iter.Seq2[*T, error] {
	return func(yield func(*T, error) bool) {
		token := first
		for {
			ps, next, err := page(token)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, p := range ps {
				v, err := of(p)
				if !yield(&v, err) || err != nil {
					return
				}
			}
			if token = next; token == "" {
				return
			}
		}
	}
}

// converted is of as a conversion that cannot fail, for pages.
func converted[P, T any](of func(P) T) func(P) (T, error) {
	return func(p P) (T, error) { return of(p), nil }
}

// pageSize is a request's PageSize as the API takes it; one out of range
// is refused as op's invalid argument.
func pageSize(op string, n int) (int32, error) {
	if n < 0 || n > math.MaxInt32 {
		return 0, invalid(op, "PageSize", fmt.Sprintf("PageSize %d is out of range; use 0 (default) up to the server's limit (1000)", n))
	}
	return int32(n), nil
}
