package cluster_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/clustertest"
)

// sessionStatus reads one of the connection's own status counters.
func sessionStatus(t *testing.T, c *sql.Conn, name string) int {
	t.Helper()
	var n int
	var ignored string
	if err := c.QueryRowContext(context.Background(), "SHOW SESSION STATUS LIKE ?", name).Scan(&ignored, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A statement with the Prepared prefix is prepared once per connection and
// executed as the prepared statement from then on, its blobs unchanged by
// the binary protocol; a connection keeps at most 16 of them and runs the
// others interpolated, and the results are the same either way.
func TestPreparedStatements(t *testing.T) {
	_, db := clustertest.DB(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	blob := make([]byte, 256)
	for i := range blob {
		blob[i] = byte(i) // every byte value, quotes and backslashes included
	}
	insert := cluster.Prepared + "INSERT INTO blobs (id, b) VALUES (?, ?)"
	read := cluster.Prepared + "SELECT b FROM blobs WHERE id = ?"
	prepares, executes := sessionStatus(t, c, "Com_stmt_prepare"), sessionStatus(t, c, "Com_stmt_execute")
	for id := range 3 {
		if _, err := c.ExecContext(ctx, insert, id, blob); err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := c.QueryRowContext(ctx, read, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, blob) {
			t.Fatalf("row %d read back as %x, want %x", id, got, blob)
		}
	}
	if p, e := sessionStatus(t, c, "Com_stmt_prepare")-prepares, sessionStatus(t, c, "Com_stmt_execute")-executes; p != 2 || e != 6 {
		t.Fatalf("two statements run three times each: %d prepares and %d executes, want 2 and 6", p, e)
	}

	// 20 more texts: 14 more are prepared (16 in all), the rest interpolated.
	prepares = sessionStatus(t, c, "Com_stmt_prepare")
	for i := range 20 {
		var n int
		if err := c.QueryRowContext(ctx, fmt.Sprintf("%sSELECT %d + ?", cluster.Prepared, i), 1).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != i+1 {
			t.Fatalf("statement %d answered %d, want %d", i, n, i+1)
		}
	}
	if p := sessionStatus(t, c, "Com_stmt_prepare") - prepares; p != 14 {
		t.Fatalf("%d statements prepared beyond the first two, want 14 (16 per connection)", p)
	}
	// Without the prefix, nothing is prepared.
	prepares = sessionStatus(t, c, "Com_stmt_prepare")
	if _, err := c.ExecContext(ctx, "INSERT INTO blobs (id, b) VALUES (?, ?)", 10, blob); err != nil {
		t.Fatal(err)
	}
	if p := sessionStatus(t, c, "Com_stmt_prepare") - prepares; p != 0 {
		t.Fatalf("a statement without the prefix was prepared (%d prepares)", p)
	}
}
