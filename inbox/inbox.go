// Package inbox owns the inbox_events table: every provider event paygate
// ever acknowledged, stored byte for byte, with where it stands (received,
// processed, ignored, poison or discarded).
//
// The webhook handler inserts into it, the process_event job moves events
// through their statuses, and the ops API reads it. Dedupe is the table's
// unique key on (provider, event_id): the database decides which copy of an
// event is new, never a check-then-act here. This package must never apply
// an event or know a provider's payload format.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Status is where an event stands. Every acknowledged event is in exactly
// one of them at any time: nothing is ever lost.
type Status string

const (
	StatusReceived  Status = "received"  // acknowledged, not (yet) applied
	StatusProcessed Status = "processed" // applied to the payments and ledger
	StatusIgnored   Status = "ignored"   // a type paygate does not use
	StatusPoison    Status = "poison"    // could not be applied; waits for ops
	StatusDiscarded Status = "discarded" // set aside by a named operator
)

// Statuses lists every status, in display order.
var Statuses = []Status{StatusReceived, StatusProcessed, StatusIgnored, StatusPoison, StatusDiscarded}

// ErrNotFound is returned when no event has the given provider and id.
var ErrNotFound = errors.New("event not found")

// Event is one row of the inbox.
type Event struct {
	ID                int64
	Provider          string
	EventID           string
	Type              string
	Livemode          bool
	APIVersion        string
	ProviderCreatedAt *time.Time
	Payload           []byte
	Status            Status
	Attempts          int
	LastError         string
	ReceivedAt        time.Time
	ProcessedAt       *time.Time
}

// Querier is what reads need: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const columns = `id, provider, event_id, type, livemode, api_version, provider_created_at,
	payload, status, attempts, coalesce(last_error, ''), received_at, processed_at`

func scan(row pgx.Row) (Event, error) {
	var e Event
	err := row.Scan(&e.ID, &e.Provider, &e.EventID, &e.Type, &e.Livemode, &e.APIVersion,
		&e.ProviderCreatedAt, &e.Payload, &e.Status, &e.Attempts, &e.LastError, &e.ReceivedAt, &e.ProcessedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	return e, err
}

// InsertTx stores e unless an event with the same provider and id is
// already there. It reports whether the row is new; a duplicate is not an
// error.
func InsertTx(ctx context.Context, tx pgx.Tx, e Event) (created bool, err error) {
	var id int64
	err = tx.QueryRow(ctx, `
		INSERT INTO inbox_events (provider, event_id, type, livemode, api_version, provider_created_at, payload)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (provider, event_id) DO NOTHING
		RETURNING id`,
		e.Provider, e.EventID, e.Type, e.Livemode, e.APIVersion, e.ProviderCreatedAt, e.Payload).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("insert inbox event %s: %w", e.EventID, err)
	}
	return true, nil
}

// Get returns one event.
//
// It fails with ErrNotFound.
func Get(ctx context.Context, q Querier, provider, eventID string) (Event, error) {
	e, err := scan(q.QueryRow(ctx, `SELECT `+columns+` FROM inbox_events WHERE provider = $1 AND event_id = $2`, provider, eventID))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Event{}, fmt.Errorf("get inbox event %s: %w", eventID, err)
	}
	return e, err
}

// LockTx returns one event, locked until tx ends, so that two workers or a
// worker and an operator never change it at once.
//
// It fails with ErrNotFound.
func LockTx(ctx context.Context, tx pgx.Tx, provider, eventID string) (Event, error) {
	e, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM inbox_events WHERE provider = $1 AND event_id = $2 FOR UPDATE`, provider, eventID))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Event{}, fmt.Errorf("lock inbox event %s: %w", eventID, err)
	}
	return e, err
}

// SetStatusTx moves an event to status. lastError is kept as it was when
// empty; processed_at is stamped for the final statuses. Each call counts as
// an attempt when attempt is true.
func SetStatusTx(ctx context.Context, q Querier, provider, eventID string, status Status, lastError string, attempt bool) error {
	inc := 0
	if attempt {
		inc = 1
	}
	tag, err := q.Exec(ctx, `
		UPDATE inbox_events SET
			status       = $3,
			last_error   = coalesce(nullif($4, ''), last_error),
			attempts     = attempts + $5,
			processed_at = CASE WHEN $3 IN ('processed', 'ignored') THEN now() ELSE processed_at END
		WHERE provider = $1 AND event_id = $2`,
		provider, eventID, status, lastError, inc)
	if err != nil {
		return fmt.Errorf("set inbox event %s %s: %w", eventID, status, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Counts returns how many events are in each status (every status present,
// zero when none).
func Counts(ctx context.Context, q Querier) (map[Status]int64, error) {
	out := make(map[Status]int64, len(Statuses))
	for _, s := range Statuses {
		out[s] = 0
	}
	rows, err := q.Query(ctx, `SELECT status, count(*) FROM inbox_events GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("count inbox events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s Status
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, fmt.Errorf("count inbox events: %w", err)
		}
		out[s] = n
	}
	return out, rows.Err()
}
