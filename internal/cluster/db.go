package cluster

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Limits of the connection pool OpenDB returns.
const (
	maxOpenConns    = 32
	maxIdleConns    = 8
	connMaxLifetime = 5 * time.Minute
	dialTimeout     = 5 * time.Second
	// waitTimeout is the session's wait_timeout: the server closes a
	// connection that sends nothing for this long, rolling back its open
	// transaction. A node frozen in the middle of a transaction (SIGSTOP, a
	// long GC pause, a partitioned network) would otherwise hold its row
	// locks — the partition's epoch row, locked by every append — until its
	// TCP connection died, and the coordinator could not move the
	// partition. Our transactions send their statements back to back, so
	// a few seconds of silence means the client is gone.
	waitTimeout = 5 * time.Second
	// connMaxIdleTime is below waitTimeout, so the pool drops idle
	// connections before the server does.
	connMaxIdleTime = waitTimeout - time.Second
)

// OpenDB is OpenDBWith(dsn, DBOptions{}).
func OpenDB(dsn string) (*sql.DB, error) { return OpenDBWith(dsn, DBOptions{}) }

// OpenDBWith parses a go-sql-driver/mysql DSN (user:pass@tcp(host:port)/db),
// or a list of them (SplitDSN: several addresses in tcp(…), separated by
// commas), and returns a pool whose every connection has the settings the
// cluster packages rely on, whatever the DSN says about them:
//
//   - time_zone '+00:00': TIMESTAMP values convert without daylight-saving
//     gaps or repeats, and times read back are UTC (parseTime, loc=UTC).
//   - sql_mode with STRICT_ALL_TABLES: an out-of-range or invalid value is
//     an error, never a silent truncation or a zero date.
//   - interpolateParams: one round trip per statement (no server-side
//     prepare), which group commit counts on; except that a statement whose
//     text begins with Prepared is prepared once per connection and then
//     executed with its arguments in the binary protocol (prepared.go).
//   - maxAllowedPacket 0: the driver asks the server for its limit.
//   - wait_timeout 5 s (unless the DSN sets it): a client frozen inside a
//     transaction loses its connection and its row locks within seconds.
//   - autocommit on, whatever the server's default: a statement outside a
//     transaction commits itself, which a partition log's round is
//     (mysqllog; a DSN or server with autocommit=0 would leave rounds
//     uncommitted in an open transaction).
//   - on a Galera node, wsrep_sync_wait = 7: causal reads, updates,
//     deletes and inserts (prepareSession).
//
// Each connection is made to the current server of the list, and only if
// that server is ready (Ready: not read-only; on Galera, synced in a
// primary component); when it does not answer or is not ready, the pool
// moves to the next (failover.go). The pool is bounded (32 open
// connections). The DSN must name a database for everything but
// schema.CreateDatabase.
func OpenDBWith(dsn string, opts DBOptions) (*sql.DB, error) {
	dsns, err := SplitDSN(dsn)
	if err != nil {
		return nil, err
	}
	return openList(dsns, opts)
}

// openList is OpenDBWith over the DSNs SplitDSN returned.
func openList(dsns []string, opts DBOptions) (*sql.DB, error) {
	servers := make([]dbServer, len(dsns))
	for i, d := range dsns {
		cfg, err := mysql.ParseDSN(d)
		if err != nil {
			return nil, fmt.Errorf("cluster: parsing the mysql dsn: %w", err)
		}
		configure(cfg)
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, fmt.Errorf("cluster: mysql dsn: %w", err)
		}
		servers[i] = dbServer{addr: cfg.Addr, conn: conn}
	}
	db := sql.OpenDB(newFailover(servers, opts))
	db.SetMaxOpenConns(maxOpenConns)
	db.SetMaxIdleConns(maxIdleConns)
	db.SetConnMaxLifetime(connMaxLifetime)
	db.SetConnMaxIdleTime(connMaxIdleTime)
	return db, nil
}

// configure sets on cfg what OpenDBWith promises.
func configure(cfg *mysql.Config) {
	if cfg.Params == nil {
		cfg.Params = make(map[string]string)
	}
	cfg.Params["time_zone"] = "'+00:00'"
	if _, set := cfg.Params["wait_timeout"]; !set {
		cfg.Params["wait_timeout"] = strconv.Itoa(int(waitTimeout / time.Second))
	}
	cfg.Params["sql_mode"] = "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'"
	cfg.Params["autocommit"] = "1"
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	cfg.MaxAllowedPacket = 0
	if cfg.Timeout == 0 {
		cfg.Timeout = dialTimeout
	}
}

// SplitDSN returns the DSNs a --mysql value names: the value itself, or,
// when its tcp(…) holds several addresses separated by commas
// (user:pass@tcp(db1:3306,db2:3306,db3:3306)/tenure), one DSN per address
// with everything else the same, in that order.
func SplitDSN(dsn string) ([]string, error) {
	at := strings.LastIndex(dsn, "@tcp(")
	if at < 0 {
		return []string{dsn}, nil
	}
	open := at + len("@tcp(")
	end := strings.IndexByte(dsn[open:], ')')
	if end < 0 {
		return []string{dsn}, nil // ParseDSN explains
	}
	end += open
	addrs := strings.Split(dsn[open:end], ",")
	if len(addrs) == 1 {
		return []string{dsn}, nil
	}
	out := make([]string, 0, len(addrs))
	for i, a := range addrs {
		if a = strings.TrimSpace(a); a == "" {
			return nil, fmt.Errorf("cluster: the mysql dsn's address list tcp(%s) has an empty address (number %d)", dsn[open:end], i+1)
		}
		out = append(out, dsn[:open]+a+dsn[end:])
	}
	return out, nil
}

// MySQL error numbers the cluster packages branch on.
const (
	errDupEntry     = 1062 // ER_DUP_ENTRY
	errLockDeadlock = 1213 // ER_LOCK_DEADLOCK; also Galera's certification failure and brute-force abort
	errLockWait     = 1205 // ER_LOCK_WAIT_TIMEOUT
	// errNotPrepared is ER_UNKNOWN_COM_ERROR, which a Galera node answers
	// ("WSREP has not yet prepared node for application use") while it is
	// not in a primary component or not synced.
	errNotPrepared = 1047
	// errGroupRollback is ER_TRANSACTION_ROLLBACK_DURING_COMMIT, MySQL
	// Group Replication's certification failure: rolled back at commit.
	errGroupRollback = 3101
)

// IsDuplicateKey reports whether err is MySQL's duplicate-key error.
func IsDuplicateKey(err error) bool { return mysqlErrNumber(err) == errDupEntry }

// IsRetryable reports whether the server rolled the statement (or the
// transaction) back and said so, so that it may be run again: a deadlock,
// a lock-wait timeout, or a replicated database's certification failure
// (on Galera, 1213 too: another node committed a conflicting write first,
// or a replicated write aborted this transaction; on Group Replication,
// 3101). The outcome is known — nothing of it was committed — even when the
// error came from COMMIT.
func IsRetryable(err error) bool {
	switch mysqlErrNumber(err) {
	case errLockDeadlock, errLockWait, errGroupRollback:
		return true
	}
	return false
}

// IsNotReady reports whether err is a Galera node's refusal to run a
// statement because it is not ready (not in a primary component, or not
// synced): the statement did not run; another node may run it.
func IsNotReady(err error) bool { return mysqlErrNumber(err) == errNotPrepared }

func mysqlErrNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// CreateDatabase creates the database the DSN (or each DSN of its list)
// names if it does not exist (CREATE DATABASE IF NOT EXISTS, utf8mb4 with a
// binary collation, as the tables use), connecting without a default
// database to do it.
func CreateDatabase(ctx context.Context, dsn string) error {
	dsns, err := SplitDSN(dsn)
	if err != nil {
		return err
	}
	name := ""
	for i, d := range dsns {
		cfg, err := mysql.ParseDSN(d)
		if err != nil {
			return fmt.Errorf("cluster: parsing the mysql dsn: %w", err)
		}
		name = cfg.DBName
		cfg.DBName = ""
		dsns[i] = cfg.FormatDSN()
	}
	if name == "" {
		return fmt.Errorf("cluster: the dsn names no database (…/dbname at its end)")
	}
	if err := CheckName("database name", name); err != nil {
		return err
	}
	if len(name) > 64 || strings.ContainsAny(name, "`\x00/\\.") {
		return fmt.Errorf("cluster: database name %q: use at most 64 characters, none of ` / \\ . or NUL", name)
	}
	db, err := openList(dsns, DBOptions{CheckInterval: -1})
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return fmt.Errorf("cluster: creating database %q: %w", name, err)
	}
	return nil
}

// Querier runs a query: a *sql.DB, *sql.Tx or *sql.Conn.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// EachRow runs query with args on q and calls each for every row of its
// answer, in order, stopping at the first error; it closes the rows
// before it returns. Every error it returns, the query's, each's or the
// rows', is prefixed with what ("registry: listing nodes").
func EachRow(ctx context.Context, q Querier, what, query string, args []any, each func(*sql.Rows) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Column returns the one column of every row of query's answer, in order
// (EachRow: every error is prefixed with what).
func Column[T any](ctx context.Context, q Querier, what, query string, args ...any) ([]T, error) {
	var out []T
	err := EachRow(ctx, q, what, query, args, func(rows *sql.Rows) error {
		var v T
		if err := rows.Scan(&v); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}
