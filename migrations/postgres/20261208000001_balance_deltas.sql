-- Balances kept as the journal is written: what each account's lines in a currency add up to on
-- an effective date, so a balance (as of any date) sums a row per account, currency and day
-- rather than every line. Each statement that writes lines adds its sums as new rows (no row is
-- updated, so no posting waits on another for a busy account's row); the workers fold each
-- day's rows into one (`balance_deltas_compact`), which keeps every sum as it is. Written only
-- by these two functions, which run as the owner: no runtime role may write the table.
CREATE TABLE balance_deltas (
    account        text NOT NULL,
    currency       text NOT NULL,
    effective_date date NOT NULL,
    amount         numeric(38,10) NOT NULL
);
CREATE INDEX balance_deltas_day ON balance_deltas (account, currency, effective_date);

-- Each written line's entry is read by its key, never by reading the journal whole: the sums are
-- planned anew for each statement (EXECUTE), since a query without parameters keeps the plan its
-- connection made first (and one made while the journal was empty reads it whole on every posting
-- for as long as the connection lives), and with sequential scans off, since a posting writes a
-- few dozen lines and the journal's first thousands of entries would otherwise be read whole.
CREATE FUNCTION balance_deltas_add() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp SET enable_seqscan = off AS $$
BEGIN
    EXECUTE 'INSERT INTO balance_deltas (account, currency, effective_date, amount)
             SELECT l.account, l.currency, e.effective_date, sum(l.amount)
             FROM written_lines l JOIN journal_entries e ON e.id = l.entry_id
             GROUP BY l.account, l.currency, e.effective_date
             HAVING sum(l.amount) <> 0';
    RETURN NULL;
END $$;

CREATE TRIGGER journal_lines_to_balance_deltas AFTER INSERT ON journal_lines
    REFERENCING NEW TABLE AS written_lines
    FOR EACH STATEMENT EXECUTE FUNCTION balance_deltas_add();

-- Folds the rows of each account, currency and day that has several into one; answers how many
-- rows it folded. Safe beside postings (rows they add meanwhile stay for the next fold) and
-- beside another fold (a row is deleted, and its amount carried, once).
CREATE FUNCTION balance_deltas_compact() RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH days AS (
        SELECT account, currency, effective_date FROM balance_deltas
        GROUP BY account, currency, effective_date HAVING count(*) > 1
    ), folded AS (
        DELETE FROM balance_deltas d USING days
        WHERE d.account = days.account AND d.currency = days.currency
          AND d.effective_date = days.effective_date
        RETURNING d.account, d.currency, d.effective_date, d.amount
    ), kept AS (
        INSERT INTO balance_deltas (account, currency, effective_date, amount)
        SELECT account, currency, effective_date, sum(amount) FROM folded
        GROUP BY account, currency, effective_date HAVING sum(amount) <> 0
    )
    SELECT count(*) FROM folded;
$$;

INSERT INTO balance_deltas (account, currency, effective_date, amount)
SELECT l.account, l.currency, e.effective_date, sum(l.amount)
FROM journal_lines l JOIN journal_entries e ON e.id = l.entry_id
GROUP BY l.account, l.currency, e.effective_date
HAVING sum(l.amount) <> 0;
