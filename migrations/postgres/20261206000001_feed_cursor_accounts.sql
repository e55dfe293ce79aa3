-- A feed per account a source holds at its provider (a Stripe connected account), beside the
-- source's own: `account` names it ('' for the source's own feed, whose windows are `feed:{seq}`;
-- an account's are `feed:{account}:{seq}`). The opening balance a backfill asks for is the
-- source's own (`account` '').
ALTER TABLE feed_cursors ADD COLUMN account TEXT NOT NULL DEFAULT '';
ALTER TABLE feed_cursors DROP CONSTRAINT feed_cursors_pkey;
ALTER TABLE feed_cursors ADD PRIMARY KEY (source, account);
