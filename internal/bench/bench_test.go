package bench

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"encoding/binary"
	"net/http"
	"strings"
	"testing"
	"time"

	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want Latency
	}{
		{"empty", nil, Latency{}},
		{"one", []time.Duration{3 * ms}, Latency{Count: 1, P50: 3, P90: 3, P99: 3, Max: 3, Mean: 3}},
		// Nearest rank: p50 of 4 values is the 2nd, p90 and p99 the 4th.
		{"four unsorted", []time.Duration{4 * ms, 1 * ms, 3 * ms, 2 * ms}, Latency{Count: 4, P50: 2, P90: 4, P99: 4, Max: 4, Mean: 2.5}},
		{"hundred", hundred(), Latency{Count: 100, P50: 50, P90: 90, P99: 99, Max: 100, Mean: 50.5}},
		{"microseconds", []time.Duration{1500 * time.Nanosecond}, Latency{Count: 1, P50: 0.002, P90: 0.002, P99: 0.002, Max: 0.002, Mean: 0.002}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.in); got != tc.want {
				t.Errorf("summarize = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func hundred() []time.Duration {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[i] = time.Duration(100-i) * time.Millisecond
	}
	return ds
}

func TestRecorderDropsPastCapacity(t *testing.T) {
	r := newRecorder(2)
	for _, d := range []time.Duration{3, 1, 2} {
		r.add(d * time.Millisecond)
	}
	if got := r.summary(); got.Count != 2 || got.Max != 3 {
		t.Errorf("summary %+v, want the first two values", got)
	}
	if r.dropped.Load() != 1 {
		t.Errorf("dropped %d, want 1", r.dropped.Load())
	}
}

func TestFillPayloadDeterministic(t *testing.T) {
	a, b, c := make([]byte, 21), make([]byte, 21), make([]byte, 21)
	fillPayload(a, 7, 3)
	fillPayload(b, 7, 3)
	fillPayload(c, 7, 4)
	if !bytes.Equal(a, b) {
		t.Errorf("same seed and index gave %x and %x", a, b)
	}
	if bytes.Equal(a, c) {
		t.Errorf("different indexes gave the same payload %x", a)
	}
	if bytes.Equal(a, make([]byte, 21)) {
		t.Errorf("payload is all zeros")
	}
}

func TestValidate(t *testing.T) {
	ok := func() Config {
		return Config{Tasks: 10, PayloadBytes: 1, Submitters: 1, Batch: 1, Workers: 1, Concurrency: 4, LeaseBatch: 4, CompleteBatch: 4, Queue: "q"}
	}
	c := ok()
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if c.Mode != Sequential || c.Protocol != "connect" || c.Namespace != "default" || c.ProgressEvery != time.Second {
		t.Errorf("defaults not filled: %+v", c)
	}
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Tasks = 0 }, "--tasks 0"},
		{func(c *Config) { c.Batch = MaxBatch + 1 }, "--batch 1001"},
		{func(c *Config) { c.LeaseBatch = 5 }, "--lease-batch 5 is above --concurrency 4"},
		{func(c *Config) { c.CompleteBatch = 0 }, "--complete-batch 0"},
		{func(c *Config) { c.Mode = "both" }, "--mode"},
		{func(c *Config) { c.Protocol = "soap" }, "--protocol"},
		{func(c *Config) { c.Queue = "" }, "--queue is empty"},
		{func(c *Config) { c.Addr, c.DataDir = "http://x", "/tmp" }, "--data-dir"},
		{func(c *Config) { c.Mode, c.HeapProfile = Concurrent, &bytes.Buffer{} }, "--memprofile"},
		{func(c *Config) { c.TLS, c.Addr = true, "https://x" }, "--tls is for the embedded server"},
		{func(c *Config) { c.TLS, c.Cluster, c.MySQL = true, 2, "dsn" }, "--tls is for the embedded server"},
		{func(c *Config) { c.ClientTLS = &tls.Config{} }, "are for an https:// --addr"},
	} {
		c := ok()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want an error with %q", err, tc.want)
		}
	}
}

func TestTargets(t *testing.T) {
	rss := 250.0
	r := &Result{
		SubmittedPerSec: 120_000,
		CompletedPerSec: 5_000,
		Probe: &Probe{
			DiskFsync: &Latency{P99: 0.3},
			Submit:    Latency{P99: 1.5},
			Handoff:   Latency{P50: 0.8},
		},
		Memory: Memory{RSSPerTaskBeyondPayload: &rss},
	}
	r.evaluateTargets()
	want := map[string]bool{
		"submitted_per_sec":           true,
		"completed_per_sec":           false,
		"submit_p99_above_fsync_p99":  false, // 1.2 ms above
		"handoff_p50":                 true,
		"rss_per_task_beyond_payload": true,
	}
	for _, tg := range r.Targets {
		if tg.Met == nil || *tg.Met != want[tg.Name] {
			t.Errorf("target %s: met %v, want %v", tg.Name, tg.Met, want[tg.Name])
		}
	}

	remote := &Result{}
	remote.evaluateTargets()
	for _, tg := range remote.Targets[2:] {
		if tg.Met != nil || tg.Value != nil {
			t.Errorf("target %s evaluated without a measurement", tg.Name)
		}
	}
}

func TestBatchAcks(t *testing.T) {
	// Item 1 of 3 failed.
	msg := &tenurev1.CompleteBatchResponse{Failed: []*tenurev1.CompleteResult{{TaskId: "b", Code: "failed_precondition", Message: "lost", Index: 1}}}
	pb, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	envelope := func(flags byte, b []byte) []byte {
		return append(binary.BigEndian.AppendUint32([]byte{flags}, uint32(len(b))), b...)
	}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, tc := range []struct {
		name string
		h    http.Header
		body []byte
	}{
		{"connect proto", hdr("Content-Type", "application/proto"), pb},
		{"connect proto gzip", hdr("Content-Type", "application/proto", "Content-Encoding", "gzip"), gz(pb)},
		{"connect json", hdr("Content-Type", "application/json"), js},
		{"grpc", hdr("Content-Type", "application/grpc"), envelope(0, pb)},
		{"grpc gzip", hdr("Content-Type", "application/grpc+proto", "Grpc-Encoding", "gzip"), envelope(1, gz(pb))},
	} {
		if n, err := batchAcks(tc.h, tc.body, 3); n != 2 || err != nil {
			t.Errorf("%s: %d, %v; want 2 acknowledged items", tc.name, n, err)
		}
	}
	if _, err := batchAcks(hdr("Content-Type", "application/grpc"), envelope(0, pb)[:7], 3); err == nil {
		t.Errorf("a cut gRPC message decoded")
	}
	if _, err := batchAcks(hdr("Content-Type", "application/proto"), pb, -1); err == nil {
		t.Errorf("an answer counted without the request's number of items")
	}
}
