// Package inbox owns the inbox_events table: every provider event paygate
// ever acknowledged, stored byte for byte, with where it stands (received,
// processed, ignored, poison or discarded).
//
// The webhook handler inserts into it, the jobs that apply events move them
// through their statuses, and the ops API reads it. Dedupe is the unique key
// of inbox_event_keys on (provider, event_id), kept forever: the database
// decides which copy of an event is new, never a check-then-act here.
// inbox_events itself is partitioned by month of arrival, so that old
// payloads can leave (partitions.go); every lookup by key goes through
// inbox_event_keys, whose received_at names the one partition to visit.
// Counts by status are kept by the database as rows change (Counts). This
// package must never apply an event or know a provider's payload format.
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

// Source is how an event reached paygate. Sources are stored; never rename
// one.
type Source string

const (
	SourceWebhook Source = "webhook" // delivered to a webhook endpoint, authenticated by its signature or credentials
	SourceAPI     Source = "api"     // read from the provider's API (the sweep, reconciliation), vouched for by the authenticated call
)

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
	// Source is how it reached paygate; InsertManyTx stores SourceWebhook
	// when empty.
	Source Source
}

// Querier is what reads need: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const columns = `id, provider, event_id, type, livemode, api_version, provider_created_at,
	payload, status, attempts, coalesce(last_error, ''), received_at, processed_at, source`

func scan(row pgx.Row) (Event, error) {
	var e Event
	err := row.Scan(&e.ID, &e.Provider, &e.EventID, &e.Type, &e.Livemode, &e.APIVersion,
		&e.ProviderCreatedAt, &e.Payload, &e.Status, &e.Attempts, &e.LastError, &e.ReceivedAt, &e.ProcessedAt, &e.Source)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, ErrNotFound
	}
	return e, err
}

// InsertTx stores e unless an event with the same provider and id is
// already there. It reports whether the row is new; a duplicate is not an
// error.
func InsertTx(ctx context.Context, tx pgx.Tx, e Event) (created bool, err error) {
	news, err := InsertManyTx(ctx, tx, []Event{e})
	if err != nil {
		return false, fmt.Errorf("insert inbox event %s: %w", e.EventID, err)
	}
	return news[0], nil
}

// byKey selects the row of the event keyed ($1, $2) through its key's
// received_at, so that the plan visits one partition (run-time pruning on
// the subquery's value) instead of probing every month's index.
const byKey = `provider = $1 AND event_id = $2 AND received_at = (
	SELECT received_at FROM inbox_event_keys WHERE provider = $1 AND event_id = $2)`

// Get returns one event.
//
// It fails with ErrNotFound.
func Get(ctx context.Context, q Querier, provider, eventID string) (Event, error) {
	e, err := scan(q.QueryRow(ctx, `SELECT `+columns+` FROM inbox_events WHERE `+byKey, provider, eventID))
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
	k := Key{Provider: provider, EventID: eventID}
	events, err := LockManyTx(ctx, tx, []Key{k})
	if err != nil {
		return Event{}, err
	}
	e, ok := events[k]
	if !ok {
		return Event{}, ErrNotFound
	}
	return e, nil
}

// LockManyTx is LockTx for every event of keys, in one statement: it returns
// the events, each locked until tx ends, by key. A key no event has is
// absent from the map; a key given twice is locked once.
//
// Rows are locked in (provider, event_id) order, so two transactions
// locking overlapping sets take the locks in the same order and never
// deadlock: the later one waits for the earlier one to end.
func LockManyTx(ctx context.Context, tx pgx.Tx, keys []Key) (map[Key]Event, error) {
	out := make(map[Key]Event, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	providers, ids := columnsOf(keys)
	rows, err := tx.Query(ctx, withKeys+`
		SELECT `+columns+` FROM (SELECT e.* FROM k CROSS JOIN LATERAL (
			SELECT * FROM inbox_events e WHERE (e.provider, e.event_id, e.received_at) = (k.provider, k.event_id, k.received_at)
			FOR UPDATE) e) e`, providers, ids)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", eventsNoun(keys), err)
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scan(row) })
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", eventsNoun(keys), err)
	}
	for _, e := range events {
		out[Key{Provider: e.Provider, EventID: e.EventID}] = e
	}
	return out, nil
}

// withKeys names k the keys of the events given as $1 (providers) and $2
// (event ids), with their received_at, in (provider, event_id) order. A
// statement then reads each event by its whole primary key, in a LATERAL
// subquery that PostgreSQL keeps apart (FOR UPDATE, or OFFSET 0): one probe
// of the one partition the key's received_at names, the keys' order being
// the order of the probes, and of the locks they take. Joined as tables,
// the planner may probe every partition for every key (each month's, the
// months ahead, the DEFAULT one), or read the partitions whole while they
// are small, and keep that plan as they grow.
const withKeys = `WITH k AS MATERIALIZED (
		SELECT provider, event_id, received_at FROM inbox_event_keys
		WHERE (provider, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		ORDER BY provider, event_id)`

// eventsNoun names the events of a bulk call in its errors: the event
// itself when there is one, as the single versions always have.
func eventsNoun(keys []Key) string {
	if len(keys) == 1 {
		return "inbox event " + keys[0].EventID
	}
	return fmt.Sprintf("%d inbox events", len(keys))
}

// SetStatusTx moves an event to status. lastError is kept as it was when
// empty; processed_at is stamped for the final statuses. Each call counts as
// an attempt when attempt is true.
//
// It fails with ErrNotFound.
func SetStatusTx(ctx context.Context, q Querier, provider, eventID string, status Status, lastError string, attempt bool) error {
	return SetStatusManyTx(ctx, q, []StatusUpdate{{
		Key: Key{Provider: provider, EventID: eventID}, Status: status, LastError: lastError, Attempt: attempt,
	}})
}

// StatusUpdate is one SetStatusTx of a SetStatusManyTx.
type StatusUpdate struct {
	Key
	Status    Status
	LastError string // empty: the event's last error is kept
	Attempt   bool   // counts as an attempt
	// ReceivedAt, when the caller has the event locked (LockManyTx gave
	// it), names the event's partition and row directly; zero, it is read
	// from the event's key.
	ReceivedAt time.Time
}

// SetStatusManyTx is SetStatusTx for every update, in one statement. An
// event named by more than one update ends as if SetStatusTx had been called
// for each of them in order.
//
// It fails with ErrNotFound, naming a key no event has; the events that
// were found are updated all the same, so the caller rolls back. Rows are
// updated in the order the plan meets them: callers that may update
// overlapping sets at once lock them first with LockManyTx.
func SetStatusManyTx(ctx context.Context, q Querier, updates []StatusUpdate) error {
	if len(updates) == 0 {
		return nil
	}
	// Fold repeats of a key here: UPDATE … FROM changes a row once however
	// many source rows match it, so each key may appear only once.
	type change struct {
		status     string
		lastError  string
		attempts   int
		stamp      bool
		receivedAt time.Time
	}
	var (
		keys    = make([]Key, 0, len(updates))
		changes = make(map[Key]*change, len(updates))
	)
	for _, u := range updates {
		c, ok := changes[u.Key]
		if !ok {
			c = &change{}
			changes[u.Key] = c
			keys = append(keys, u.Key)
		}
		c.status = string(u.Status)
		if u.LastError != "" {
			c.lastError = u.LastError
		}
		if u.Attempt {
			c.attempts++
		}
		c.stamp = c.stamp || u.Status == StatusProcessed || u.Status == StatusIgnored
		if !u.ReceivedAt.IsZero() {
			c.receivedAt = u.ReceivedAt
		}
	}
	var (
		providers  = make([]string, len(keys))
		ids        = make([]string, len(keys))
		statuses   = make([]string, len(keys))
		lastErrors = make([]string, len(keys))
		attempts   = make([]int32, len(keys))
		stamps     = make([]bool, len(keys))
		received   = make([]time.Time, len(keys))
		located    = true // every update names its row's received_at
	)
	for i, k := range keys {
		c := changes[k]
		providers[i], ids[i] = k.Provider, k.EventID
		statuses[i], lastErrors[i], attempts[i], stamps[i] = c.status, c.lastError, int32(c.attempts), c.stamp
		received[i], located = c.receivedAt, located && !c.receivedAt.IsZero()
	}
	what := fmt.Sprintf("set %d inbox events' status", len(keys))
	if len(keys) == 1 {
		what = fmt.Sprintf("set inbox event %s %s", keys[0].EventID, statuses[0])
	}
	// The events' received_at, given or read from their keys, names each
	// one's partition and row (the primary key), as every lookup by key does.
	byRow := `JOIN inbox_event_keys k ON (k.provider, k.event_id) = (u.provider, u.event_id)
		WHERE (e.provider, e.event_id, e.received_at) = (k.provider, k.event_id, k.received_at)`
	if located {
		byRow = `WHERE (e.provider, e.event_id, e.received_at) = (u.provider, u.event_id, u.received_at)`
	}
	rows, err := q.Query(ctx, `
		UPDATE inbox_events AS e SET
			status       = u.status,
			last_error   = coalesce(nullif(u.last_error, ''), e.last_error),
			attempts     = e.attempts + u.attempts,
			processed_at = CASE WHEN u.stamp THEN now() ELSE e.processed_at END
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::integer[], $6::boolean[], $7::timestamptz[])
			AS u (provider, event_id, status, last_error, attempts, stamp, received_at)
		`+byRow+`
		RETURNING e.provider, e.event_id`,
		providers, ids, statuses, lastErrors, attempts, stamps, received)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Key])
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(found) == len(keys) {
		return nil
	}
	for _, k := range found {
		delete(changes, k)
	}
	for _, k := range keys {
		if _, missing := changes[k]; missing {
			return fmt.Errorf("%s: %s/%s: %w", what, k.Provider, k.EventID, ErrNotFound)
		}
	}
	return nil
}

// Counts returns how many events are in each status (every status present,
// zero when none). It reads the counters the database keeps in the
// transactions that change the rows (inbox_status_counts, a few rows per
// status): the same cost at ten events or ten million, and as consistent
// as the rows themselves.
func Counts(ctx context.Context, q Querier) (map[Status]int64, error) {
	out := make(map[Status]int64, len(Statuses))
	for _, s := range Statuses {
		out[s] = 0
	}
	rows, err := q.Query(ctx, `SELECT status, sum(n)::bigint FROM inbox_status_counts GROUP BY status`)
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
