package coordinator

import (
	"strings"

	"github.com/tenurehq/tenure/internal/state"
)

// maxTracestateBytes bounds a submit's tracestate: the 512 characters the
// W3C Trace Context recommendation asks every vendor to pass on. A
// propagator with more drops whole entries from the end.
const maxTracestateBytes = 512

// checkTrace checks a submit's trace context against the W3C Trace
// Context format: a traceparent of version 00 is exactly
// "00-<32 hex>-<16 hex>-<2 hex>", lowercase, with a trace id and a parent
// id that are not all zeros; a later version has at least those fields,
// and anything after them follows a '-'. Version ff is invalid. A
// tracestate needs a traceparent and is printable ASCII. The task keeps
// it (docs/design/records.md, "Snoozes, progress and trace contexts").
func (l Limits) checkTrace(tc state.TraceContext) error {
	if tc.Parent == "" {
		if tc.State != "" {
			return fieldErr("trace_context.tracestate", "set without a traceparent: send both, or neither")
		}
		return nil
	}
	if why := traceparentProblem(tc.Parent, l.MaxIDBytes); why != "" {
		return fieldErr("trace_context.traceparent", "%q is not a W3C traceparent (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>): %s", tc.Parent, why)
	}
	if len(tc.State) > maxTracestateBytes {
		return &LimitError{Field: "trace_context.tracestate", Size: len(tc.State), Limit: maxTracestateBytes}
	}
	for i := 0; i < len(tc.State); i++ {
		if c := tc.State[i]; c < 0x20 || c > 0x7e {
			return fieldErr("trace_context.tracestate", "byte %d is %#x: a tracestate is printable ASCII (key=value entries separated by commas)", i, c)
		}
	}
	return nil
}

// traceparentProblem says what is wrong with a traceparent, or "".
func traceparentProblem(v string, maxBytes int) string {
	const n = 55 // the length of a version 00 traceparent
	switch {
	case len(v) > maxBytes:
		return "too long"
	case len(v) < n:
		return "too short"
	case v[2] != '-' || v[35] != '-' || v[52] != '-':
		return "its fields are not separated by '-'"
	case !lowerHex(v[0:2]) || !lowerHex(v[3:35]) || !lowerHex(v[36:52]) || !lowerHex(v[53:55]):
		return "a field is not lowercase hex"
	case v[0:2] == "ff":
		return "version ff is invalid"
	case v[3:35] == strings.Repeat("0", 32):
		return "the trace id is all zeros"
	case v[36:52] == strings.Repeat("0", 16):
		return "the parent id is all zeros"
	case v[0:2] == "00" && len(v) != n:
		return "version 00 has nothing after the flags"
	case len(v) > n && v[n] != '-':
		return "the flags are not followed by '-'"
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c > 0x7e {
			return "it holds a byte that is not printable ASCII"
		}
	}
	return ""
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
