-- 0006: the protocol versions each node speaks (package registry,
-- docs/design/cluster.md, "Protocol versions"). The same rules as 0001:
-- every statement must be safe to run again; a statement ends with a
-- semicolon at the end of a line.

-- One row per node, written when it joins: the oldest and the newest
-- version of what nodes send each other (route.Protocol) that it speaks.
-- A node without a row joined before nodes stated it, and speaks 1 only.
CREATE TABLE IF NOT EXISTS node_protocols (
    node_id     VARCHAR(255) NOT NULL,
    min_version INT UNSIGNED NOT NULL,
    max_version INT UNSIGNED NOT NULL,
    stated_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (node_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
