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
// from the map; a key given twice is answered once. No keys: an empty map,
// and no statement.
func KeyStatuses(ctx context.Context, q Querier, keys []Key) (map[Key]Status, error) {
	out := make(map[Key]Status, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	providers := make([]string, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		providers[i], ids[i] = k.Provider, k.EventID
	}
	rows, err := q.Query(ctx, `SELECT e.provider, e.event_id, e.status FROM inbox_events e
		WHERE (e.provider, e.event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, providers, ids)
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
