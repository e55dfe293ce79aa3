-- Open receivables kept as the journal is written: what the lines of each movement on a
-- receivables account (every such account is named `receivables:…`) add up to in a currency, in
-- minor units, since when and under which reference, so the receivables still open are read from
-- a few rows rather than from every receivable line ever written. One writer at a time: each
-- entry, once written (its lines come first), adds its receivable lines to their movement's row,
-- and a row that adds up to nothing (cleared) is dropped.
CREATE TABLE receivable_deltas (
    account      TEXT NOT NULL,
    currency     TEXT NOT NULL,
    source       TEXT NOT NULL,
    movement_id  TEXT NOT NULL,
    since        TEXT NOT NULL,
    reference    TEXT,
    amount_minor INTEGER NOT NULL,
    CONSTRAINT receivable_deltas_item UNIQUE (account, currency, source, movement_id)
);

CREATE TRIGGER journal_entries_to_receivable_deltas AFTER INSERT ON journal_entries
BEGIN
    INSERT INTO receivable_deltas (account, currency, source, movement_id, since, reference, amount_minor)
    SELECT account, currency, NEW.source, NEW.movement_id, NEW.effective_date, NEW.reference,
           sum(amount_minor)
    FROM journal_lines WHERE entry_id = NEW.id AND substr(account, 1, 12) = 'receivables:'
    GROUP BY account, currency
    ON CONFLICT (account, currency, source, movement_id)
    DO UPDATE SET amount_minor = amount_minor + excluded.amount_minor,
                  since = min(since, excluded.since),
                  reference = CASE WHEN reference IS NULL OR excluded.reference > reference
                                   THEN excluded.reference ELSE reference END;
    DELETE FROM receivable_deltas
    WHERE amount_minor = 0
      AND (account, currency, source, movement_id) IN (
          SELECT account, currency, NEW.source, NEW.movement_id
          FROM journal_lines WHERE entry_id = NEW.id);
END;

INSERT INTO receivable_deltas (account, currency, source, movement_id, since, reference, amount_minor)
SELECT l.account, l.currency, e.source, e.movement_id, min(e.effective_date), max(e.reference),
       sum(l.amount_minor)
FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
WHERE substr(l.account, 1, 12) = 'receivables:'
GROUP BY l.account, l.currency, e.source, e.movement_id
HAVING sum(l.amount_minor) <> 0;
