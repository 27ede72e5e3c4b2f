package logbuf

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWrites: lines that goroutines log at once, while another
// reads, all arrive whole (go test -race checks the locking).
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	log := slog.New(slog.NewTextHandler(&b, nil))
	const writers, lines = 8, 200
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range lines {
				log.Info("line", "writer", w, "i", i)
			}
		})
	}
	wg.Go(func() {
		for range lines {
			_ = b.Count("msg=line")
		}
	})
	wg.Wait()
	if got := b.Count("msg=line"); got != writers*lines {
		t.Fatalf("%d lines logged, want %d", got, writers*lines)
	}
	for w := range writers {
		if want := fmt.Sprintf("writer=%d i=%d\n", w, lines-1); !strings.Contains(b.String(), want) {
			t.Errorf("the last line of writer %d is not whole (%q)", w, want)
		}
	}
}
