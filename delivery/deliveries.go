package delivery

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/outbox"
)

// DeliveryStatus is where a message stands at one endpoint.
type DeliveryStatus string

// The statuses of a delivery.
const (
	// DeliveryPending: not delivered yet; tried again at next_attempt_at
	// (held while the endpoint is disabled, or while an earlier message of
	// the same object is pending there).
	DeliveryPending DeliveryStatus = "pending"
	// DeliverySucceeded: the endpoint answered 2xx.
	DeliverySucceeded DeliveryStatus = "succeeded"
	// DeliveryFailed: every attempt of the schedule failed; a resend or a
	// recovery sends it again.
	DeliveryFailed DeliveryStatus = "failed"
)

// ErrDeliveryNotFound is returned for a message an endpoint has no
// delivery of.
var ErrDeliveryNotFound = errors.New("delivery not found")

// Delivery is one message at one endpoint.
type Delivery struct {
	EndpointID     string
	MessageID      string
	Type           string
	Status         DeliveryStatus
	Attempts       int
	LastAttemptAt  *time.Time
	NextAttemptAt  *time.Time // nil unless pending and scheduled
	ResponseStatus *int
	Error          string
	Position       int64
}

const deliveryColumns = `endpoint_id, message_id, type, status, attempts, last_attempt_at,
	CASE WHEN status = 'pending' AND next_attempt_at <> 'infinity' THEN next_attempt_at END,
	response_status, coalesce(error, ''), position`

func scanDelivery(row pgx.Row) (Delivery, error) {
	var d Delivery
	err := row.Scan(&d.EndpointID, &d.MessageID, &d.Type, &d.Status, &d.Attempts, &d.LastAttemptAt,
		&d.NextAttemptAt, &d.ResponseStatus, &d.Error, &d.Position)
	return d, err
}

// DeliveryFilter narrows ListDeliveries.
type DeliveryFilter struct {
	Status    DeliveryStatus // "" for all
	MessageID string         // "" for all
}

// ListDeliveries returns up to limit deliveries of endpoint id, newest
// message first, after cursor ("" from the start), and the next page's
// cursor ("" at the end).
//
// It fails with ErrEndpointNotFound or ErrInvalidCursor.
func ListDeliveries(ctx context.Context, q Querier, endpointID string, f DeliveryFilter, cursor string, limit int) ([]Delivery, string, error) {
	if _, err := GetEndpoint(ctx, q, endpointID); err != nil {
		return nil, "", err
	}
	before := int64(-1)
	if cursor != "" {
		p, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || p < 0 || strconv.FormatInt(p, 10) != cursor {
			return nil, "", fmt.Errorf("%w: %q", ErrInvalidCursor, cursor)
		}
		before = p
	}
	// The page's places first, each side by its own index and bound (the
	// endpoint's place, as a scalar, bounds the scan of the feed); then
	// delivery_queue for those places only, so that what it works out
	// for a message not handed yet (whether it waits behind another) is
	// worked out for the page, not for everything the endpoint has not
	// read.
	rows, err := q.Query(ctx, `
		WITH page AS (
			SELECT position FROM (
				(SELECT d.position FROM deliveries d
				 WHERE d.endpoint_id = $1 AND ($2 = '' OR d.status = $2) AND ($3 = '' OR d.message_id = $3)
				   AND ($4 < 0 OR d.position < $4)
				 ORDER BY d.position DESC LIMIT $5)
				UNION ALL
				(SELECT m.position FROM messages m
				 WHERE m.position > (SELECT handed_through FROM endpoints WHERE id = $1)
				   AND ($4 < 0 OR m.position < $4) AND ($2 = '' OR $2 = 'pending') AND ($3 = '' OR m.id = $3)
				   AND m.created_at >= (SELECT created_at FROM endpoints WHERE id = $1)
				   AND (SELECT event_types FROM endpoints WHERE id = $1) && ARRAY['*', m.type]
				   -- A probe per message, by the message, as the dispatcher's
				   -- claim (feedClaim).
				   AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = m.id AND d.endpoint_id || '' = $1 OFFSET 0)
				 ORDER BY m.position DESC LIMIT $5)
			) p ORDER BY position DESC LIMIT $5)
		SELECT `+deliveryColumns+` FROM delivery_queue
		WHERE endpoint_id = $1 AND position = ANY (ARRAY(SELECT position FROM page))
		ORDER BY position DESC`, endpointID, string(f.Status), f.MessageID, before, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list deliveries of %s: %w", endpointID, err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) { return scanDelivery(row) })
	if err != nil {
		return nil, "", fmt.Errorf("list deliveries of %s: %w", endpointID, err)
	}
	next := ""
	if len(ds) > limit {
		ds, next = ds[:limit], strconv.FormatInt(ds[limit-1].Position, 10)
	}
	return ds, next, nil
}

// DeliveriesOfMessage returns where message id stands at every endpoint
// it was given to.
func DeliveriesOfMessage(ctx context.Context, q Querier, messageID string) ([]Delivery, error) {
	rows, err := q.Query(ctx, `SELECT `+deliveryColumns+` FROM delivery_queue WHERE message_id = $1 ORDER BY endpoint_id`, messageID)
	if err != nil {
		return nil, fmt.Errorf("deliveries of %s: %w", messageID, err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) { return scanDelivery(row) })
	if err != nil {
		return nil, fmt.Errorf("deliveries of %s: %w", messageID, err)
	}
	return ds, nil
}

// Attempt is one try at delivering a message to an endpoint.
type Attempt struct {
	Attempt        int
	Trigger        string // scheduled, or manual (a resend or recovery)
	At             time.Time
	Duration       time.Duration
	ResponseStatus *int
	ResponseBody   string // the first 4 KiB
	Error          string
}

// Attempts returns the attempts at delivering message messageID to
// endpoint endpointID, oldest first: the one kept in the delivery row, if
// any (the first, recorded with the row), then those after it.
func Attempts(ctx context.Context, q Querier, endpointID, messageID string) ([]Attempt, error) {
	rows, err := q.Query(ctx, `
		SELECT attempt, trigger, at, duration_ms, response_status, coalesce(response_body, ''), coalesce(error, '')
		FROM (
			SELECT 0::bigint AS id, 1 AS attempt, 'scheduled' AS trigger, first_attempt_at AS at, first_duration_ms AS duration_ms,
				first_response_status AS response_status, first_response_body AS response_body, first_error AS error
			FROM deliveries WHERE endpoint_id = $1 AND message_id = $2 AND first_attempt_at IS NOT NULL
			UNION ALL
			SELECT id, attempt, trigger, at, duration_ms, response_status, response_body, error
			FROM delivery_attempts WHERE endpoint_id = $1 AND message_id = $2) a
		ORDER BY id`, endpointID, messageID)
	if err != nil {
		return nil, fmt.Errorf("attempts of %s at %s: %w", messageID, endpointID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		var (
			a  Attempt
			ms int64
		)
		err := row.Scan(&a.Attempt, &a.Trigger, &a.At, &ms, &a.ResponseStatus, &a.ResponseBody, &a.Error)
		a.Duration = time.Duration(ms) * time.Millisecond
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("attempts of %s at %s: %w", messageID, endpointID, err)
	}
	return out, nil
}

// requeueUpsert gives the messages of $2 (ids) to endpoint $1 as a new
// manual series, a delivery of their own where they had none, and leaves
// those pending already, and those succeeded there unless $3, alone.
const requeueUpsert = `
	INSERT INTO deliveries AS d (endpoint_id, message_id, message_created_at, type, aggregate, sequence, position,
		next_attempt_at, series_trigger)
	SELECT $1, m.id, m.created_at, m.type, m.aggregate_type || '/' || m.aggregate_id, m.sequence, m.position, now(), 'manual'
	FROM messages m WHERE m.id = ANY($2) AND m.position IS NOT NULL
	ON CONFLICT (endpoint_id, message_id) DO UPDATE SET status = 'pending', series_attempts = 0,
		series_trigger = 'manual', next_attempt_at = now(), error = NULL
		WHERE d.status <> 'pending' AND ($3 OR d.status <> 'succeeded')
	RETURNING d.message_id`

// requeueHold puts the objects of the requeued messages $2 back in order
// at endpoint $1: every pending message of theirs waits at 'infinity'
// (releaseHeads then lets the first go), so a resent message goes before
// the later messages of its object pending there. One being sent meanwhile
// gets its next attempt from its record, as before.
const requeueHold = `
	UPDATE deliveries d SET next_attempt_at = 'infinity'
	WHERE d.endpoint_id = $1 AND d.status = 'pending'
	  AND d.aggregate IN (SELECT r.aggregate FROM deliveries r WHERE r.endpoint_id = $1 AND r.message_id = ANY($2))`

// Resend sends message messageID to endpoint endpointID again, as a new
// series of attempts, whether it succeeded there or not; a delivery
// pending already is left to its schedule. It answers whether a new series
// began.
//
// It fails with ErrEndpointNotFound or outbox.ErrNotFound.
func (s *Store) Resend(ctx context.Context, messageID, endpointID string) (bool, error) {
	if _, err := GetEndpoint(ctx, s.pool, endpointID); err != nil {
		return false, err
	}
	m, err := outbox.Get(ctx, s.pool, messageID)
	if err != nil {
		return false, err
	}
	if m.Position == 0 {
		// Committed, not placed yet: the endpoint's dispatcher reads it
		// in a moment, if it is of its types.
		if _, err := outbox.Sequence(ctx, s.pool, 10_000); err != nil {
			return false, err
		}
	}
	n, err := s.requeue(ctx, endpointID, []string{messageID}, true)
	return n > 0, err
}

// requeue runs requeueUpsert and requeueHold in one transaction and
// returns how many messages began a new series.
func (s *Store) requeue(ctx context.Context, endpointID string, ids []string, evenSucceeded bool) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The endpoint's row lock orders requeues of one endpoint, and
		// this with a record's change of the endpoint's health.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM endpoints WHERE id = $1 FOR UPDATE`, endpointID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, requeueUpsert, endpointID, ids, evenSucceeded)
		if err != nil {
			return err
		}
		requeued, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		n = len(requeued)
		if n == 0 {
			return nil
		}
		var aggregates []string
		if err := tx.QueryRow(ctx, `SELECT array_agg(DISTINCT aggregate) FROM deliveries
			WHERE endpoint_id = $1 AND message_id = ANY($2)`, endpointID, requeued).Scan(&aggregates); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, requeueHold, endpointID, requeued); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, releaseHeads, aggregates, endpointID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("requeue %d messages at %s: %w", len(ids), endpointID, err)
	}
	return n, nil
}

// MaxRecover bounds how many messages one recovery sends again (Svix's
// bound).
const MaxRecover = 10_000

// Recover sends endpoint endpointID again every message of its types
// created in [since, until) that did not succeed there, messages from
// before the endpoint existed included, oldest first, at most MaxRecover;
// it returns how many it queued.
//
// It fails with ErrEndpointNotFound.
func (s *Store) Recover(ctx context.Context, endpointID string, since, until time.Time) (int, error) {
	e, err := GetEndpoint(ctx, s.pool, endpointID)
	if err != nil {
		return 0, err
	}
	if _, err := outbox.Sequence(ctx, s.pool, 10_000); err != nil {
		return 0, err
	}
	var filter []string
	if !e.Accepts(AllTypes) {
		filter = e.EventTypes
	}
	rows, err := s.pool.Query(ctx, `
		SELECT m.id FROM messages m
		WHERE m.created_at >= $1 AND m.created_at < $2 AND m.position IS NOT NULL
		  AND ($3::text[] IS NULL OR m.type = ANY($3))
		  AND NOT EXISTS (SELECT 1 FROM delivery_queue d WHERE d.endpoint_id = $4 AND d.message_id = m.id
		                  AND d.status IN ('succeeded', 'pending'))
		ORDER BY m.position LIMIT $5`, since, until, filter, endpointID, MaxRecover)
	if err != nil {
		return 0, fmt.Errorf("recover %s: %w", endpointID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("recover %s: %w", endpointID, err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return s.requeue(ctx, endpointID, ids, false)
}
