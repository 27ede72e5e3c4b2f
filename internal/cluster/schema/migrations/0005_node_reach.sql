-- 0005: which nodes the others can reach, and so which may be given
-- partitions (package reach, docs/design/cluster.md, "Which nodes get
-- partitions"). The same rules as 0001: every statement must be safe to
-- run again; a statement ends with a semicolon at the end of a line.

-- Each node's latest verdict on each other node it probed at its
-- advertised address: reached (ok 1, detail how it answered) or not (ok 0,
-- detail the error). checked_at is the database's NOW(6) at the write, so
-- the coordinator tells a fresh verdict from a stale one by the database's
-- clock. One row per pair: at most the square of the node count.
CREATE TABLE IF NOT EXISTS node_probes (
    prober_id  VARCHAR(255)  NOT NULL,
    target_id  VARCHAR(255)  NOT NULL,
    ok         TINYINT       NOT NULL,
    detail     VARCHAR(1024) NOT NULL DEFAULT '',
    checked_at TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (prober_id, target_id),
    KEY node_probes_target (target_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The coordinator's decision: a node is given partitions only while its
-- row says eligible (or while no active node is eligible). Written only
-- by the coordinator, fenced by its lock; reason is why, as of changed_at.
-- No row: not eligible.
CREATE TABLE IF NOT EXISTS node_eligibility (
    node_id    VARCHAR(255)  NOT NULL,
    eligible   TINYINT       NOT NULL,
    reason     VARCHAR(2048) NOT NULL DEFAULT '',
    changed_at TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (node_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
