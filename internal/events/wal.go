package events

import (
	"context"
	"errors"

	"github.com/tenurehq/tenure/internal/wal"
)

// WAL is the file WAL as a feed reads it behind its tail.
func WAL(l *wal.Log) Log { return walLog{l} }

type walLog struct{ l *wal.Log }

func (w walLog) First(context.Context) (uint64, error) { return w.l.FirstLSN(), nil }

func (w walLog) Last(context.Context) (uint64, error) { return w.l.DurableLSN(), nil }

func (w walLog) Open(_ context.Context, from uint64) (Reader, error) {
	r, err := w.l.NewReader(from)
	if err != nil {
		return nil, err
	}
	return walReader{w.l, r}, nil
}

type walReader struct {
	l *wal.Log
	r *wal.Reader
}

// Read reads on; a log closed or failed with nothing more to read has
// nothing now (the feed attaches the log opened after it).
func (w walReader) Read(_ context.Context, max int, fn func(uint64, wal.Entry) error) (int, error) {
	n, err := w.r.Read(max, fn)
	if n == 0 && err != nil && (errors.Is(err, wal.ErrClosed) || err == w.l.Err()) {
		return 0, nil
	}
	return n, err
}

func (w walReader) Close() error { return w.r.Close() }
