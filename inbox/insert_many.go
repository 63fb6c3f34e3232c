package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// InsertManyTx stores, with one statement, every event of events not
// already in the inbox, and reports for each index whether its row is new.
// A duplicate is not an error. When events repeats a (provider, event_id),
// only its first copy can be reported new: the others are duplicates of it.
//
// One statement writes the keys and the events: the key's insert into
// inbox_event_keys decides (its primary key is the dedupe key, kept
// forever), and only the events whose key is new are inserted, with the
// key's received_at, which puts each in its month's partition. Keys are
// inserted in (provider, event_id) order, so two concurrent transactions
// inserting overlapping sets take the unique key's locks in the same order
// and never deadlock: the later one waits for the earlier one's commit and
// then finds its copies duplicate.
func InsertManyTx(ctx context.Context, tx pgx.Tx, events []Event) (created []bool, err error) {
	created = make([]bool, len(events))
	if len(events) == 0 {
		return created, nil
	}
	type key struct{ provider, eventID string }
	var (
		providers = make([]string, 0, len(events))
		ids       = make([]string, 0, len(events))
		types     = make([]string, 0, len(events))
		livemodes = make([]bool, 0, len(events))
		versions  = make([]string, 0, len(events))
		createdAt = make([]*time.Time, 0, len(events))
		payloads  = make([][]byte, 0, len(events))
		sources   = make([]string, 0, len(events))
		first     = make(map[key]int, len(events))
	)
	for i, e := range events {
		k := key{e.Provider, e.EventID}
		if _, seen := first[k]; seen {
			continue
		}
		first[k] = i
		providers = append(providers, e.Provider)
		ids = append(ids, e.EventID)
		types = append(types, e.Type)
		livemodes = append(livemodes, e.Livemode)
		versions = append(versions, e.APIVersion)
		createdAt = append(createdAt, e.ProviderCreatedAt)
		payloads = append(payloads, e.Payload)
		source := e.Source
		if source == "" {
			source = SourceWebhook
		}
		sources = append(sources, string(source))
	}
	rows, err := tx.Query(ctx, `
		WITH given AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[], $5::text[], $6::timestamptz[], $7::bytea[], $8::text[])
				AS e (provider, event_id, type, livemode, api_version, provider_created_at, payload, source)
		), fresh AS (
			INSERT INTO inbox_event_keys (provider, event_id)
			SELECT provider, event_id FROM given
			ORDER BY provider, event_id
			ON CONFLICT (provider, event_id) DO NOTHING
			RETURNING provider, event_id, received_at
		)
		INSERT INTO inbox_events (provider, event_id, type, livemode, api_version, provider_created_at, payload, source, received_at)
		SELECT g.provider, g.event_id, g.type, g.livemode, g.api_version, g.provider_created_at, g.payload, g.source, f.received_at
		FROM fresh f JOIN given g USING (provider, event_id)
		RETURNING provider, event_id`,
		providers, ids, types, livemodes, versions, createdAt, payloads, sources)
	if err != nil {
		return nil, fmt.Errorf("insert %d inbox events: %w", len(ids), err)
	}
	defer rows.Close()
	var k key
	for rows.Next() {
		if err := rows.Scan(&k.provider, &k.eventID); err != nil {
			return nil, fmt.Errorf("insert %d inbox events: %w", len(ids), err)
		}
		if i, ok := first[k]; ok {
			created[i] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert %d inbox events: %w", len(ids), err)
	}
	return created, nil
}
