-- A source's feed: which of its windows (events `feed:{seq}`) is the newest. The events are the
-- truth (each window is recorded once by its natural key); this row only says where to look, and
-- moves forward by compare-and-set, so two processes opening windows at once agree.
-- `opening_since` is the day a backfill asked for the source's opening balance from (one per
-- source): the opening is recorded once every window of that backfill has posted.
CREATE TABLE feed_cursors (
    source        TEXT PRIMARY KEY,
    seq           BIGINT NOT NULL CHECK (seq > 0),
    opening_since DATE,
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
