-- Balances kept by the hour their lines were recorded: what each account's lines in a currency
-- on an effective date add up to, in minor units, among the entries recorded in an hour (UTC,
-- the first 13 characters of `recorded_at`), so a balance as recorded at a moment is the
-- balances kept by day less the rows of the hours after the moment's hour, less the lines
-- recorded after the moment within its hour: a read of at most an hour of lines, whatever the
-- journal's size. One writer at a time: each entry, once written (its lines come first), adds
-- its lines to their hour's row.
CREATE TABLE recorded_balance_deltas (
    account        TEXT NOT NULL,
    currency       TEXT NOT NULL,
    effective_date TEXT NOT NULL,
    recorded_hour  TEXT NOT NULL,
    amount_minor   INTEGER NOT NULL,
    CONSTRAINT recorded_balance_deltas_hour UNIQUE (recorded_hour, account, currency, effective_date)
);

CREATE TRIGGER journal_entries_to_recorded_balance_deltas AFTER INSERT ON journal_entries
BEGIN
    INSERT INTO recorded_balance_deltas (account, currency, effective_date, recorded_hour, amount_minor)
    SELECT account, currency, NEW.effective_date, substr(NEW.recorded_at, 1, 13), sum(amount_minor)
    FROM journal_lines WHERE entry_id = NEW.id
    GROUP BY account, currency
    ON CONFLICT (recorded_hour, account, currency, effective_date)
    DO UPDATE SET amount_minor = amount_minor + excluded.amount_minor;
END;

INSERT INTO recorded_balance_deltas (account, currency, effective_date, recorded_hour, amount_minor)
SELECT l.account, l.currency, e.effective_date, substr(e.recorded_at, 1, 13), sum(l.amount_minor)
FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
WHERE true
GROUP BY l.account, l.currency, e.effective_date, substr(e.recorded_at, 1, 13)
ON CONFLICT (recorded_hour, account, currency, effective_date)
DO UPDATE SET amount_minor = amount_minor + excluded.amount_minor;
