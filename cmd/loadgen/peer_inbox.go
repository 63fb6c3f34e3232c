package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/inbox"
)

// An inbox peer (loadgen peer -mode inbox -group) is the least work for
// what paygate's ingest writes for an event, where the grouped store peer
// is the least work for the peers' event and job rows: the same grouping,
// but paygate's own ingest statements in paygate's own tables (a database
// paygate migrated) — the dedupe key and the inbox row, received, by
// inbox.InsertManyTx, and one apply_events job naming the group's new
// events, by the jobs package's InsertApplyEventsTx — and nothing of
// paygate's serving around them: no Echo, no envelope decoded beyond the
// id, no logs, metrics or tracing. The jobs are left for a worker that
// does not run, as the store peer's are. Its rate is the limit for
// paygate's ingest on this machine.
const peerInbox = "inbox"

// writeInboxTx is paygate's ingest transaction for a group.
func (p *peer) writeInboxTx(ctx context.Context, tx pgx.Tx, group []*groupedEvent) error {
	events := make([]inbox.Event, len(group))
	for i, g := range group {
		created := time.Unix(g.ev.Created, 0).UTC()
		events[i] = inbox.Event{Provider: "stripe", EventID: g.ev.ID, Type: g.ev.Type, Livemode: g.ev.Livemode,
			APIVersion: g.ev.APIVersion, ProviderCreatedAt: &created, Payload: g.body}
	}
	created, err := inbox.InsertManyTx(ctx, tx, events)
	if err != nil {
		return fmt.Errorf("store %d events: %w", len(events), err)
	}
	var fresh []string
	for i, c := range created {
		if c {
			fresh = append(fresh, events[i].EventID)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	return p.jobs.InsertApplyEventsTx(ctx, tx, "stripe", fresh)
}
