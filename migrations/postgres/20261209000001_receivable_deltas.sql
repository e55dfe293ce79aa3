-- Open receivables kept as the journal is written: what the lines of each movement on a
-- receivables account (every such account is named `receivables:…`) add up to in a currency,
-- since when and under which reference, so the receivables still open are read from a few rows
-- rather than from every receivable line ever written. Each statement that writes such lines
-- adds its sums as new rows (no row is updated); the workers fold each movement's rows into one
-- and drop those that add up to nothing (cleared) (`receivable_deltas_compact`). Written only by
-- these two functions, which run as the owner: no runtime role may write the table. The
-- backfill at the end runs once the trigger is in place (its lock holds postings back until this
-- migration commits), so no line is kept twice or missed.
CREATE TABLE receivable_deltas (
    account     text NOT NULL,
    currency    text NOT NULL,
    source      text NOT NULL,
    movement_id text NOT NULL,
    since       date NOT NULL,
    reference   text,
    amount      numeric(38,10) NOT NULL
);
CREATE INDEX receivable_deltas_item ON receivable_deltas (account, currency, source, movement_id);

-- One trigger keeps both sums: each written line's entry is read once, by its key, for the
-- balances by day and the receivables by movement. Planned anew for each statement with
-- sequential scans off, for the reasons `balance_deltas_add` gave (a parameterless query keeps
-- its connection's first plan; a posting writes a few dozen lines).
DROP TRIGGER journal_lines_to_balance_deltas ON journal_lines;
DROP FUNCTION balance_deltas_add();

CREATE FUNCTION kept_sums_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
BEGIN
    EXECUTE 'WITH lines AS (
                 SELECT l.account, l.currency, l.amount, e.effective_date, e.source, e.movement_id,
                        e.reference
                 FROM written_lines l JOIN journal_entries e ON e.id = l.entry_id
             ), balances AS (
                 INSERT INTO balance_deltas (account, currency, effective_date, amount)
                 SELECT account, currency, effective_date, sum(amount) FROM lines
                 GROUP BY account, currency, effective_date HAVING sum(amount) <> 0
             )
             INSERT INTO receivable_deltas (account, currency, source, movement_id, since, reference, amount)
             SELECT account, currency, source, movement_id, min(effective_date), max(reference),
                    sum(amount)
             FROM lines WHERE left(account, 12) = ''receivables:''
             GROUP BY account, currency, source, movement_id HAVING sum(amount) <> 0';
    RETURN NULL;
END $$;

CREATE TRIGGER journal_lines_to_kept_sums AFTER INSERT ON journal_lines
    REFERENCING NEW TABLE AS written_lines
    FOR EACH STATEMENT EXECUTE FUNCTION kept_sums_add();

-- Folds the rows of each movement that has several, or that add up to nothing, into one or
-- none; answers how many rows it folded. Safe beside postings (rows they add meanwhile stay for
-- the next fold) and beside another fold (a row is deleted, and its amount carried, once).
CREATE FUNCTION receivable_deltas_compact() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH items AS (
        SELECT account, currency, source, movement_id FROM receivable_deltas
        GROUP BY account, currency, source, movement_id
        HAVING count(*) > 1 OR sum(amount) = 0
    ), folded AS (
        DELETE FROM receivable_deltas d USING items
        WHERE d.account = items.account AND d.currency = items.currency
          AND d.source = items.source AND d.movement_id = items.movement_id
        RETURNING d.*
    ), kept AS (
        INSERT INTO receivable_deltas (account, currency, source, movement_id, since, reference, amount)
        SELECT account, currency, source, movement_id, min(since), max(reference), sum(amount)
        FROM folded
        GROUP BY account, currency, source, movement_id HAVING sum(amount) <> 0
    )
    SELECT count(*) FROM folded;
$$;

INSERT INTO receivable_deltas (account, currency, source, movement_id, since, reference, amount)
SELECT l.account, l.currency, e.source, e.movement_id, min(e.effective_date), max(e.reference),
       sum(l.amount)
FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
WHERE left(l.account, 12) = 'receivables:'
GROUP BY l.account, l.currency, e.source, e.movement_id
HAVING sum(l.amount) <> 0;
