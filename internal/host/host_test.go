package host

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/coordinator"
	"github.com/tenurehq/tenure/internal/fsys/faultfs"
	"github.com/tenurehq/tenure/internal/snapshot"
	"github.com/tenurehq/tenure/internal/wal"
)

func TestScheduleDue(t *testing.T) {
	t.Parallel()
	s := Schedule{EveryRecords: 100, Every: time.Minute}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name          string
		last, snapLSN uint64
		since, took   time.Duration
		want          bool
	}{
		{"nothing written, long ago", 50, 50, time.Hour, 0, false},
		{"a few records, recently", 60, 50, time.Second, 0, false},
		{"enough records", 150, 50, 0, 0, true},
		{"a few records, long enough ago", 51, 50, time.Minute, 0, true},
		{"a few records, not quite long enough ago", 51, 50, time.Minute - 1, 0, false},
		{"log behind the snapshot", 40, 50, time.Hour, 0, false},
		// The last snapshot took 10 s: none for 100 s after it started.
		{"enough records, soon after a slow snapshot", 150, 50, 99 * time.Second, 10 * time.Second, false},
		{"enough records, long enough after a slow snapshot", 150, 50, 100 * time.Second, 10 * time.Second, true},
		{"long enough ago, but a slower snapshot", 51, 50, time.Minute, 7 * time.Second, false},
	} {
		if got := s.due(tc.last, tc.snapLSN, t0, tc.took, t0.Add(tc.since)); got != tc.want {
			t.Errorf("%s: due = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// walStorage opens a WAL and a snapshot directory on disk.
func walStorage(disk *faultfs.FS, dir string) func(context.Context) (Storage, error) {
	return func(context.Context) (Storage, error) {
		l, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), FS: disk})
		if err != nil {
			return Storage{}, err
		}
		return Storage{Log: l, Snapshots: snapshot.Dir{FS: disk, Path: filepath.Join(dir, "snapshots")}}, nil
	}
}

// TestFailureWithoutReopen: a host that does not reopen stops serving
// when its log fails, tells its owner once, and answers unavailable.
func TestFailureWithoutReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	disk := faultfs.New()
	if err := disk.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var failures atomic.Int32
	h, err := Open(ctx, Config{
		Name:      "partition p",
		Open:      walStorage(disk, dir),
		Schedule:  Schedule{Disabled: true},
		OnFailure: func(error) { failures.Add(1) },
		Clock:     clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	submit := func() error {
		return h.Do(func(c *coordinator.Coordinator) error {
			_, err := c.Submit(ctx, coordinator.SubmitRequest{Queue: "q"})
			return err
		})
	}
	if err := submit(); err != nil {
		t.Fatal(err)
	}
	disk.FailNext(faultfs.OpSync, nil)
	if err := submit(); !errors.Is(err, coordinator.ErrUnavailable) {
		t.Fatalf("submit on a failing disk: %v, want unavailable", err)
	}
	for range 3 {
		if err := submit(); !errors.Is(err, coordinator.ErrUnavailable) {
			t.Fatalf("submit after the failure: %v, want unavailable", err)
		}
	}
	if h.Err() == nil || failures.Load() != 1 {
		t.Fatalf("after the failure: Err() = %v, OnFailure called %d times; want an error and once", h.Err(), failures.Load())
	}
}

func TestRestartWait(t *testing.T) {
	t.Parallel()
	h := &Host{cfg: Config{RestartBackoff: time.Second, MaxRestartBackoff: 10 * time.Second}}
	for failures, want := range []time.Duration{0, 0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
		if got := h.restartWait(failures); got != want {
			t.Errorf("restartWait(%d) = %v, want %v", failures, got, want)
		}
	}
	if got := h.restartWait(1000); got != 10*time.Second {
		t.Errorf("restartWait(1000) = %v, want the maximum", got)
	}
	for _, c := range []Config{{RestartBackoff: -1}, {MaxRestartBackoff: -1}, {RestartBackoff: 2 * time.Second, MaxRestartBackoff: time.Second}} {
		c.Open = func(context.Context) (Storage, error) { return Storage{}, nil }
		if err := c.withDefaults(); err == nil || !strings.Contains(err.Error(), "RestartBackoff") {
			t.Errorf("config %+v: %v, want a refusal naming the field", c, err)
		}
	}
}
