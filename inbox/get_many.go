package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// GetMany returns the events of keys, by key, in one statement, without
// locking them: for readers of stored payloads that must never hold up the
// workers applying them. A key no event has is absent from the map, and so
// is one whose payload the retention dropped; a key given twice is answered
// once. Each event is looked up in the one partition its key names. No
// keys: an empty map, and no statement.
func GetMany(ctx context.Context, q Querier, keys []Key) (map[Key]Event, error) {
	out := make(map[Key]Event, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	providers, ids := columnsOf(keys)
	rows, err := q.Query(ctx, withKeys+`
		SELECT `+columns+` FROM (SELECT e.* FROM k CROSS JOIN LATERAL (
			SELECT * FROM inbox_events e WHERE (e.provider, e.event_id, e.received_at) = (k.provider, k.event_id, k.received_at)
			OFFSET 0) e) e`, providers, ids)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", eventsNoun(keys), err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scan(row) })
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", eventsNoun(keys), err)
	}
	for _, e := range events {
		out[Key{Provider: e.Provider, EventID: e.EventID}] = e
	}
	return out, nil
}
