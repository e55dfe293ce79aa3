-- Movements a provider's API reports (a Stripe balance transaction) post one entry each, keyed
-- by the movement alone, whichever event reached it: one event may post several (a payout's
-- listing of balance transactions) and several events may reach one entry. Such an entry keeps
-- what the provider reported about it in `details`; an entry posted from a webhook's own facts
-- (details IS NULL) is still its event's only entry.
ALTER TABLE journal_entries ADD COLUMN details JSONB;
ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_one_per_event;
CREATE UNIQUE INDEX journal_entries_one_per_event ON journal_entries (event_id) WHERE details IS NULL;

-- The entries a payout paid out, as the provider lists them (Stripe: the balance transactions
-- of an automatic payout). An entry is paid out by one payout at most. Written with the posting
-- of the event whose listing tied it; never changed.
CREATE TABLE payout_items (
    entry_id  BIGINT PRIMARY KEY REFERENCES journal_entries (id),
    source    TEXT NOT NULL,
    payout_id TEXT NOT NULL,
    -- The event whose payout listing tied the entry.
    event_id  BIGINT NOT NULL REFERENCES settlement_events (id),
    tied_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX payout_items_payout ON payout_items (payout_id);

CREATE TRIGGER payout_items_immutable BEFORE UPDATE OR DELETE ON payout_items
    FOR EACH ROW EXECUTE FUNCTION journal_refuse_change();
CREATE TRIGGER payout_items_no_truncate BEFORE TRUNCATE ON payout_items
    FOR EACH STATEMENT EXECUTE FUNCTION journal_refuse_change();
