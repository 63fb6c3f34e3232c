-- What a delivered message costs the database, per endpoint: most messages
-- are delivered at their first attempt, which until now wrote two rows (the
-- delivery and its attempt) and six index entries, three of them keyed by
-- the message's id, a hash that lands each on a page of its own (and after
-- every checkpoint, a whole page into the WAL).
--
-- The attempt that writes a delivery row (a feed message's first, recorded
-- with its outcome) is now kept in that row; delivery_attempts holds the
-- attempts after it, and the series an operator begins. Attempt 1 of a
-- delivery is its first_* columns when first_attempt_at is set.
ALTER TABLE deliveries
    ADD COLUMN first_attempt_at      timestamptz,
    ADD COLUMN first_duration_ms     integer,
    ADD COLUMN first_response_status integer,
    ADD COLUMN first_response_body   text,
    ADD COLUMN first_error           text;

-- The primary key leads with the message, so that the probes by message
-- (has this endpoint a delivery of it yet?) go by it, and the index on the
-- message alone goes: one entry keyed by the id per delivery instead of two.
ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_endpoint_id_message_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_pkey;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_pkey PRIMARY KEY (message_id, endpoint_id);
ALTER TABLE delivery_attempts ADD CONSTRAINT delivery_attempts_endpoint_id_message_id_fkey
    FOREIGN KEY (endpoint_id, message_id) REFERENCES deliveries (endpoint_id, message_id) ON DELETE CASCADE;
DROP INDEX deliveries_message_idx;
