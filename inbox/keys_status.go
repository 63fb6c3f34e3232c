package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// KeyStatuses returns where each of the events of keys stands, by key, in
// one statement that reads neither payloads nor anything else of the rows:
// what a caller needs to tell which events the inbox lacks, or which are
// still received, for many events at once. A key no event has is absent
// from the map, and so is one whose payload the retention dropped (its key
// stays, so inserting it again is a duplicate); a key given twice is
// answered once. Each event is looked up in the one partition its key
// names. No keys: an empty map, and no statement.
func KeyStatuses(ctx context.Context, q Querier, keys []Key) (map[Key]Status, error) {
	out := make(map[Key]Status, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	providers, ids := columnsOf(keys)
	rows, err := q.Query(ctx, withKeys+`
		SELECT k.provider, k.event_id, e.status FROM k CROSS JOIN LATERAL (
			SELECT status FROM inbox_events e WHERE (e.provider, e.event_id, e.received_at) = (k.provider, k.event_id, k.received_at)
			OFFSET 0) e`, providers, ids)
	if err != nil {
		return nil, fmt.Errorf("read status of %s: %w", eventsNoun(keys), err)
	}
	var (
		k  Key
		st Status
	)
	_, err = pgx.ForEachRow(rows, []any{&k.Provider, &k.EventID, &st}, func() error {
		out[k] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read status of %s: %w", eventsNoun(keys), err)
	}
	return out, nil
}

// columnsOf splits keys into the two arrays a statement unnests.
func columnsOf(keys []Key) (providers, ids []string) {
	providers, ids = make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		providers[i], ids[i] = k.Provider, k.EventID
	}
	return providers, ids
}
