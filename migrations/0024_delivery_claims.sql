-- An endpoint's dispatcher holds a session advisory lock while it runs, so
-- it alone sends the endpoint's messages and knows which it is sending: a
-- claim is no longer a row written per message. (Each claim was an update
-- of the delivery that no index could take as HOT, so it cost a new entry
-- in every index of deliveries.)
DROP INDEX deliveries_claimed_idx;
ALTER TABLE deliveries DROP COLUMN claimed_until;
