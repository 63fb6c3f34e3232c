-- The planner keeps no statistics of a partial index's expression, so it
-- guessed that 0.5 % of payments have a given lower(receipt_email) and
-- read payments_created_at_idx backwards looking for one: an ops search
-- by email (or for nothing at all) took seconds at a million payments.
-- Statistics of the expression itself let it see that an address matches
-- a handful, and use payments_receipt_email_idx.
CREATE STATISTICS payments_receipt_email_lower_stats ON (lower(receipt_email)) FROM payments;
ANALYZE payments;
