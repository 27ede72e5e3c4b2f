package cluster

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/internal/clock"
)

// A pool from OpenDB reaches its database through a failover connector: a
// list of database servers (one or more), each new connection made to the
// current one, a move to the next when the current one stops answering or
// is not ready, and a move back to an earlier one once it has stayed ready
// (failback.go; docs/design/cluster.md, "A replicated database"). Every fencing
// rule holds whichever server a statement reaches: they are all rows of the
// one database, and every time that decides ownership is the database's or
// measured from the sending of a statement the database confirmed.

// Defaults of DBOptions.
const (
	DefaultCheckInterval = time.Second
	DefaultCheckTimeout  = 3 * time.Second
	DefaultFailbackAfter = 30 * time.Second
)

// DBOptions configure OpenDBWith. Zero fields take their defaults.
type DBOptions struct {
	// Logger is told of every change of server (from, to and why) and of
	// a server found not ready; nil discards.
	Logger *slog.Logger
	// CheckInterval is how often the current server's readiness is
	// checked, and that of each server earlier in the list than the
	// current one (default 1 s); a negative value turns the checks off
	// (connections are still checked when they are made) and with them
	// the move back.
	CheckInterval time.Duration
	// FailbackAfter is how long a server earlier in the list than the
	// current one must pass every readiness check (and at least three in
	// a row) before new connections go back to it (default 30 s): the
	// first server of the list is the preferred one, and a node that fled
	// it returns once it is ready again, not at its first good answer. A
	// negative value: never move back (only a failure moves the pool).
	FailbackAfter time.Duration
	// CheckTimeout bounds one readiness check, and the connection it
	// makes (default 3 s).
	CheckTimeout time.Duration
	// Clock times the checks; nil is the real clock.
	Clock clock.Clock
}

func (o DBOptions) withDefaults() DBOptions {
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	o.CheckInterval = cmp.Or(o.CheckInterval, DefaultCheckInterval)
	o.CheckTimeout = cmp.Or(o.CheckTimeout, DefaultCheckTimeout)
	o.FailbackAfter = cmp.Or(o.FailbackAfter, DefaultFailbackAfter)
	o.Clock = cmp.Or(o.Clock, clock.Real)
	return o
}

// dbServer is one database server of the list.
type dbServer struct {
	addr string // host:port, for messages
	conn driver.Connector
}

// failover is the driver.Connector of a pool from OpenDB.
type failover struct {
	servers []dbServer
	opts    DBOptions

	mu  sync.Mutex
	cur int // the server new connections go to
	// last is the server the last connection was made to (or the pool
	// moved back to), why what made the pool leave it since, if it did:
	// a move is logged when a connection reaches a server other than last.
	last int
	why  string
	// gen counts the moves from one server to another (or away from the
	// only one): a connection made in an earlier generation is discarded
	// when it goes back to the pool.
	gen     atomic.Uint64
	trouble map[int]string // the last problem logged per server, "" while none

	stop context.CancelFunc
	wg   sync.WaitGroup // watch and watchFailback
}

// newFailover returns the connector over servers (at least one) and starts
// its readiness checks.
func newFailover(servers []dbServer, opts DBOptions) *failover {
	f := &failover{servers: servers, opts: opts.withDefaults(), trouble: make(map[int]string)}
	ctx, stop := context.WithCancel(context.Background())
	f.stop = stop
	if f.opts.CheckInterval > 0 {
		f.wg.Go(func() { f.watch(ctx) })
		if len(servers) > 1 && f.opts.FailbackAfter >= 0 {
			f.wg.Go(func() { f.watchFailback(ctx) })
		}
	}
	return f
}

// Driver is the driver of the servers' connectors.
func (f *failover) Driver() driver.Driver { return f.servers[0].conn.Driver() }

// Close stops the readiness checks (sql.DB.Close calls it).
func (f *failover) Close() error {
	f.stop()
	f.wg.Wait()
	return nil
}

// Connect makes a connection to the current server or, if it does not
// answer or is not ready, to the next one that does and is, which becomes
// the current server. It fails when none of them is.
func (f *failover) Connect(ctx context.Context) (driver.Conn, error) {
	f.mu.Lock()
	start, gen := f.cur, f.gen.Load()
	f.mu.Unlock()
	var errs []error
	for i := range f.servers {
		idx := (start + i) % len(f.servers)
		c, err := f.open(ctx, idx)
		if err == nil {
			return &conn{Conn: c, f: f, gen: f.use(idx, gen, errs), idx: idx}, nil
		}
		f.report(idx, err)
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(f.servers) == 1 {
		return nil, errs[0]
	}
	return nil, fmt.Errorf("cluster: none of the %d databases answers and is ready: %w", len(f.servers), errors.Join(errs...))
}

// open connects to server idx and checks that it is ready (Ready).
func (f *failover) open(ctx context.Context, idx int) (driver.Conn, error) {
	s := f.servers[idx]
	c, err := s.conn.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("cluster: database %s does not answer: %w", s.addr, err)
	}
	if err := prepareSession(ctx, c, s.addr); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// use makes server idx, reached by a connection begun in generation gen,
// the current one if it is not, logs the move if connections went to
// another server before (why: what made the pool leave it, and the errors
// of the servers tried before idx), and returns the generation the
// connection belongs to. If the pool moved since gen (a failed check, a
// move back), that move stands: the connection is of gen, used once and
// discarded.
func (f *failover) use(idx int, gen uint64, skipped []error) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.trouble[idx] != "" {
		f.opts.Logger.Info("cluster database ready again", slog.String("database", f.servers[idx].addr))
		f.trouble[idx] = ""
	}
	if f.gen.Load() != gen {
		return gen
	}
	if f.cur != idx {
		f.cur = idx
		f.gen.Add(1)
	}
	if f.last != idx {
		why := f.why
		for _, err := range skipped {
			why = strings.TrimPrefix(why+"; "+err.Error(), "; ")
		}
		if why == "" {
			why = "a new connection reached no database before it in the list"
		}
		f.opts.Logger.Warn("cluster database: moved to another database of the list",
			slog.String("from", f.servers[f.last].addr), slog.String("to", f.servers[idx].addr), slog.String("why", why))
		f.last = idx
	}
	f.why = ""
	return f.gen.Load()
}

// drop records that server idx failed (err): if it is the current one, new
// connections go to the next, and the connections made so far are
// discarded as they come back to the pool. The move is logged when a
// connection reaches another server (use), not here: while no server
// answers, the pool tries one after another without moving anywhere.
func (f *failover) drop(idx int, err error) {
	f.report(idx, err)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur == idx {
		f.cur = (idx + 1) % len(f.servers)
		f.gen.Add(1)
		if f.why == "" {
			f.why = err.Error()
		}
	}
}

// moveBack makes server to, earlier in the list than the current server
// from, the current one, unless the pool moved meanwhile, and logs why.
func (f *failover) moveBack(from, to int, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cur != from {
		return
	}
	f.cur, f.last, f.why = to, to, ""
	f.gen.Add(1)
	f.opts.Logger.Info("cluster database: moved back to a database earlier in the list",
		slog.String("from", f.servers[from].addr), slog.String("to", f.servers[to].addr), slog.String("why", why))
}

// report logs a server's problem when it is new: one line per change, not
// one per connection.
func (f *failover) report(idx int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	msg := err.Error()
	if f.trouble[idx] == msg {
		return
	}
	f.trouble[idx] = msg
	what := "the next database of the list is tried"
	if len(f.servers) == 1 {
		what = "treated as lost contact until it is ready again"
	}
	f.opts.Logger.Warn("cluster database unusable: "+what, slog.String("database", f.servers[idx].addr), slog.Any("err", err))
}

// watch checks the current server's readiness every CheckInterval, on a
// connection of its own, until ctx ends. A server that fails the check is
// dropped: a Galera node that became a donor, lost its quorum or stopped
// answering is left for the next one before statements queue on it.
func (f *failover) watch(ctx context.Context) {
	mon := f.newMonitor()
	defer mon.close()
	for clock.Sleep(ctx, f.opts.Clock, f.opts.CheckInterval) == nil {
		f.mu.Lock()
		idx := f.cur
		f.mu.Unlock()
		mon.keepOnly(func(i int) bool { return i == idx })
		err := mon.check(ctx, idx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			f.drop(idx, err)
		}
	}
}

// watchFailback checks, every CheckInterval until ctx ends, each server
// earlier in the list than the current one, each on a connection of its
// own, and moves the pool back to the earliest that has passed its checks
// for FailbackAfter (failback).
func (f *failover) watchFailback(ctx context.Context) {
	mon := f.newMonitor()
	defer mon.close()
	fb := newFailback(f.opts.FailbackAfter)
	for clock.Sleep(ctx, f.opts.Clock, f.opts.CheckInterval) == nil {
		f.mu.Lock()
		cur := f.cur
		f.mu.Unlock()
		fb.keepBelow(cur)
		mon.keepOnly(func(i int) bool { return i < cur })
		for idx := range cur {
			err := mon.check(ctx, idx)
			if ctx.Err() != nil {
				return
			}
			began, ended := fb.observe(idx, err == nil, f.opts.Clock.Now())
			switch {
			case began:
				f.opts.Logger.Info("cluster database earlier in the list is ready: the pool moves back to it once it has stayed ready",
					slog.String("database", f.servers[idx].addr), slog.String("current", f.servers[cur].addr), slog.Duration("after", f.opts.FailbackAfter))
			case ended:
				f.opts.Logger.Info("cluster database earlier in the list failed a readiness check: the pool stays where it is, and waits for it to stay ready again",
					slog.String("database", f.servers[idx].addr), slog.String("current", f.servers[cur].addr), slog.Any("err", err))
			}
		}
		if to, why, ok := fb.due(cur, f.opts.Clock.Now()); ok {
			f.moveBack(cur, to, why)
		}
	}
}

// monitor holds a connection per server for readiness checks, made when
// first needed and again after it broke. One goroutine uses it.
type monitor struct {
	f     *failover
	conns map[int]driver.Conn
}

func (f *failover) newMonitor() *monitor { return &monitor{f: f, conns: make(map[int]driver.Conn)} }

// check checks server idx's readiness: nil, a NotReadyError, or why it
// could not be asked.
func (m *monitor) check(ctx context.Context, idx int) error {
	s := m.f.servers[idx]
	cctx, cancel := context.WithTimeout(ctx, m.f.opts.CheckTimeout)
	defer cancel()
	c := m.conns[idx]
	if c == nil {
		var err error
		if c, err = s.conn.Connect(cctx); err != nil {
			return fmt.Errorf("cluster: database %s does not answer: %w", s.addr, err)
		}
		m.conns[idx] = c
	}
	_, err := checkReady(cctx, c, s.addr)
	if err != nil && !errors.As(err, new(NotReadyError)) {
		c.Close() // a broken connection: make a new one next time
		delete(m.conns, idx)
	}
	return err
}

// keepOnly closes the connections to the servers keep is false for.
func (m *monitor) keepOnly(keep func(idx int) bool) {
	for i, c := range m.conns {
		if !keep(i) {
			c.Close()
			delete(m.conns, i)
		}
	}
}

func (m *monitor) close() { m.keepOnly(func(int) bool { return false }) }

// NotReadyError is a database server that answers but must not be used:
// a Galera node that is not synced with its cluster (joining, a donor,
// desynced, or without quorum), or a read-only server (a replica not
// promoted).
type NotReadyError struct {
	Addr   string
	Reason string
}

func (e NotReadyError) Error() string {
	return fmt.Sprintf("cluster: database %s is not ready: %s", e.Addr, e.Reason)
}

// Ready decides from a server's variables and status (as SHOW VARIABLES and
// SHOW GLOBAL STATUS name them, lower case; absent ones are missing from
// the maps) whether it runs Galera (wsrep_on) and whether it may be used:
// reason is empty if so, else why not.
func Ready(vars, status map[string]string) (galera bool, reason string) {
	if strings.EqualFold(vars["read_only"], "ON") {
		return false, "read_only is ON (a replica, not a primary)"
	}
	if !strings.EqualFold(vars["wsrep_on"], "ON") {
		return false, ""
	}
	if v := status["wsrep_ready"]; !strings.EqualFold(v, "ON") {
		return true, fmt.Sprintf("wsrep_ready is %q, want ON (the node is not part of a primary component)", v)
	}
	if v := status["wsrep_cluster_status"]; v != "Primary" {
		return true, fmt.Sprintf("wsrep_cluster_status is %q, want Primary (the node has no quorum)", v)
	}
	if v := status["wsrep_local_state_comment"]; v != "Synced" {
		return true, fmt.Sprintf("wsrep_local_state_comment is %q, want Synced (joining, a donor or desynced)", v)
	}
	return true, ""
}

// checkReady reads what Ready needs on c and returns whether the server
// runs Galera, or a NotReadyError.
func checkReady(ctx context.Context, c driver.Conn, addr string) (galera bool, err error) {
	vars, err := showPairs(ctx, c, "SHOW VARIABLES WHERE Variable_name IN ('read_only', 'wsrep_on')")
	if err != nil {
		return false, fmt.Errorf("cluster: database %s: reading its variables: %w", addr, err)
	}
	var status map[string]string
	if strings.EqualFold(vars["wsrep_on"], "ON") {
		status, err = showPairs(ctx, c, "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_cluster_status', 'wsrep_local_state_comment')")
		if err != nil {
			return true, fmt.Errorf("cluster: database %s: reading its wsrep status: %w", addr, err)
		}
	}
	galera, reason := Ready(vars, status)
	if reason != "" {
		return galera, NotReadyError{Addr: addr, Reason: reason}
	}
	return galera, nil
}

// prepareSession checks a new connection's server and sets what the
// session needs on it: on Galera, wsrep_sync_wait = 7, so that every read,
// INSERT, UPDATE and DELETE first waits until this node has applied every
// transaction the cluster committed before it (causal). Nearly every read
// tenure makes decides something about ownership — the partition's epoch
// before an append, the log's end when a partition opens, the lock, the
// node table, the partition map — and must see the latest commits made
// through any node. An UPDATE or DELETE run on a stale view could match no
// row and write nothing, which Galera's certification (of the rows a
// transaction writes) cannot catch. A plain INSERT would need no wait (a
// row another node committed meanwhile fails its certification), but a
// partition log's round is one INSERT … SELECT that reads the epoch in
// autocommit, with no BEGIN before it to wait: the INSERT bit gives it the
// causal view a transaction's BEGIN gave. The variable exists only where
// wsrep does (MySQL has none), so it is set only there.
func prepareSession(ctx context.Context, c driver.Conn, addr string) error {
	galera, err := checkReady(ctx, c, addr)
	if err != nil {
		return err
	}
	if !galera {
		return nil
	}
	ex, ok := c.(driver.ExecerContext)
	if !ok {
		return fmt.Errorf("cluster: database %s: the driver cannot run statements", addr)
	}
	if _, err := ex.ExecContext(ctx, "SET SESSION wsrep_sync_wait = 7", nil); err != nil {
		return fmt.Errorf("cluster: database %s: setting wsrep_sync_wait: %w", addr, err)
	}
	return nil
}

// showPairs runs a SHOW statement of two columns (name, value) on c.
func showPairs(ctx context.Context, c driver.Conn, q string) (map[string]string, error) {
	qc, ok := c.(driver.QueryerContext)
	if !ok {
		return nil, errors.New("the driver cannot run queries")
	}
	rows, err := qc.QueryContext(ctx, q, nil)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]string)
	dest := make([]driver.Value, len(rows.Columns()))
	if len(dest) != 2 {
		return nil, fmt.Errorf("%q answered %d columns, want 2", q, len(dest))
	}
	for {
		err := rows.Next(dest)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out[strings.ToLower(text(dest[0]))] = text(dest[1])
	}
}

func text(v driver.Value) string {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// conn is a connection made by a failover connector: the driver's, which
// it forwards every call to, marked with the generation it was made in. It
// stops being valid when the connector moves to another server, and a
// statement refused because the server is not ready (ER_UNKNOWN_COM_ERROR,
// Galera's "WSREP has not yet prepared node for application use") drops
// the server.
type conn struct {
	driver.Conn
	f   *failover
	gen uint64
	idx int
	// stmts are the statements with the Prepared prefix that this
	// connection prepared (prepared.go). database/sql uses a connection
	// from one goroutine at a time, so they need no lock.
	stmts map[string]driver.Stmt
}

// check drops the server after an answer that says it is not ready, and
// returns err unchanged.
func (c *conn) check(err error) error {
	if IsNotReady(err) {
		c.f.drop(c.idx, NotReadyError{Addr: c.f.servers[c.idx].addr, Reason: err.Error()})
	}
	return err
}

func (c *conn) stale() bool { return c.gen != c.f.gen.Load() }

// IsValid is false once the connector moved on from this connection's
// server (database/sql then closes it instead of pooling it).
func (c *conn) IsValid() bool {
	if c.stale() {
		return false
	}
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// ResetSession refuses a connection taken from the pool after the
// connector moved on (driver.ErrBadConn: database/sql makes a new one).
func (c *conn) ResetSession(ctx context.Context) error {
	if c.stale() {
		return driver.ErrBadConn
	}
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := c.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errors.New("cluster: the driver has no BeginTx")
	}
	tx, err := b.BeginTx(ctx, opts)
	return tx, c.check(err)
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		s, err := p.PrepareContext(ctx, query)
		return s, c.check(err)
	}
	s, err := c.Prepare(query)
	return s, c.check(err)
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	e, direct := c.Conn.(driver.ExecerContext)
	return execOrQuery(c, ctx, query, direct, func(s driver.Stmt) (driver.Result, error) {
		return s.(driver.StmtExecContext).ExecContext(ctx, args)
	}, func() (driver.Result, error) { return e.ExecContext(ctx, query, args) })
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	q, direct := c.Conn.(driver.QueryerContext)
	return execOrQuery(c, ctx, query, direct, func(s driver.Stmt) (driver.Rows, error) {
		return s.(driver.StmtQueryContext).QueryContext(ctx, args)
	}, func() (driver.Rows, error) { return q.QueryContext(ctx, query, args) })
}

// execOrQuery runs query through the statement the connection prepared
// for it, if it is a Prepared one (prepared.go: onStmt), or else through
// the driver's own call (call; driver.ErrSkip where the driver has none,
// direct false, so that database/sql prepares it); an answer that the
// server is not ready drops the server.
func execOrQuery[R any](c *conn, ctx context.Context, query string, direct bool, onStmt func(driver.Stmt) (R, error), call func() (R, error)) (R, error) {
	var r R
	s, err := c.prepared(ctx, query)
	switch {
	case err != nil:
		return r, err
	case s != nil:
		r, err = onStmt(s)
	case !direct:
		return r, driver.ErrSkip
	default:
		r, err = call()
	}
	return r, c.check(err)
}

func (c *conn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return c.check(p.Ping(ctx))
	}
	return nil
}

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if n, ok := c.Conn.(driver.NamedValueChecker); ok {
		return n.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}
