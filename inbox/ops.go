package inbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sentinel errors of the operator functions.
var (
	// ErrBadCursor is returned for a cursor this package did not hand out.
	ErrBadCursor = errors.New("invalid cursor")
	// ErrAlreadyProcessed is returned when discarding an event whose effects
	// are already in the ledger: calling it discarded would misstate the
	// books.
	ErrAlreadyProcessed = errors.New("event already processed; it cannot be discarded")
	// ErrReasonRequired is returned when an operator discards without saying
	// why.
	ErrReasonRequired = errors.New("a reason is required")
)

// DefaultLimit and MaxLimit bound a page of a list.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// Filter selects events. Zero fields select everything.
type Filter struct {
	Provider string
	Status   Status
	Type     string
	// ErrorContains matches last_error case-insensitively as plain text: it
	// is a bound parameter compared with strpos, so LIKE wildcards, quotes and
	// the rest of a hostile string have no meaning.
	ErrorContains  string
	ReceivedAfter  time.Time // exclusive
	ReceivedBefore time.Time // exclusive
	// EventIDs, when not nil, selects only these event ids (with Provider,
	// through the inbox's unique key); an empty list selects nothing.
	EventIDs []string
}

// where renders f as SQL conditions on parameters numbered from len(args)+1.
func (f Filter) where(args []any) (string, []any) {
	conds := []string{"true"}
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if f.Provider != "" {
		add("provider = ?", f.Provider)
	}
	if f.Status != "" {
		add("status = ?", string(f.Status))
	}
	if f.Type != "" {
		add("type = ?", f.Type)
	}
	if f.ErrorContains != "" {
		add("strpos(lower(coalesce(last_error, '')), lower(?)) > 0", f.ErrorContains)
	}
	if !f.ReceivedAfter.IsZero() {
		add("received_at > ?", f.ReceivedAfter)
	}
	if !f.ReceivedBefore.IsZero() {
		add("received_at < ?", f.ReceivedBefore)
	}
	if f.EventIDs != nil {
		add("event_id = ANY(?::text[])", f.EventIDs)
	}
	return strings.Join(conds, " AND "), args
}

// Page asks for one page of a list: Limit items (DefaultLimit when zero,
// at most MaxLimit) after Cursor (the first page when empty).
type Page struct {
	Cursor string
	Limit  int
}

func (p Page) limit() int {
	switch {
	case p.Limit <= 0:
		return DefaultLimit
	case p.Limit > MaxLimit:
		return MaxLimit
	}
	return p.Limit
}

// The event cursor is the (received_at, id) of the last event of a page, the
// key the list is ordered by. It is opaque to clients.
func eventCursor(e Event) string {
	return base64.RawURLEncoding.EncodeToString(
		fmt.Appendf(nil, "e1:%d:%d", e.ReceivedAt.UnixMicro(), e.ID))
}

func parseEventCursor(s string) (time.Time, int64, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, 0, ErrBadCursor
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != "e1" {
		return time.Time{}, 0, ErrBadCursor
	}
	micros, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, 0, ErrBadCursor
	}
	return time.UnixMicro(micros), id, nil
}

// listColumns are columns without the payload: a list never needs it.
const listColumns = `id, provider, event_id, type, livemode, api_version, provider_created_at,
	''::bytea, status, attempts, coalesce(last_error, ''), received_at, processed_at, source`

// List returns the events f selects, newest first, one page at a time. next
// is the cursor of the following page, empty at the end. Payloads are not
// loaded.
//
// It fails with ErrBadCursor.
func List(ctx context.Context, q Querier, f Filter, p Page) (events []Event, next string, err error) {
	cond, args := f.where(nil)
	if p.Cursor != "" {
		at, id, err := parseEventCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		args = append(args, at, id)
		cond += fmt.Sprintf(" AND (received_at, id) < ($%d, $%d)", len(args)-1, len(args))
	}
	limit := p.limit()
	args = append(args, limit+1)
	rows, err := q.Query(ctx, `SELECT `+listColumns+` FROM inbox_events WHERE `+cond+
		fmt.Sprintf(` ORDER BY received_at DESC, id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list inbox events: %w", err)
	}
	events, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Event, error) { return scan(row) })
	if err != nil {
		return nil, "", fmt.Errorf("list inbox events: %w", err)
	}
	if len(events) > limit {
		events = events[:limit]
		next = eventCursor(events[limit-1])
	}
	return events, next, nil
}

// Count returns how many events f selects.
func Count(ctx context.Context, q Querier, f Filter) (int64, error) {
	cond, args := f.where(nil)
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM inbox_events WHERE `+cond, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count inbox events: %w", err)
	}
	return n, nil
}

// Key names one event.
type Key struct {
	Provider string
	EventID  string
}

// ReplayTx sets an event, whatever its status, back to received so that
// processing runs again; attempts and the last error are kept (attempts keep
// counting across replays) and the time of the replay is noted, so that
// the sweeper gives the new job a minute before calling the event
// stranded. The caller enqueues the processing job in the same tx.
//
// It fails with ErrNotFound.
func ReplayTx(ctx context.Context, tx pgx.Tx, provider, eventID string) (Event, error) {
	e, err := scan(tx.QueryRow(ctx, `
		UPDATE inbox_events SET status = 'received', processed_at = NULL, requeued_at = now()
		WHERE `+byKey+`
		RETURNING `+columns, provider, eventID))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Event{}, fmt.Errorf("replay inbox event %s: %w", eventID, err)
	}
	return e, err
}

// ReplayMatchingTx is ReplayTx for every event f selects, in one statement.
// It returns the events it set back to received, in the order they were
// received.
func ReplayMatchingTx(ctx context.Context, tx pgx.Tx, f Filter) ([]Key, error) {
	cond, args := f.where(nil)
	rows, err := tx.Query(ctx, `
		WITH replayed AS (
			UPDATE inbox_events SET status = 'received', processed_at = NULL, requeued_at = now()
			WHERE (provider, event_id, received_at) IN (
				SELECT provider, event_id, received_at FROM inbox_events WHERE `+cond+` ORDER BY id FOR UPDATE)
			RETURNING id, provider, event_id)
		SELECT provider, event_id FROM replayed ORDER BY id`, args...)
	if err != nil {
		return nil, fmt.Errorf("replay inbox events: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Key])
	if err != nil {
		return nil, fmt.Errorf("replay inbox events: %w", err)
	}
	return keys, nil
}

// DiscardTx sets an event aside: status discarded, for good unless an
// operator replays it. The caller records who and why in the audit log in
// the same tx.
//
// It fails with ErrNotFound, and ErrAlreadyProcessed for a processed event.
func DiscardTx(ctx context.Context, tx pgx.Tx, provider, eventID string) (Event, error) {
	e, err := LockTx(ctx, tx, provider, eventID)
	if err != nil {
		return Event{}, err
	}
	if e.Status == StatusProcessed {
		return e, ErrAlreadyProcessed
	}
	e, err = scan(tx.QueryRow(ctx, `
		UPDATE inbox_events SET status = 'discarded'
		WHERE `+byKey+`
		RETURNING `+columns, provider, eventID))
	if err != nil {
		return Event{}, fmt.Errorf("discard inbox event %s: %w", eventID, err)
	}
	return e, nil
}
