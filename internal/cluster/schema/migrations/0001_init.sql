-- 0001: the tables of cluster mode (docs/design/cluster.md).
--
-- Every statement must be safe to run again: DDL commits implicitly in
-- MySQL, so a migration cut short is re-run from its first statement.
-- Statements end with a semicolon at the end of a line; no semicolon may
-- end a line inside a statement.

-- The coordinator lock: one row per lock key, with its owner, its expiry
-- (the database's clock) and an epoch bumped at every acquisition and
-- renewal (docs/design/cluster.md). InnoDB (row locks and the unique key's atomic
-- upsert need it) and a binary collation, so owner ids that differ only in
-- case are different owners.
CREATE TABLE IF NOT EXISTS helix_locks (
    id           bigint unsigned NOT NULL AUTO_INCREMENT,
    lock_key     VARCHAR(255)    NOT NULL,
    owner_id     VARCHAR(255)    NOT NULL,
    expires_at   TIMESTAMP       NOT NULL,
    epoch        bigint          NOT NULL DEFAULT 0,
    status       TINYINT         NOT NULL DEFAULT 1, -- 1: active, 0: inactive, 2: deletable
    created_at   datetime        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    updated_at   datetime        NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (`id`),
    UNIQUE KEY `lock_key_status_unique_key` (`lock_key`, `status`),
    KEY `lock_key_ids` (`lock_key`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The node registry. Times are the database's (NOW(6)); status 1 is
-- active, 0 inactive (left, or silent for longer than the silence limit).
CREATE TABLE IF NOT EXISTS nodes (
    node_id        VARCHAR(255) NOT NULL,
    advertise_addr VARCHAR(255) NOT NULL DEFAULT '',
    status         TINYINT      NOT NULL DEFAULT 1,
    registered_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    last_heartbeat TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (node_id),
    KEY nodes_status_heartbeat (status, last_heartbeat)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Queue discovery: every queue the cluster knows and its partition count,
-- fixed at creation.
CREATE TABLE IF NOT EXISTS queues (
    namespace       VARCHAR(255) NOT NULL,
    queue           VARCHAR(255) NOT NULL,
    partition_count INT UNSIGNED NOT NULL,
    created_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (namespace, queue)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Partition assignments. `partition` is a reserved word, hence
-- partition_no. epoch grows by one at every change of owner; a partition's
-- log writer checks it in every append. id names the partition in
-- partition_log (8 bytes of key instead of up to 1 KiB).
CREATE TABLE IF NOT EXISTS partitions (
    id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    namespace     VARCHAR(255)    NOT NULL,
    queue         VARCHAR(255)    NOT NULL,
    partition_no  INT UNSIGNED    NOT NULL,
    owner_node_id VARCHAR(255)    NULL,
    epoch         BIGINT UNSIGNED NOT NULL DEFAULT 0,
    updated_at    TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (namespace, queue, partition_no),
    UNIQUE KEY partitions_id (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Each partition's write-ahead log: one row per record, dense LSNs from 1.
-- The primary key is the fence: a second writer's row at a taken LSN fails.
CREATE TABLE IF NOT EXISTS partition_log (
    partition_id BIGINT UNSIGNED   NOT NULL,
    lsn          BIGINT UNSIGNED   NOT NULL,
    type         SMALLINT UNSIGNED NOT NULL,
    payload      LONGBLOB          NOT NULL,
    PRIMARY KEY (partition_id, lsn)
) ENGINE=InnoDB;
