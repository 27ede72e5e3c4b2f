-- 0002: snapshots of cluster partitions and compaction of their logs
-- (package mysqllog). The same rules as 0001: every statement must be safe
-- to run again; a statement ends with a semicolon at the end of a line.

-- The bytes of each partition snapshot (the format of package snapshot,
-- the same as embedded mode's files), cut into chunks of at most
-- mysqllog.Options.SnapshotChunkBytes (4 MiB by default), numbered from 0,
-- so that every row stays well under max_allowed_packet. Chunks without a
-- row in partition_snapshots are not a snapshot: nothing reads them.
CREATE TABLE IF NOT EXISTS partition_snapshot_chunks (
    partition_id BIGINT UNSIGNED NOT NULL,
    lsn          BIGINT UNSIGNED NOT NULL,
    chunk        INT UNSIGNED    NOT NULL,
    data         LONGBLOB        NOT NULL,
    PRIMARY KEY (partition_id, lsn, chunk)
) ENGINE=InnoDB;

-- One row per complete snapshot, the state of the partition after the
-- record at lsn. It is inserted in the transaction that inserts the chunks,
-- after them, so a snapshot is visible exactly when it is complete. chunks,
-- bytes and crc (CRC-32C of all the bytes in chunk order) let a reader check
-- that it got every byte. epoch is the owner's epoch that saved it. A
-- snapshot found unusable is discarded: discarded_at is set and the rows
-- stay for inspection; nothing uses it again.
CREATE TABLE IF NOT EXISTS partition_snapshots (
    partition_id BIGINT UNSIGNED NOT NULL,
    lsn          BIGINT UNSIGNED NOT NULL,
    epoch        BIGINT UNSIGNED NOT NULL,
    chunks       INT UNSIGNED    NOT NULL,
    bytes        BIGINT UNSIGNED NOT NULL,
    crc          INT UNSIGNED    NOT NULL,
    tasks        BIGINT UNSIGNED NOT NULL,
    created_at   TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    discarded_at TIMESTAMP(6)    NULL DEFAULT NULL,
    PRIMARY KEY (partition_id, lsn)
) ENGINE=InnoDB;

-- Where each compacted partition's log starts: the rows of partition_log
-- below first_lsn were deleted because a snapshot holds their effect. It
-- is raised in the transaction that deletes them. No row: the log starts at
-- lsn 1.
CREATE TABLE IF NOT EXISTS partition_log_start (
    partition_id BIGINT UNSIGNED NOT NULL,
    first_lsn    BIGINT UNSIGNED NOT NULL,
    updated_at   TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (partition_id)
) ENGINE=InnoDB;
