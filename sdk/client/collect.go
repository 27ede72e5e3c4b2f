package client

import "iter"

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
