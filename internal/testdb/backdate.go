package testdb

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer is a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Backdate dates the arrival of the event eventID (any provider) at, as if
// it had been received then: its inbox row moves to the partition of that
// month, and its key, which lookups go through, follows it. Nothing in
// paygate moves an event in time; tests do, to age one.
func Backdate(ctx context.Context, q Execer, eventID string, at time.Time) error {
	tag, err := q.Exec(ctx, `
		WITH k AS (
			UPDATE inbox_event_keys SET received_at = $2 WHERE event_id = $1
			RETURNING provider, event_id)
		UPDATE inbox_events e SET received_at = $2
		FROM k WHERE (e.provider, e.event_id) = (k.provider, k.event_id)`, eventID, at)
	if err != nil {
		return fmt.Errorf("backdate %s: %w", eventID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("backdate %s: no such event", eventID)
	}
	return nil
}
