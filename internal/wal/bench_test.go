package wal

import (
	"context"
	"testing"
)

// benchPayload is the size of a typical coordinator record.
const benchPayload = 200

func reportRecords(b *testing.B, l *Log) {
	s := l.Stats()
	b.ReportMetric(float64(s.Records)/b.Elapsed().Seconds(), "records/s")
	if s.Batches > 0 {
		b.ReportMetric(float64(s.Records)/float64(s.Batches), "records/write")
	}
	if s.Records > 0 {
		b.ReportMetric(float64(s.Fsyncs)/float64(s.Records), "fsyncs/record")
	}
}

func BenchmarkAppendSync(b *testing.B) {
	l := openLog(b, Options{Dir: b.TempDir()})
	e := []Entry{{Type: 1, Payload: make([]byte, benchPayload)}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.AppendSync(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
	reportRecords(b, l)
}

func BenchmarkAppendSyncParallel(b *testing.B)     { benchParallel(b, SyncAlways) }
func BenchmarkAppendSyncNoneParallel(b *testing.B) { benchParallel(b, SyncNone) }

// benchParallel runs 32 appenders per GOMAXPROCS, as concurrent requests
// would, each waiting for its record.
func benchParallel(b *testing.B, policy SyncPolicy) {
	l := openLog(b, Options{Dir: b.TempDir(), Sync: policy})
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		e := []Entry{{Type: 1, Payload: make([]byte, benchPayload)}}
		for pb.Next() {
			if _, err := l.AppendSync(ctx, e); err != nil {
				b.Fatal(err)
			}
		}
	})
	reportRecords(b, l)
}

// BenchmarkReplay replays a 100k-record log (about 22 MB) per iteration.
func BenchmarkReplay(b *testing.B) {
	const n = 100_000
	l := openLog(b, Options{Dir: b.TempDir(), SegmentBytes: 4 << 20, Sync: SyncNone})
	batch := make([]Entry, 1000)
	for i := range batch {
		batch[i] = Entry{Type: 1, Payload: make([]byte, benchPayload)}
	}
	for range n / len(batch) {
		if _, err := l.AppendSync(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.SetBytes(n * (frameHeaderSize + benchPayload))
	for b.Loop() {
		count := 0
		if err := l.Replay(1, func(uint64, Entry) error { count++; return nil }); err != nil || count != n {
			b.Fatalf("Replay: %d records, %v", count, err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
