-- Each endpoint reads the feed from a place of its own (ARCHITECTURE.md,
-- "Downstream"), instead of a fan-out writing a pending delivery per
-- message and endpoint that its dispatcher then updated: a message now
-- gets its delivery row once, when its first attempt is recorded, with
-- what that attempt settled. A pending row is written only for what must
-- wait (a retry, a message held behind an earlier one of its object).
--
-- handed_through: every message placed at or before this feed position is
-- handed to the endpoint (it has a delivery row, or it is not of the
-- endpoint's types, or it is older than the endpoint). Only the endpoint's
-- dispatcher advances it, in the transaction that records what it sent.
ALTER TABLE endpoints ADD COLUMN handed_through bigint NOT NULL DEFAULT 0;

-- The fan-out's own place becomes every endpoint's: it had handed them
-- everything up to there. Instances older than this migration are to be
-- stopped before it runs: their relay would take the fan-out's place up
-- again, from the start, and a place left behind by a relay that no longer
-- runs holds every month of messages past the retention.
UPDATE endpoints SET handed_through = coalesce((SELECT position FROM message_relays WHERE name = 'endpoints'), 0);
DELETE FROM message_relays WHERE name = 'endpoints';

-- Where every message stands at every endpoint: the delivery rows, and, as
-- pending with no attempt, the messages of the endpoint's types placed
-- after its place, not handed yet. Reads (the API, the console, metrics,
-- retention) go through it, so a message not yet handed is as pending as
-- it was when the fan-out had written its row. One not handed yet waits
-- ('infinity') while an earlier message of its object is pending there.
CREATE VIEW delivery_queue AS
SELECT d.endpoint_id, d.message_id, d.message_created_at, d.type, d.aggregate, d.sequence, d.position,
       d.status, d.attempts, d.next_attempt_at, d.last_attempt_at, d.response_status, d.error
FROM deliveries d
UNION ALL
SELECT e.id, m.id, m.created_at, m.type, m.aggregate_type || '/' || m.aggregate_id, m.sequence, m.position,
       'pending', 0,
       CASE WHEN EXISTS (
                SELECT 1 FROM deliveries p
                WHERE p.endpoint_id = e.id AND p.status = 'pending'
                  AND p.aggregate = m.aggregate_type || '/' || m.aggregate_id)
             OR EXISTS (
                SELECT 1 FROM messages o
                WHERE o.aggregate_type = m.aggregate_type AND o.aggregate_id = m.aggregate_id
                  AND o.sequence < m.sequence AND o.position > e.handed_through
                  AND o.created_at >= e.created_at
                  AND (e.event_types @> ARRAY['*'] OR e.event_types @> ARRAY[o.type])
                  AND NOT EXISTS (SELECT 1 FROM deliveries od WHERE od.endpoint_id = e.id AND od.message_id = o.id))
            THEN 'infinity'::timestamptz ELSE m.created_at END,
       NULL::timestamptz, NULL::integer, NULL::text
FROM endpoints e
JOIN messages m ON m.position > e.handed_through AND m.created_at >= e.created_at
 AND (e.event_types @> ARRAY['*'] OR e.event_types @> ARRAY[m.type])
WHERE NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.endpoint_id = e.id AND d.message_id = m.id);

-- paygate_message_partition_drop (0017) again: a message not handed yet to
-- an endpoint of its types is pending there, as its row was.
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
    -- Neither a record (a delivery row) nor a dispatcher's move of its
    -- place (the endpoints' rows) commits while this looks.
    LOCK TABLE deliveries IN SHARE ROW EXCLUSIVE MODE;
    LOCK TABLE endpoints IN SHARE ROW EXCLUSIVE MODE;
    SELECT count(*) INTO pending FROM delivery_queue
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
