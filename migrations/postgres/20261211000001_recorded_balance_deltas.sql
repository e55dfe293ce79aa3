-- Balances kept by the hour their lines were recorded: what each account's lines in a currency
-- on an effective date add up to among the entries recorded in an hour (UTC), so a balance as
-- recorded at a moment is the balances kept by day less the rows of the hours after the
-- moment's hour, less the lines recorded after the moment within its hour: a read of at most an
-- hour of lines, whatever the journal's size. Kept by the trigger that keeps the balances by day
-- and the receivables (one pass over each statement's lines), as new rows; the workers fold each
-- recent hour's rows into one (`recorded_balance_deltas_compact`). Written only by those
-- functions, which run as the owner: no runtime role may write the table.
--
-- The journal's lines are locked against writers first, so the rows written from the journal at
-- the end and those the trigger keeps from then on neither miss nor repeat a line.
LOCK TABLE journal_lines IN SHARE MODE;

CREATE TABLE recorded_balance_deltas (
    account        text NOT NULL,
    currency       text NOT NULL,
    effective_date date NOT NULL,
    recorded_hour  timestamptz NOT NULL,
    amount         numeric(38,10) NOT NULL
);
CREATE INDEX recorded_balance_deltas_hour
    ON recorded_balance_deltas (recorded_hour, account, currency, effective_date);

CREATE OR REPLACE FUNCTION kept_sums_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
BEGIN
    EXECUTE 'WITH lines AS (
                 SELECT l.account, l.currency, l.amount, e.effective_date,
                        date_trunc(''hour'', e.recorded_at, ''UTC'') AS recorded_hour,
                        e.source, e.movement_id, e.reference
                 FROM written_lines l JOIN journal_entries e ON e.id = l.entry_id
             ), hours AS (
                 SELECT account, currency, effective_date, recorded_hour, sum(amount) AS amount
                 FROM lines GROUP BY account, currency, effective_date, recorded_hour
                 HAVING sum(amount) <> 0
             ), recorded AS (
                 INSERT INTO recorded_balance_deltas (account, currency, effective_date, recorded_hour, amount)
                 SELECT account, currency, effective_date, recorded_hour, amount FROM hours
             ), balances AS (
                 INSERT INTO balance_deltas (account, currency, effective_date, amount)
                 SELECT account, currency, effective_date, sum(amount) FROM hours
                 GROUP BY account, currency, effective_date HAVING sum(amount) <> 0
             )
             INSERT INTO receivable_deltas (account, currency, source, movement_id, since, reference, amount)
             SELECT account, currency, source, movement_id, min(effective_date), max(reference),
                    sum(amount)
             FROM lines WHERE left(account, 12) = ''receivables:''
             GROUP BY account, currency, source, movement_id HAVING sum(amount) <> 0';
    RETURN NULL;
END $$;

-- Folds the rows of each account, currency, day and hour recorded in the last day that has
-- several into one; answers how many rows it folded. Postings add rows to the hour they record
-- in, so older hours are folded already (a row committed later than that stays as it is: the
-- sums are the same). Safe beside postings and beside another fold, as `balance_deltas_compact`.
CREATE FUNCTION recorded_balance_deltas_compact() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH hours AS (
        SELECT recorded_hour, account, currency, effective_date FROM recorded_balance_deltas
        WHERE recorded_hour >= now() - interval '1 day'
        GROUP BY recorded_hour, account, currency, effective_date HAVING count(*) > 1
    ), folded AS (
        DELETE FROM recorded_balance_deltas d USING hours
        WHERE d.recorded_hour = hours.recorded_hour AND d.account = hours.account
          AND d.currency = hours.currency AND d.effective_date = hours.effective_date
        RETURNING d.*
    ), kept AS (
        INSERT INTO recorded_balance_deltas (account, currency, effective_date, recorded_hour, amount)
        SELECT account, currency, effective_date, recorded_hour, sum(amount) FROM folded
        GROUP BY account, currency, effective_date, recorded_hour HAVING sum(amount) <> 0
    )
    SELECT count(*) FROM folded;
$$;

INSERT INTO recorded_balance_deltas (account, currency, effective_date, recorded_hour, amount)
SELECT l.account, l.currency, e.effective_date, date_trunc('hour', e.recorded_at, 'UTC'),
       sum(l.amount)
FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
GROUP BY l.account, l.currency, e.effective_date, date_trunc('hour', e.recorded_at, 'UTC')
HAVING sum(l.amount) <> 0;
