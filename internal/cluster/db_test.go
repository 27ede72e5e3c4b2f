package cluster_test

import (
	"context"
	"testing"

	"github.com/tenurehq/tenure/internal/cluster/clustertest"
)

// A client that freezes inside a transaction (here: one that simply stops
// sending) loses its connection to the server's wait_timeout, and with it
// its row locks, so another session's locking read gets through instead of
// waiting for as long as the frozen process lives.
func TestFrozenTransactionReleasesItsLocks(t *testing.T) {
	_, db := clustertest.DB(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE frozen (id INT PRIMARY KEY, v INT) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO frozen VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	var timeout int
	if err := db.QueryRowContext(ctx, "SELECT @@SESSION.wait_timeout").Scan(&timeout); err != nil || timeout != 5 {
		t.Fatalf("session wait_timeout %d, %v; want 5", timeout, err)
	}
	frozen, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Rollback()
	var v int
	if err := frozen.QueryRowContext(ctx, "SELECT v FROM frozen WHERE id = 1 FOR UPDATE").Scan(&v); err != nil {
		t.Fatal(err)
	}
	// The other session waits for the lock (InnoDB's default lock wait is
	// 50 s, far above the 5 s wait_timeout) and gets it.
	if _, err := db.ExecContext(ctx, "UPDATE frozen SET v = 1 WHERE id = 1"); err != nil {
		t.Fatalf("a locking write behind a frozen transaction: %v", err)
	}
	if err := frozen.Commit(); err == nil {
		t.Fatal("the frozen transaction committed after the server closed its connection")
	}
}
