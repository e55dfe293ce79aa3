-- A feed per account a source holds at its provider: see the PostgreSQL migration of the same
-- name. SQLite cannot change a primary key in place: the table is rebuilt (its columns in the
-- PostgreSQL table's order).
CREATE TABLE feed_cursors_by_account (
    source        TEXT NOT NULL,
    seq           INTEGER NOT NULL CHECK (seq > 0),
    opening_since TEXT,
    updated_at    TEXT NOT NULL,
    account       TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (source, account)
);
INSERT INTO feed_cursors_by_account (source, seq, opening_since, updated_at, account)
    SELECT source, seq, opening_since, updated_at, '' FROM feed_cursors;
DROP TABLE feed_cursors;
ALTER TABLE feed_cursors_by_account RENAME TO feed_cursors;
