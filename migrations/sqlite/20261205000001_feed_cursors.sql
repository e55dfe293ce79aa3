-- A source's feed: see the PostgreSQL migration of the same name.
CREATE TABLE feed_cursors (
    source        TEXT PRIMARY KEY,
    seq           INTEGER NOT NULL CHECK (seq > 0),
    opening_since TEXT,
    updated_at    TEXT NOT NULL
);
