-- Lines booked to a suspense account (`suspense:{source}`: a provider category settle does not
-- know), each a review item: found without reading every line.
CREATE INDEX journal_lines_suspense ON journal_lines (account, entry_id) WHERE account LIKE 'suspense:%';
