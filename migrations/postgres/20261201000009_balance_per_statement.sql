-- The balance check runs once per statement for all the entries it wrote, instead of once per
-- entry and once per line at commit (four checks of the same entry for a three-line entry; a
-- group posting writes dozens of entries in one statement). Every entry still has at least two
-- lines and sums to zero per currency once the statement that wrote it ends: an entry and its
-- lines must be written by one statement (the posting writes both in one), and lines added to an
-- existing entry are checked with it.
DROP TRIGGER journal_entries_balanced ON journal_entries;
DROP TRIGGER journal_lines_balanced ON journal_lines;
DROP FUNCTION journal_entries_check_balanced();
DROP FUNCTION journal_lines_check_balanced();

CREATE FUNCTION journal_assert_entries_balanced(entries BIGINT[]) RETURNS void AS $$
DECLARE
    entry BIGINT;
    line_count BIGINT;
    unbalanced TEXT;
BEGIN
    SELECT e.id, coalesce(c.lines, 0), c.unbalanced INTO entry, line_count, unbalanced
    FROM unnest(entries) AS e(id)
    LEFT JOIN LATERAL (
        SELECT sum(per_currency.lines) AS lines,
               string_agg(per_currency.currency || ' ' || per_currency.total::text, ', ')
                   FILTER (WHERE per_currency.total <> 0) AS unbalanced
        FROM (SELECT l.currency, count(*) AS lines, sum(l.amount) AS total FROM journal_lines l
              WHERE l.entry_id = e.id GROUP BY l.currency) AS per_currency
    ) AS c ON true
    WHERE coalesce(c.lines, 0) < 2 OR c.unbalanced IS NOT NULL
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF line_count < 2 THEN
        RAISE EXCEPTION 'journal entry % has % line(s); an entry needs at least two', entry, line_count
            USING ERRCODE = 'check_violation';
    END IF;
    RAISE EXCEPTION 'journal entry % does not balance: %', entry, unbalanced
        USING ERRCODE = 'check_violation';
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION journal_entries_check_balanced() RETURNS trigger AS $$
BEGIN
    PERFORM journal_assert_entries_balanced(ARRAY(SELECT id FROM written_entries));
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION journal_lines_check_balanced() RETURNS trigger AS $$
BEGIN
    PERFORM journal_assert_entries_balanced(ARRAY(SELECT DISTINCT entry_id FROM written_lines));
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER journal_entries_balanced AFTER INSERT ON journal_entries
    REFERENCING NEW TABLE AS written_entries
    FOR EACH STATEMENT EXECUTE FUNCTION journal_entries_check_balanced();
CREATE TRIGGER journal_lines_balanced AFTER INSERT ON journal_lines
    REFERENCING NEW TABLE AS written_lines
    FOR EACH STATEMENT EXECUTE FUNCTION journal_lines_check_balanced();
