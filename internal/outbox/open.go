package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	sdkoutbox "github.com/tenurehq/tenure/sdk/outbox"
)

// Open opens a pool on the database of dsn (PostgreSQL: a libpq URL or
// key=value string, read by pgx; MySQL: a go-sql-driver DSN) and checks
// that it answers.
func Open(ctx context.Context, db sdkoutbox.Database, dsn string) (*sql.DB, error) {
	var pool *sql.DB
	switch db {
	case sdkoutbox.PostgreSQL:
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("outbox: the PostgreSQL DSN: %w (a URL postgres://user:password@host:5432/dbname, or host=… dbname=…)", err)
		}
		pool = stdlib.OpenDB(*cfg)
	case sdkoutbox.MySQL:
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, fmt.Errorf("outbox: the MySQL DSN: %w (user:password@tcp(host:3306)/dbname)", err)
		}
		cfg.ParseTime = true
		cfg.Loc = time.UTC
		// TIMESTAMP columns are read in the session's time zone: UTC, as
		// Loc says.
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["time_zone"] = "'+00:00'"
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, fmt.Errorf("outbox: the MySQL DSN: %w", err)
		}
		pool = sql.OpenDB(conn)
	default:
		return nil, fmt.Errorf("outbox: no database %v", db)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.PingContext(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("outbox: connecting to the %v database: %w", db, err)
	}
	return pool, nil
}
