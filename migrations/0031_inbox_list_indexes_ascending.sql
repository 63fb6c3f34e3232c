-- The inbox's list indexes, ascending. Events arrive in (received_at, id)
-- order, so in a descending index each entry went to the left edge of its
-- range (of the whole index, or of its status), where nbtree splits a
-- page in half and has no fast path: every event ingested, and every
-- status it takes, wrote an entry there, into pages half empty. Ascending,
-- entries append at the right edge. The lists, newest first, read them
-- backwards (migration 0030 did the same for deliveries).
DROP INDEX inbox_events_received_at_idx;
DROP INDEX inbox_events_status_idx;
DROP INDEX inbox_events_status_type_idx;
CREATE INDEX inbox_events_received_at_idx ON inbox_events (received_at, id);
CREATE INDEX inbox_events_status_idx ON inbox_events (status, received_at, id);
CREATE INDEX inbox_events_status_type_idx ON inbox_events (status, type, received_at, id);
