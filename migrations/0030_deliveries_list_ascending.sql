-- An endpoint's deliveries by feed position, ascending: positions only
-- grow, so each new entry goes to the index's right edge, where nbtree
-- appends without descending from the root and splits its last page
-- 90/10; descending, each went to the endpoint's left edge and split
-- pages in half. Listings newest first read it backwards.
DROP INDEX deliveries_list_idx;
CREATE INDEX deliveries_list_idx ON deliveries (endpoint_id, position);
