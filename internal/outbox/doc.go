// Package outbox is the server's side of the transactional outbox
// (docs/design/outbox.md): the outbox table in an application's
// PostgreSQL or MySQL database (its schema and migration), and the relay
// that submits each committed row to tenure exactly once and then deletes
// it. The application's side, writing rows in its own transactions, is
// package github.com/tenurehq/tenure/sdk/outbox.
package outbox
