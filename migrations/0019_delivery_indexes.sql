-- Two of 0016's indexes on deliveries that no query needs: a claim or an
-- update of a pending delivery wrote an entry into each. The due messages
-- are found per endpoint (deliveries_due_idx), and retention counts a
-- month's pending deliveries once a day, which a scan does.
DROP INDEX deliveries_due_all_idx;
DROP INDEX deliveries_pending_created_idx;
