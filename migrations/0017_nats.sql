-- Publishing messages to NATS JetStream (ARCHITECTURE.md, "Downstream",
-- the NATS paragraph).
--
-- The publisher is a relay like the endpoints' fan-out: its place is a row
-- of message_relays (name 'nats'), advanced in the transaction that holds
-- the row's lock, once JetStream acknowledged the messages. What it needs
-- beyond the place is how publishing fares, for the console and for the
-- one alert per outage:
--   failing_since  the first failure since the last success (NULL while
--                  publishing works): ops are told once it is older than
--                  15 minutes;
--   last_error     the last failure's error, kept after a success for
--                  the console;
--   alerted_at     when ops were told of the current outage (NULL again
--                  after a success: the next outage alerts again).
-- The endpoints' relay leaves them NULL.
ALTER TABLE message_relays
    ADD COLUMN failing_since timestamptz,
    ADD COLUMN last_error    text,
    ADD COLUMN alerted_at    timestamptz;

-- Ops learn by email of publishing that failed for 15 minutes.
ALTER TABLE email_outbox DROP CONSTRAINT email_outbox_kind_check;
ALTER TABLE email_outbox ADD CONSTRAINT email_outbox_kind_check
    CHECK (kind IN ('payment_receipt', 'refund_confirmation', 'dispute_alert', 'poison_alert', 'refund_failed_alert',
                    'reconciliation_alert', 'endpoint_disabled', 'nats_unavailable'));

-- A month of messages is dropped only once every relay handed its messages
-- on, as well as every endpoint (0016): a broker outage longer than the
-- retention delays the drop, never loses an unpublished message. A relay
-- that is no longer wanted (publishing turned off for good) is removed
-- from message_relays by an operator.
CREATE OR REPLACE FUNCTION paygate_message_partition_drop(partition text, keep_from timestamptz) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    bound text;
    lower timestamptz;
    upper timestamptz;
    pending bigint;
    unrelayed bigint;
    dropped bigint;
BEGIN
    SELECT pg_get_expr(c.relpartbound, c.oid) INTO bound
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'messages'::regclass AND c.relname = partition;
    IF bound IS NULL THEN
        RAISE EXCEPTION 'message partition: % is not a partition of messages', partition;
    END IF;
    IF bound = 'DEFAULT' THEN
        RAISE EXCEPTION 'message partition: the default partition is never dropped';
    END IF;
    lower := substring(bound FROM 'FROM \(''([^'']+)''\)')::timestamptz;
    upper := substring(bound FROM 'TO \(''([^'']+)''\)')::timestamptz;
    IF upper IS NULL OR upper > keep_from THEN
        RAISE EXCEPTION 'message partition: % holds messages created on or after %', partition, keep_from;
    END IF;
    LOCK TABLE deliveries IN SHARE ROW EXCLUSIVE MODE;
    SELECT count(*) INTO pending FROM deliveries
    WHERE status = 'pending' AND message_created_at >= lower AND message_created_at < upper;
    -- Messages not placed yet, or placed after a relay's place.
    EXECUTE format('SELECT count(*) FROM %I m WHERE m.position IS NULL
        OR m.position > (SELECT coalesce(min(r.position), m.position) FROM message_relays r)', partition) INTO unrelayed;
    IF pending + unrelayed > 0 THEN
        RETURN -(pending + unrelayed);
    END IF;
    DELETE FROM deliveries WHERE message_created_at >= lower AND message_created_at < upper;
    EXECUTE format('SELECT count(*) FROM %I', partition) INTO dropped;
    EXECUTE format('ALTER TABLE messages DETACH PARTITION %I', partition);
    EXECUTE format('DROP TABLE %I', partition);
    RETURN dropped;
END;
$$;
-- (CREATE OR REPLACE keeps the function's grants: paygate_app's only.)
