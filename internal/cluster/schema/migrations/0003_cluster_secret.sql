-- 0003: the cluster secret (package nodeauth). The same rules as 0001:
-- every statement must be safe to run again; a statement ends with a
-- semicolon at the end of a line.

-- One row: 32 random bytes that every node reads at start and signs the
-- requests it forwards to another node with, so that a node accepts a
-- forwarded request (and the caller it names) only from a node of its
-- cluster. The first node to start inserts it (INSERT IGNORE: one wins).
-- Whoever can read this table can pose as a node; they can also write the
-- partitions' logs, so the database's credentials already guard it.
CREATE TABLE IF NOT EXISTS cluster_secret (
    id     TINYINT UNSIGNED NOT NULL,
    secret VARBINARY(64)    NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;
