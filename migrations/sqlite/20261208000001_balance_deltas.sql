-- Balances kept as the journal is written: what each account's lines in a currency add up to on
-- an effective date, in minor units, so a balance (as of any date) sums a row per account,
-- currency and day rather than every line. One writer at a time: each entry, once written (its
-- lines come first), adds its lines to their day's rows.
CREATE TABLE balance_deltas (
    account        TEXT NOT NULL,
    currency       TEXT NOT NULL,
    effective_date TEXT NOT NULL,
    amount_minor   INTEGER NOT NULL,
    CONSTRAINT balance_deltas_day UNIQUE (account, currency, effective_date)
);

CREATE TRIGGER journal_entries_to_balance_deltas AFTER INSERT ON journal_entries
BEGIN
    INSERT INTO balance_deltas (account, currency, effective_date, amount_minor)
    SELECT account, currency, NEW.effective_date, sum(amount_minor)
    FROM journal_lines WHERE entry_id = NEW.id
    GROUP BY account, currency
    ON CONFLICT (account, currency, effective_date)
    DO UPDATE SET amount_minor = amount_minor + excluded.amount_minor;
END;

INSERT INTO balance_deltas (account, currency, effective_date, amount_minor)
SELECT l.account, l.currency, e.effective_date, sum(l.amount_minor)
FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
WHERE true
GROUP BY l.account, l.currency, e.effective_date
ON CONFLICT (account, currency, effective_date)
DO UPDATE SET amount_minor = amount_minor + excluded.amount_minor;
