-- An endpoint's deliveries by feed position, ascending. An endpoint's
-- positions only grow, so each new entry goes to the right edge of its
-- range, where a full page splits near its end; descending, each went to
-- the left edge, where a full page splits in half, so the index was twice
-- its size (and, for the endpoint whose range ends the index, nbtree now
-- appends to its last page without descending from the root). Listings
-- newest first read it backwards.
DROP INDEX deliveries_list_idx;
CREATE INDEX deliveries_list_idx ON deliveries (endpoint_id, position);
