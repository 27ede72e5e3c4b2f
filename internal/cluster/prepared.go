package cluster

import (
	"context"
	"database/sql/driver"
	"strings"
)

// Prepared begins the text of a statement that a connection of OpenDB
// prepares on the server the first time it runs it and executes as the
// prepared statement from then on, with its arguments in the binary
// protocol: the server parses it once per connection instead of at every
// call, and blobs travel as they are instead of escaped into the text.
// It suits the few statements run very often with many arguments (a
// partition log's INSERT, docs/design/cluster.md); everything else is sent with
// its arguments interpolated, one round trip per statement.
//
// A connection keeps at most maxPreparedPerConn such statements, so the
// server holds at most that many per pooled connection (its
// max_prepared_stmt_count bounds them across all clients); a statement
// beyond them runs interpolated, as if it had no prefix. Statements live
// as long as their connection.
const Prepared = "/* tenure:prepared */ "

// maxPreparedPerConn bounds the statements a connection keeps prepared.
const maxPreparedPerConn = 16

// prepared returns the connection's prepared statement for query, preparing
// it the first time; nil (and no error) when query lacks the Prepared
// prefix or the connection already keeps maxPreparedPerConn statements.
func (c *conn) prepared(ctx context.Context, query string) (driver.Stmt, error) {
	if !strings.HasPrefix(query, Prepared) {
		return nil, nil
	}
	if s, ok := c.stmts[query]; ok {
		return s, nil
	}
	if len(c.stmts) >= maxPreparedPerConn {
		return nil, nil
	}
	s, err := c.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.stmts == nil {
		c.stmts = make(map[string]driver.Stmt)
	}
	c.stmts[query] = s
	return s, nil
}

// Close closes the connection's prepared statements, then the connection.
func (c *conn) Close() error {
	for _, s := range c.stmts {
		s.Close()
	}
	c.stmts = nil
	return c.Conn.Close()
}
