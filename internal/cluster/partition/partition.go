package partition

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/internal/clock"
	"github.com/tenurehq/tenure/internal/cluster"
)

// Limits.
const (
	// DefaultPartitions is a queue's partition count unless told otherwise.
	DefaultPartitions = 8
	// MaxPartitions caps the rows List reads.
	MaxPartitions = 100_000
	// maxApplyChanges caps the owner changes of one Apply.
	maxApplyChanges = 10_000
)

// ErrNotCoordinator is returned by Apply when the caller does not hold the
// coordinator lock (any more).
var ErrNotCoordinator = cluster.ErrNotCoordinator

// ErrNotFound is returned for a partition that does not exist.
var ErrNotFound = errors.New("partition: no such partition")

// Assignment is one partition's row.
type Assignment struct {
	Key   cluster.PartitionKey
	ID    uint64 // names the partition in partition_log
	Owner string // "" while unassigned
	Epoch uint64 // 0 until first assigned; +1 per change of owner
}

// Store reads and writes the tables.
type Store struct{ db *sql.DB }

// New returns a Store on db (opened with cluster.OpenDB, migrated).
func New(db *sql.DB) *Store { return &Store{db: db} }

// EnsureQueue records the queue with count partitions (1 to
// cluster.MaxPartitionsPerQueue) and creates their rows, unassigned. It is
// idempotent; a queue that exists with another count is an error (a queue
// is never repartitioned).
func (s *Store) EnsureQueue(ctx context.Context, namespace, queue string, count int) error {
	if err := cluster.CheckName("partition: namespace", namespace); err != nil {
		return err
	}
	if err := cluster.CheckName("partition: queue", queue); err != nil {
		return err
	}
	if count < 1 || count > cluster.MaxPartitionsPerQueue {
		return fmt.Errorf("partition: queue %s/%s: %d partitions; want 1 to %d", namespace, queue, count, cluster.MaxPartitionsPerQueue)
	}
	// Nodes creating one queue at once can deadlock in InnoDB (the server
	// rolls the loser back); the transaction is idempotent, so run it again.
	return cluster.RetryRolledBack(ctx, clock.Real, maxEnsureTries, func() error { return s.ensureQueue(ctx, namespace, queue, count) })
}

const maxEnsureTries = 5

func (s *Store) ensureQueue(ctx context.Context, namespace, queue string, count int) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("partition: ensuring queue %s/%s: %w", namespace, queue, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT IGNORE INTO queues (namespace, queue, partition_count) VALUES (?, ?, ?)", namespace, queue, count); err != nil {
		return fmt.Errorf("partition: ensuring queue %s/%s: %w", namespace, queue, err)
	}
	var have int
	if err := tx.QueryRowContext(ctx, "SELECT partition_count FROM queues WHERE namespace = ? AND queue = ? FOR UPDATE", namespace, queue).Scan(&have); err != nil {
		return fmt.Errorf("partition: ensuring queue %s/%s: %w", namespace, queue, err)
	}
	if have != count {
		return fmt.Errorf("partition: queue %s/%s has %d partitions, not %d; a queue is never repartitioned", namespace, queue, have, count)
	}
	q := "INSERT IGNORE INTO partitions (namespace, queue, partition_no) VALUES (?, ?, ?)" + strings.Repeat(", (?, ?, ?)", count-1)
	args := make([]any, 0, 3*count)
	for i := range count {
		args = append(args, namespace, queue, i)
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("partition: creating the partitions of %s/%s: %w", namespace, queue, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("partition: ensuring queue %s/%s: %w", namespace, queue, err)
	}
	return nil
}

const selectColumns = "SELECT id, namespace, queue, partition_no, COALESCE(owner_node_id, ''), epoch FROM partitions"

type scanner interface{ Scan(dest ...any) error }

func scan(r scanner) (Assignment, error) {
	var a Assignment
	err := r.Scan(&a.ID, &a.Key.Namespace, &a.Key.Queue, &a.Key.Partition, &a.Owner, &a.Epoch)
	return a, err
}

// List returns every partition in key order; it fails rather than return
// a partial list past MaxPartitions.
func (s *Store) List(ctx context.Context) ([]Assignment, error) {
	var out []Assignment
	err := cluster.EachRow(ctx, s.db, "partition: listing", selectColumns+" ORDER BY namespace, queue, partition_no LIMIT ?", []any{MaxPartitions + 1}, func(rows *sql.Rows) error {
		a, err := scan(rows)
		if err != nil {
			return err
		}
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) > MaxPartitions {
		return nil, fmt.Errorf("partition: more than %d partitions", MaxPartitions)
	}
	return out, nil
}

// Get returns one partition's row.
func (s *Store) Get(ctx context.Context, key cluster.PartitionKey) (Assignment, error) {
	a, err := scan(s.db.QueryRowContext(ctx, selectColumns+" WHERE namespace = ? AND queue = ? AND partition_no = ?",
		key.Namespace, key.Queue, key.Partition))
	if errors.Is(err, sql.ErrNoRows) {
		return Assignment{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return Assignment{}, fmt.Errorf("partition: reading %s: %w", key, err)
	}
	return a, nil
}

// Coordinator names the lock that fences Apply and its holder.
type Coordinator struct {
	LockKey string // helix_locks.lock_key, e.g. election.DefaultLockKey
	NodeID  string // the caller: its owner_id in helix_locks
}

// Apply writes the owners in next (as CalculateAllocation returns them),
// in one transaction fenced by the coordinator lock (see the package
// documentation), and returns the partitions whose owner changed, with
// their new epochs. Partitions not in next keep their owner. An empty
// owner in next is not allowed.
func (s *Store) Apply(ctx context.Context, c Coordinator, next map[cluster.PartitionKey]string) ([]Assignment, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("partition: apply: %w", err)
	}
	defer tx.Rollback()

	cur := make(map[cluster.PartitionKey]Assignment)
	err = cluster.EachRow(ctx, tx, "partition: apply", selectColumns+" ORDER BY namespace, queue, partition_no LIMIT ? FOR UPDATE", []any{MaxPartitions + 1}, func(rows *sql.Rows) error {
		a, err := scan(rows)
		if err != nil {
			return err
		}
		cur[a.Key] = a
		return nil
	})
	if err != nil {
		return nil, err
	}

	// The coordinator lock is checked (and share-locked until commit)
	// only now that the partition rows are ours: waiting for a row lock,
	// e.g. of an owner frozen in the middle of an append, must not hold the
	// lock row, or the coordinator's own renewals would queue behind it.
	if err := cluster.CheckCoordinator(ctx, tx, c.LockKey, c.NodeID); err != nil {
		return nil, fmt.Errorf("partition: apply: %w", err)
	}

	var changed []Assignment
	for _, k := range slices.SortedFunc(maps.Keys(next), cluster.PartitionKey.Compare) {
		owner := next[k]
		if owner == "" {
			return nil, fmt.Errorf("partition: apply: partition %s has no owner", k)
		}
		a, ok := cur[k]
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, k)
		}
		if a.Owner == owner {
			continue
		}
		a.Owner, a.Epoch = owner, a.Epoch+1
		changed = append(changed, a)
	}
	if len(changed) > maxApplyChanges {
		return nil, fmt.Errorf("partition: apply: %d owner changes, over the limit of %d per call", len(changed), maxApplyChanges)
	}
	for _, a := range changed {
		if _, err := tx.ExecContext(ctx, "UPDATE partitions SET owner_node_id = ?, epoch = ? WHERE id = ?", a.Owner, a.Epoch, a.ID); err != nil {
			return nil, fmt.Errorf("partition: apply: %s: %w", a.Key, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("partition: apply: %w", err)
	}
	return changed, nil
}
