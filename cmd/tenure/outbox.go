package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/metrics"
	"github.com/tenurehq/tenure/internal/outbox"
	"github.com/tenurehq/tenure/internal/server"
	tenurev1 "github.com/tenurehq/tenure/sdk/api/tenurev1"
	"github.com/tenurehq/tenure/sdk/api/tenurev1/tenurev1connect"
	"github.com/tenurehq/tenure/sdk/client"
	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// outboxDB is the flags that name an outbox: its database and table.
type outboxDB struct {
	postgres, mysql string
	table           string
}

func (o *outboxDB) define(fs *pflag.FlagSet) {
	fs.StringVar(&o.postgres, "postgres", "", "the application's PostgreSQL database: a URL postgres://user:password@host:5432/dbname or key=value DSN")
	fs.StringVar(&o.mysql, "mysql", "", "the application's MySQL or MariaDB database, as a go-sql-driver DSN: user:password@tcp(host:3306)/dbname")
	fs.StringVar(&o.table, "table", sdkoutbox.DefaultTable, "the outbox table (optionally schema.table); failed rows go to TABLE_failed")
}

// resolve is the database and DSN given, and the table, or a usage error.
func (o *outboxDB) resolve() (sdkoutbox.Database, string, outbox.Table, error) {
	var db sdkoutbox.Database
	var dsn string
	switch {
	case o.postgres != "" && o.mysql != "":
		return 0, "", outbox.Table{}, usageError{"give one of --postgres and --mysql, not both"}
	case o.postgres != "":
		db, dsn = sdkoutbox.PostgreSQL, o.postgres
	case o.mysql != "":
		db, dsn = sdkoutbox.MySQL, o.mysql
	default:
		return 0, "", outbox.Table{}, usageError{"name the application's database: --postgres DSN or --mysql DSN"}
	}
	t, err := outbox.NewTable(db, o.table)
	if err != nil {
		return 0, "", outbox.Table{}, usageError{"--table: " + err.Error()}
	}
	return db, dsn, t, nil
}

// outboxMigrateCmd is `tenure outbox migrate`.
type outboxMigrateCmd struct {
	db    outboxDB
	print string
}

func (*outboxMigrateCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "migrate --postgres DSN | --mysql DSN [flags]",
		Short: "create the outbox tables in an application's database",
		Long: `Create the transactional outbox's tables in the application's database, if they
are missing: TABLE (tenure_outbox), which the application writes a row into
per submit inside its own transactions (package outbox of the Go SDK), and
TABLE_failed, where the relay moves a row the server refuses, with the
reason. On PostgreSQL also a trigger that wakes the relay (NOTIFY) when rows
are committed. Running it again changes nothing.

With --print postgres or --print mysql, print the SQL instead (for teams
that run their own migrations); it connects to no database.`}
}

func (*outboxMigrateCmd) choices() map[string][]string {
	return map[string][]string{"print": {"postgres", "mysql"}}
}

func (c *outboxMigrateCmd) define(fs *pflag.FlagSet) {
	c.db.define(fs)
	fs.StringVar(&c.print, "print", "", "print the SQL for this database, postgres or mysql, instead of running it")
}

func (c *outboxMigrateCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	if c.print != "" {
		kind, ok := map[string]sdkoutbox.Database{"postgres": sdkoutbox.PostgreSQL, "mysql": sdkoutbox.MySQL}[c.print]
		if !ok || c.db.postgres != "" || c.db.mysql != "" {
			return usageError{fmt.Sprintf("--print %q: give --print postgres or --print mysql, without --postgres or --mysql", c.print)}
		}
		t, err := outbox.NewTable(kind, c.db.table)
		if err != nil {
			return usageError{"--table: " + err.Error()}
		}
		for _, stmt := range t.DDL() {
			fmt.Fprintf(a.stdout, "%s;\n\n", stmt)
		}
		return nil
	}
	kind, dsn, t, err := c.db.resolve()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	db, err := outbox.Open(ctx, kind, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := outbox.Migrate(ctx, db, t); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "the outbox tables %s and %s are in place (%v)\n", t.Name, t.Failed(), kind)
	return nil
}

// relayTuning is what tunes a relay: the flags of tenure outbox relay and
// tenure server's --outbox-*.
type relayTuning struct {
	batch int
	poll  time.Duration
}

func (t *relayTuning) add(fs *pflag.FlagSet, prefix string) {
	fs.IntVar(&t.batch, prefix+"batch", outbox.DefaultBatch, fmt.Sprintf("rows a relay takes in one round, 1 to %d", outbox.MaxBatch))
	fs.DurationVar(&t.poll, prefix+"poll", 0, fmt.Sprintf("how often a relay looks for rows when nothing woke it (0: %v on MySQL; %v on PostgreSQL, which wakes it with NOTIFY)", outbox.DefaultPoll, outbox.DefaultNotifiedPoll))
}

func (t *relayTuning) check(prefix string) error {
	if t.batch < 1 || t.batch > outbox.MaxBatch {
		return usageError{fmt.Sprintf("--%sbatch %d is outside 1..%d", prefix, t.batch, outbox.MaxBatch)}
	}
	if t.poll < 0 || t.poll > time.Hour {
		return usageError{fmt.Sprintf("--%spoll %v is outside 0..1h", prefix, t.poll)}
	}
	return nil
}

// openRelay opens the database of an outbox and checks its tables, and
// returns its relay into target, with the pool to close when it is done.
func openRelay(ctx context.Context, kind sdkoutbox.Database, dsn string, t outbox.Table, name string, tune relayTuning,
	target tenurev1connect.OutboxServiceClient, clk clock.Clock, lg *slog.Logger) (*outbox.Relay, *sql.DB, error) {
	db, err := outbox.Open(ctx, kind, dsn)
	if err != nil {
		return nil, nil, err
	}
	r, err := outbox.NewRelay(ctx, outbox.Config{DB: db, DSN: dsn, Table: t, Name: name, Target: target,
		Batch: tune.batch, Poll: tune.poll, Logger: lg, Clock: clk})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return r, db, nil
}

// outboxRelayCmd is `tenure outbox relay`.
type outboxRelayCmd struct {
	db      outboxDB
	name    string
	tune    relayTuning
	client  clientFlags
	logFmt  string
	logLvl  string
	metrics string
}

func (*outboxRelayCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "relay --postgres DSN | --mysql DSN [flags]",
		Short: "submit the rows of an application's outbox to a server, exactly once, until stopped",
		Long: `Relay the transactional outbox of an application's database to the server at
--addr: submit every committed row of TABLE exactly once and delete it; a
row the server refuses moves to TABLE_failed with the reason. Several
relays may share one outbox. It runs until SIGINT or SIGTERM; killed at any
point, a relay started again goes on where it stopped, submitting no row
twice (docs/design/outbox.md).

A server can run the relay itself: tenure server --outbox-postgres DSN or
--outbox-mysql DSN.`}
}

func (c *outboxRelayCmd) define(fs *pflag.FlagSet) {
	c.db.define(fs)
	fs.StringVar(&c.name, "name", "", "the outbox's name in the server's log (default: the database's, e.g. postgres:shop.public.tenure_outbox); every relay of one outbox must use the same")
	c.tune.add(fs, "")
	c.client.addConnection(fs)
	fs.StringVar(&c.logFmt, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLvl, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.metrics, "metrics-listen", "", "serve the relay's Prometheus metrics (tenure_outbox_*, docs/guides/monitoring.md) at GET /metrics on this address, e.g. 127.0.0.1:9464")
}

func (c *outboxRelayCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	kind, dsn, t, err := c.db.resolve()
	if err != nil {
		return err
	}
	if err := c.tune.check(""); err != nil {
		return err
	}
	lg, err := newLogger(a.stderr, c.logFmt, c.logLvl)
	if err != nil {
		return usageError{err.Error()}
	}
	target, err := c.client.outboxService()
	if err != nil {
		return err
	}
	r, db, err := openRelay(ctx, kind, dsn, t, c.name, c.tune, target, a.clock, lg)
	if err != nil {
		return err
	}
	defer db.Close()
	if c.metrics != "" {
		stop, err := serveRelayMetrics(c.metrics, r, lg)
		if err != nil {
			return err
		}
		defer stop()
	}
	fmt.Fprintf(a.stdout, "relaying outbox %s (%v table %s) to %s\n", r.Name(), kind, t.Name, c.client.url())
	r.Run(ctx)
	st := r.Stats()
	fmt.Fprintf(a.stdout, "stopped: %d rows relayed, %d moved to %s\n", st.Relayed, st.Failed, t.Failed())
	return nil
}

// outboxService is the OutboxService of the server the flags name.
func (f *clientFlags) outboxService() (tenurev1connect.OutboxServiceClient, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	hc := client.DefaultHTTPClient(client.ProtocolConnect)
	hc.Transport.(*http.Transport).TLSClientConfig = opts.TLSConfig
	var copts []connect.ClientOption
	if opts.Token != "" {
		auth := "Bearer " + opts.Token
		copts = append(copts, connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", auth)
				return next(ctx, req)
			}
		})))
	}
	return tenurev1connect.NewOutboxServiceClient(hc, f.url(), copts...), nil
}

// outboxFlags are tenure server's flags that run relays in the server.
type outboxFlags struct {
	postgres, mysql []string
	tune            relayTuning
}

func (f *outboxFlags) add(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.postgres, "outbox-postgres", nil, "relay the transactional outbox (table tenure_outbox) of this PostgreSQL database into this server: a URL postgres://user:password@host:5432/dbname or key=value DSN; may be given several times")
	fs.StringArrayVar(&f.mysql, "outbox-mysql", nil, "relay the transactional outbox (table tenure_outbox) of this MySQL or MariaDB database into this server: user:password@tcp(host:3306)/dbname; may be given several times")
	f.tune.add(fs, "outbox-")
}

// relays is the relays a server runs.
type relays struct {
	rs     []*outbox.Relay
	dbs    []*sql.DB
	wg     sync.WaitGroup
	closed sync.Once
}

// open opens every outbox the flags name and checks its tables, before
// the server serves: a wrong DSN or a missing table stops the start. The
// relays submit through api, which answers ListOutboxes with them, and mx
// exports their metrics.
func (f *outboxFlags) open(ctx context.Context, api *server.Server, mx *metrics.Metrics, clk clock.Clock, lg *slog.Logger) (*relays, error) {
	out := &relays{}
	target := api.Outbox()
	if err := f.tune.check("outbox-"); err != nil {
		return nil, err
	}
	for _, db := range []struct {
		kind sdkoutbox.Database
		dsns []string
	}{{sdkoutbox.PostgreSQL, f.postgres}, {sdkoutbox.MySQL, f.mysql}} {
		for _, dsn := range db.dsns {
			t, _ := outbox.NewTable(db.kind, "")
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			r, pool, err := openRelay(octx, db.kind, dsn, t, "", f.tune, target, clk, lg)
			cancel()
			if err != nil {
				out.close()
				return nil, fmt.Errorf("--outbox-%s: %w", map[sdkoutbox.Database]string{sdkoutbox.PostgreSQL: "postgres", sdkoutbox.MySQL: "mysql"}[db.kind], err)
			}
			out.rs, out.dbs = append(out.rs, r), append(out.dbs, pool)
		}
	}
	mx.WatchOutboxes(out.reports)
	api.ReportOutboxes(out.outboxes)
	return out, nil
}

// reports is what the relays report, for /metrics.
func (rs *relays) reports() []metrics.OutboxReport {
	out := make([]metrics.OutboxReport, len(rs.rs))
	for i, r := range rs.rs {
		out[i] = reportOf(r)
	}
	return out
}

// reportOf is what relay r reports for /metrics.
func reportOf(r *outbox.Relay) metrics.OutboxReport {
	st := r.Stats()
	return metrics.OutboxReport{Name: r.Name(), Rows: st.Depth, FailedRows: st.FailedRows, OldestAge: st.OldestAge,
		Relayed: st.Relayed, MovedAside: st.Failed}
}

// outboxes is what the relays report, for OutboxService.ListOutboxes.
func (rs *relays) outboxes() []*tenurev1.Outbox {
	out := make([]*tenurev1.Outbox, len(rs.rs))
	for i, r := range rs.rs {
		st := r.Stats()
		o := &tenurev1.Outbox{Name: r.Name(), Database: r.Table().DB.String(), Table: r.Table().Name,
			Rows: st.Depth, OldestRowAge: durationpb.New(st.OldestAge), FailedRows: st.FailedRows,
			Relayed: st.Relayed, MovedAside: st.Failed, LastError: st.LastError}
		if !st.Measured.IsZero() {
			o.MeasuredAt = timestamppb.New(st.Measured)
		}
		if st.LastError != "" {
			o.LastErrorAt = timestamppb.New(st.LastErrorAt)
		}
		out[i] = o
	}
	return out
}

// start runs every relay until ctx ends.
func (rs *relays) start(ctx context.Context, lg *slog.Logger) {
	for _, r := range rs.rs {
		lg.Info("relaying an outbox", "outbox", r.Name())
		rs.wg.Add(1)
		go func() {
			defer rs.wg.Done()
			r.Run(ctx)
		}()
	}
}

// close waits for the relays to stop (their ctx ended) and closes their
// databases.
func (rs *relays) close() {
	rs.closed.Do(func() {
		rs.wg.Wait()
		for _, db := range rs.dbs {
			db.Close()
		}
	})
}

// serveRelayMetrics serves the metrics of relay r at GET /metrics on
// addr until stop.
func serveRelayMetrics(addr string, r *outbox.Relay, lg *slog.Logger) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		metrics.NewOutboxCollector(func() []metrics.OutboxReport { return []metrics.OutboxReport{reportOf(r)} }))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			lg.Error("serving the relay's metrics failed", "err", err)
		}
	}()
	lg.Info("serving the relay's metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
	return func() { srv.Close() }, nil
}

// outboxStatusCmd is `tenure outbox status`.
type outboxStatusCmd struct {
	db     outboxDB
	name   string
	client clientFlags
}

func (*outboxStatusCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "status --postgres DSN | --mysql DSN [flags]",
		Short: "show an outbox: its rows waiting, the oldest's age, failed rows, and the rows the server holds for it",
		Long: `Show a transactional outbox as its database and the server at --addr see it:
the rows waiting in TABLE and the age of the oldest, the rows moved to
TABLE_failed (the last five, with the server's reason), and the rows whose
request ids the server holds for the outbox (being relayed, or deleted by a
relay stopped before it released them). The drain rate is
tenure_outbox_relayed_total's rate in /metrics (docs/guides/monitoring.md).`}
}

func (c *outboxStatusCmd) define(fs *pflag.FlagSet) {
	c.db.define(fs)
	fs.StringVar(&c.name, "name", "", "the outbox's name in the server's log (default: the database's, as the relay names it)")
	c.client.addConnection(fs)
}

func (c *outboxStatusCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	kind, dsn, t, err := c.db.resolve()
	if err != nil {
		return err
	}
	target, err := c.client.outboxService()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, db, err := openRelay(ctx, kind, dsn, t, c.name, relayTuning{batch: outbox.DefaultBatch}, target, a.clock, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := r.Measure(ctx); err != nil {
		return fmt.Errorf("measuring the outbox: %w", err)
	}
	st := r.Stats()
	w := a.stdout
	fmt.Fprintf(w, "outbox   %s (%v table %s)\n", r.Name(), kind, t.Name)
	oldest := ""
	if st.Depth > 0 {
		oldest = fmt.Sprintf(", the oldest %v old", st.OldestAge.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "rows     %d waiting%s\n", st.Depth, oldest)
	fmt.Fprintf(w, "failed   %d rows in %s\n", st.FailedRows, t.Failed())
	resp, err := target.ListOutboxHolds(ctx, connect.NewRequest(&tenurev1.ListOutboxHoldsRequest{Outbox: r.Name()}))
	if err != nil {
		fmt.Fprintf(w, "holds    unknown: the server at %s: %v\n", c.client.url(), err)
	} else {
		fmt.Fprintf(w, "holds    %d rows held by the server at %s\n", len(resp.Msg.GetHolds()), c.client.url())
	}
	if st.FailedRows > 0 {
		fs, err := outbox.Failures(ctx, db, t, 5)
		if err != nil {
			return fmt.Errorf("reading %s: %w", t.Failed(), err)
		}
		fmt.Fprintf(w, "\nlast failed rows:\n")
		tw := table(w)
		fmt.Fprintln(tw, "ID\tREQUEST ID\tFAILED AT\tERROR")
		for _, f := range fs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", f.ID, f.RequestID, f.FailedAt.UTC().Format("2006-01-02 15:04:05.000 UTC"), f.Error)
		}
		tw.Flush()
	}
	return nil
}
