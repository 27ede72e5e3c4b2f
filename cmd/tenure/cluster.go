package main

import (
	"context"
	"crypto/tls"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/cluster/election"
	"github.com/tenurehq/tenure/internal/cluster/member"
	"github.com/tenurehq/tenure/internal/cluster/partition"
	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/cluster/schema"
	"github.com/tenurehq/tenure/internal/tlsfiles"
)

// addMySQLFlag adds --mysql, the cluster database's DSN, into dsn, and
// --mysql-tls-ca, the CA its tls=custom selects, into tlsCA.
func addMySQLFlag(fs *pflag.FlagSet, dsn, tlsCA *string) {
	fs.StringVar(dsn, "mysql", envOr("TENURE_MYSQL", ""),
		"cluster database, as a go-sql-driver DSN: user:password@tcp(host:3306)/dbname[?tls=true|skip-verify|custom]; several servers of one replicated database (Galera) as tcp(db1:3306,db2:3306,db3:3306), used in that order, the next when one stops answering or is not ready; migrate and server create dbname if missing (env TENURE_MYSQL)")
	fs.StringVar(tlsCA, "mysql-tls-ca", envOr("TENURE_MYSQL_TLS_CA", ""),
		"verify the database's certificate against the CAs of this PEM file; the DSN selects it with tls=custom (env TENURE_MYSQL_TLS_CA)")
}

// mysqlTLSName is the name the DSN's tls parameter selects --mysql-tls-ca
// by.
const mysqlTLSName = "custom"

// useMySQLTLSCA registers the CA of --mysql-tls-ca with the MySQL driver
// under mysqlTLSName, for a DSN that selects it; it refuses the one
// without the other. Call it before the DSN is parsed.
func useMySQLTLSCA(dsn, caFile string) error {
	var tlsParam string
	if slash := strings.LastIndexByte(dsn, '/'); slash >= 0 {
		if _, query, ok := strings.Cut(dsn[slash:], "?"); ok {
			if params, err := url.ParseQuery(query); err == nil {
				tlsParam = params.Get("tls")
			}
		}
	}
	switch {
	case caFile == "" && tlsParam == mysqlTLSName:
		return usageError{"the --mysql DSN's tls=" + mysqlTLSName + " needs --mysql-tls-ca FILE: the CA that issued the database's certificate"}
	case caFile == "":
		return nil
	case tlsParam != mysqlTLSName:
		return usageError{"--mysql-tls-ca is given but the --mysql DSN does not use it: add tls=" + mysqlTLSName + " to the DSN (…/dbname?tls=" + mysqlTLSName + ")"}
	}
	pool, err := tlsfiles.LoadCAPool(caFile)
	if err != nil {
		return fmt.Errorf("--mysql-tls-ca: %w", err)
	}
	// The driver sets ServerName to the DSN's host.
	return mysql.RegisterTLSConfig(mysqlTLSName, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
}

// openClusterDB checks the DSN and opens a pool on it with opts (its
// Logger, if any, is told when the pool moves from one database of the
// DSN's list to another).
func openClusterDB(ctx context.Context, dsn string, opts cluster.DBOptions) (*sql.DB, error) {
	if dsn == "" {
		return nil, usageError{"--mysql (or TENURE_MYSQL) is required"}
	}
	db, err := cluster.OpenDBWith(dsn, opts)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, dbHint(fmt.Errorf("connecting to the cluster database: %w", err))
	}
	return db, nil
}

// migrateCmd is `tenure migrate`.
type migrateCmd struct {
	dsn     string
	tlsCA   string
	timeout time.Duration
	check   bool
}

func (*migrateCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "migrate --mysql DSN [flags]", Short: "create or upgrade the cluster-mode tables in a MySQL database"}
}

func (c *migrateCmd) define(fs *pflag.FlagSet) {
	addMySQLFlag(fs, &c.dsn, &c.tlsCA)
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up after this long (migrations wait up to 90 s for another node migrating)")
	fs.BoolVar(&c.check, "check", false, "only check that the schema is up to date; exit 1 if not")
}

func (c *migrateCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	stdout := a.stdout
	if c.timeout <= 0 || c.timeout > time.Hour {
		return usageError{fmt.Sprintf("--timeout %v is outside 0..1h", c.timeout)}
	}
	if err := useMySQLTLSCA(c.dsn, c.tlsCA); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if !c.check && c.dsn != "" {
		if err := cluster.CreateDatabase(ctx, c.dsn); err != nil {
			return dbHint(err)
		}
	}
	db, err := openClusterDB(ctx, c.dsn, cluster.DBOptions{})
	if err != nil {
		return err
	}
	defer db.Close()
	if c.check {
		if err := schema.Check(ctx, db); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "schema is up to date (version %d)\n", schema.Latest())
		return nil
	}
	applied, err := schema.Migrate(ctx, db)
	for _, v := range applied {
		fmt.Fprintf(stdout, "applied migration %s\n", schema.Migrations()[v-1].Name)
	}
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "schema already up to date (version %d)\n", schema.Latest())
	} else {
		fmt.Fprintf(stdout, "schema now at version %d\n", schema.Latest())
	}
	return nil
}

// clusterStatus is what `tenure cluster status --json` prints.
type clusterStatus struct {
	SchemaVersion int                 `json:"schema_version"`
	Coordinator   *clusterCoordinator `json:"coordinator"`
	Nodes         []clusterNode       `json:"nodes"`
	Queues        int                 `json:"queues"`
	Partitions    int                 `json:"partitions"`
	Unassigned    int                 `json:"unassigned"`
	OwnedByGone   int                 `json:"owned_by_inactive_or_unknown"`
	// NoneEligible: no active node is eligible, so partitions go to every
	// active node.
	NoneEligible bool               `json:"no_node_eligible"`
	Map          []clusterPartition `json:"partition_map"`
}

type clusterPartition struct {
	Namespace string `json:"namespace"`
	Queue     string `json:"queue"`
	Partition uint32 `json:"partition"`
	ID        uint64 `json:"id"` // in task ids: "…-p<id>"
	Owner     string `json:"owner"`
	Epoch     uint64 `json:"epoch"`
}

type clusterCoordinator struct {
	NodeID      string  `json:"node_id"`
	Epoch       uint64  `json:"epoch"`
	Live        bool    `json:"live"`
	LeaseLeftMS float64 `json:"lease_left_ms"`
}

type clusterNode struct {
	NodeID        string  `json:"node_id"`
	AdvertiseAddr string  `json:"advertise_addr"`
	Active        bool    `json:"active"`
	SilentMS      float64 `json:"silent_ms"`
	Partitions    int     `json:"partitions"`
	// Eligible: the other nodes reach it, so it may be given partitions;
	// Eligibility says why, or why not.
	Eligible    bool   `json:"eligible"`
	Eligibility string `json:"eligibility"`
}

// clusterStatusCmd is `tenure cluster status`.
type clusterStatusCmd struct {
	dsn     string
	lockKey string
	json    bool
	tlsCA   string
}

func (*clusterStatusCmd) spec() *cobra.Command {
	return &cobra.Command{Use: "status --mysql DSN [flags]", Short: "show the coordinator lock, the nodes and who owns the partitions"}
}

func (c *clusterStatusCmd) define(fs *pflag.FlagSet) {
	addMySQLFlag(fs, &c.dsn, &c.tlsCA)
	fs.StringVar(&c.lockKey, "lock-key", election.DefaultLockKey, "the coordinator lock's key in helix_locks")
	fs.BoolVar(&c.json, "json", false, "print JSON (for scripts) instead of text")
}

func (c *clusterStatusCmd) run(ctx context.Context, a *app, _ *pflag.FlagSet, _ []string) error {
	stdout := a.stdout
	if err := useMySQLTLSCA(c.dsn, c.tlsCA); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	db, err := openClusterDB(ctx, c.dsn, cluster.DBOptions{})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := schema.Check(ctx, db); err != nil {
		return err
	}
	var st clusterStatus
	st.SchemaVersion = schema.Latest()

	el, err := election.New(db, election.Config{OwnerID: "tenure-cluster-status", LockKey: c.lockKey})
	if err != nil {
		return usageError{err.Error()}
	}
	lock, found, err := el.Read(ctx)
	if err != nil {
		return err
	}
	if found {
		st.Coordinator = &clusterCoordinator{lock.Owner, lock.Epoch, lock.Live(), float64(lock.Remaining()) / float64(time.Millisecond)}
	}

	reg, err := registry.New(db, registry.Config{})
	if err != nil {
		return err
	}
	nodes, err := reg.List(ctx)
	if err != nil {
		return err
	}
	parts, err := partition.New(db).List(ctx)
	if err != nil {
		return err
	}
	owned := make(map[string]int)
	queues := make(map[[2]string]bool)
	st.Map = []clusterPartition{}
	for _, p := range parts {
		st.Map = append(st.Map, clusterPartition{p.Key.Namespace, p.Key.Queue, p.Key.Partition, p.ID, p.Owner, p.Epoch})
		queues[[2]string{p.Key.Namespace, p.Key.Queue}] = true
		if p.Owner == "" {
			st.Unassigned++
			continue
		}
		owned[p.Owner]++
	}
	st.Queues, st.Partitions = len(queues), len(parts)
	elig, err := member.ReadEligibility(ctx, reg, member.DefaultReportTTL)
	if err != nil {
		return err
	}
	st.NoneEligible = elig.Fallback
	active := make(map[string]bool)
	for _, n := range nodes {
		active[n.ID] = n.Active
		e := elig.Nodes[n.ID]
		st.Nodes = append(st.Nodes, clusterNode{n.ID, n.AdvertiseAddr, n.Active, float64(n.Silent) / float64(time.Millisecond), owned[n.ID], e.Eligible, e.Why})
	}
	for owner, n := range owned {
		if !active[owner] {
			st.OwnedByGone += n
		}
	}

	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	if c := st.Coordinator; c == nil {
		fmt.Fprintln(stdout, "coordinator: none (no node has taken the lock yet)")
	} else if !c.Live {
		fmt.Fprintf(stdout, "coordinator: none (the lock of %s, epoch %d, has expired)\n", c.NodeID, c.Epoch)
	} else {
		fmt.Fprintf(stdout, "coordinator: %s (epoch %d, lease %.1fs left)\n", c.NodeID, c.Epoch, c.LeaseLeftMS/1000)
	}
	fmt.Fprintf(stdout, "partitions: %d in %d queues, %d unassigned, %d owned by inactive or unknown nodes\n",
		st.Partitions, st.Queues, st.Unassigned, st.OwnedByGone)
	if st.NoneEligible && len(st.Nodes) > 0 {
		fmt.Fprintln(stdout, "eligibility: no active node is verified by the others, so partitions go to every active node")
	}
	tw := table(stdout)
	if len(st.Nodes) == 0 {
		fmt.Fprintln(stdout, "nodes: none registered")
	} else if err := printNodes(tw, st.Nodes); err != nil {
		return err
	}
	if len(st.Map) == 0 {
		return nil
	}
	// The partition map, one line per queue: partition:owner@epoch.
	fmt.Fprintln(stdout)
	fmt.Fprintln(tw, "QUEUE\tPARTITIONS (partition:owner@epoch, id in task ids)")
	for i := 0; i < len(st.Map); {
		q := st.Map[i]
		var cells []string
		for ; i < len(st.Map) && st.Map[i].Namespace == q.Namespace && st.Map[i].Queue == q.Queue; i++ {
			p := st.Map[i]
			owner := p.Owner
			if owner == "" {
				owner = "-"
			}
			cells = append(cells, fmt.Sprintf("%d:%s@%d(p%d)", p.Partition, owner, p.Epoch, p.ID))
		}
		fmt.Fprintf(tw, "%s/%s\t%s\n", q.Namespace, q.Queue, strings.Join(cells, " "))
	}
	return tw.Flush()
}

func printNodes(tw *tabwriter.Writer, nodes []clusterNode) error {
	fmt.Fprintln(tw, "NODE\tSTATUS\tADDRESS\tLAST HEARTBEAT\tPARTITIONS\tELIGIBLE\tWHY")
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].NodeID < nodes[j].NodeID })
	for _, n := range nodes {
		status := "active"
		if !n.Active {
			status = "inactive"
		}
		addr := n.AdvertiseAddr
		if strings.TrimSpace(addr) == "" {
			addr = "-"
		}
		eligible := "yes"
		if !n.Eligible {
			eligible = "no"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1fs ago\t%d\t%s\t%s\n", n.NodeID, status, addr, n.SilentMS/1000, n.Partitions, eligible, n.Eligibility)
	}
	return tw.Flush()
}
