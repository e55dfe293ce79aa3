-- Each payout's summary in the payouts listing (its status, amounts and item count), kept as
-- the listing last computed it, beside what it was computed from: how many entries carry the
-- payout's id, how many entries are tied to it, and how many reversals its payout entries have.
-- Those rows are never updated or deleted, so equal counts read later mean the same rows: the
-- listing uses a kept summary only when the counts read now equal its own, and otherwise
-- computes the payout's reconciliation again and keeps that; a summary another version of the
-- reconciliation computed (`version`) is computed again. Written only by the listing, which
-- reads it alone; `settle verify` computes each summary in use again and names any that differs.
CREATE TABLE payout_summaries (
    payout_id  TEXT PRIMARY KEY,
    entries    INTEGER NOT NULL,
    items      INTEGER NOT NULL,
    reversals  INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    summary    TEXT NOT NULL
);
