-- The ledger's checks (ledger_check_transaction at commit, per ledger
-- transaction; ledger_entries_check_count, per statement of entries) look
-- a transaction's entries up by its id: a probe of
-- ledger_entries_transaction_id_idx. A session keeps a trigger's plans,
-- and plans made while ledger_entries was empty, or analyzed empty, scan
-- the whole table instead: every posting then reads every entry, more of
-- them with each posting, until the next ANALYZE replans it (on a server
-- without autovacuum, never). The checks run with sequential scans off, so
-- that they probe whatever statistics they were planned on; they read
-- nothing a scan would be cheaper for.
ALTER FUNCTION ledger_check_transaction() SET enable_seqscan = off;
ALTER FUNCTION ledger_entries_check_count() SET enable_seqscan = off;
