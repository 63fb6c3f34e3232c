// Package outbox owns the messages paygate tells the merchant's systems:
// written in the transaction of the change they describe, with an id and a
// per-object sequence derived from that change, given a place in the feed's
// order once committed, read by the feed and by the relays that hand them
// on, and dropped after their retention.
//
// It knows what a message says, never how it leaves: endpoints, attempts
// and brokers belong to the packages that deliver (delivery/), which read
// from here.
package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what reads need: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// AggregateType names the kind of object a message is about; each object
// counts its own messages.
type AggregateType string

// The objects messages are about.
const (
	AggregatePayment           AggregateType = "payment"
	AggregateRefundRequest     AggregateType = "refund_request"
	AggregateReconciliationRun AggregateType = "reconciliation_run"
)

// Channel is notified (pg_notify) by every transaction that writes
// messages, at its commit: relays wake up on it instead of polling.
const Channel = "paygate_messages"

// ErrNotFound is returned for a message id that is not kept (never
// written, or past the retention).
var ErrNotFound = errors.New("message not found")

// Message is one message: its envelope's fields, the object it is about,
// and its exact bytes, which the feed, the webhooks and the broker all
// carry unchanged.
type Message struct {
	ID            string
	Type          string
	CreatedAt     time.Time
	Sequence      int64
	AggregateType AggregateType
	AggregateID   string
	// Position is the message's place in the feed; zero until the
	// sequencer gave it one, some time after its commit.
	Position int64
	Body     []byte
}

// envelope is the JSON of a message, in its field order.
type envelope struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	CreatedAt time.Time       `json:"created_at"`
	Sequence  int64           `json:"sequence"`
	Data      json.RawMessage `json:"data"`
}

// idEncoding is lowercase base32 without padding: ids read well in URLs and
// logs and need no escaping.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// ID is the id of the seq-th message of an object: derived from the change
// itself (which object, which of its changes), never random, so a change
// written again, by a retried transaction or an event applied twice, has
// the same id, and a consumer deduplicating on it sees it once.
func ID(aggregate AggregateType, aggregateID string, seq int64) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d", aggregate, aggregateID, seq))
	return "msg_" + idEncoding.EncodeToString(sum[:16])
}

// New builds the seq-th message of an object, of type typ, committed at
// createdAt, carrying data (encoded as JSON under "data").
func New(aggregate AggregateType, aggregateID string, seq int64, typ string, createdAt time.Time, data any) (Message, error) {
	if seq <= 0 {
		return Message{}, fmt.Errorf("message %s of %s %s: sequence must be positive", typ, aggregate, aggregateID)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return Message{}, fmt.Errorf("encode message %s of %s %s: %w", typ, aggregate, aggregateID, err)
	}
	// PostgreSQL keeps microseconds: the body says what the row says.
	createdAt = createdAt.UTC().Truncate(time.Microsecond)
	m := Message{
		ID: ID(aggregate, aggregateID, seq), Type: typ, CreatedAt: createdAt, Sequence: seq,
		AggregateType: aggregate, AggregateID: aggregateID,
	}
	if m.Body, err = json.Marshal(envelope{ID: m.ID, Type: typ, CreatedAt: createdAt, Sequence: seq, Data: raw}); err != nil {
		return Message{}, fmt.Errorf("encode message %s: %w", m.ID, err)
	}
	return m, nil
}

// WriteTx stores msgs in tx, the transaction of the changes they describe,
// with one statement whatever their number, and notifies Channel at
// commit. Empty msgs does nothing.
func WriteTx(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	c := columnsOf(msgs)
	batch := &pgx.Batch{}
	// In the order given: n, which breaks ties in the feed, follows it, so
	// an object's messages written together keep their sequence order.
	batch.Queue(`
		INSERT INTO messages (id, type, aggregate_type, aggregate_id, sequence, created_at, body)
		SELECT m.id, m.type, m.aggregate_type, m.aggregate_id, m.sequence, m.created_at, m.body
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::timestamptz[], $7::bytea[])
			WITH ORDINALITY AS m(id, type, aggregate_type, aggregate_id, sequence, created_at, body, ord)
		ORDER BY m.ord`, c.ids, c.types, c.aggTypes, c.aggIDs, c.seqs, c.created, c.bodies)
	batch.Queue(`SELECT pg_notify($1, '')`, Channel)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("write %d messages (%s…): %w", len(msgs), msgs[0].ID, err)
	}
	return nil
}

// WritePlacedTx is WriteTx, with the messages placed in the feed by the
// same statement: they take the next positions from message_sequencer,
// whose row lock tx then holds until it ends, so no position is given
// after theirs until they are visible (a reader never passes a place
// before the message at it is there to read). A message written this way
// costs no second write of its row by the sequencer.
//
// It must be tx's last statement: a transaction that waits for a lock
// while holding the sequencer's makes every other writer of placed
// messages wait behind it, and one that waits for a writer waiting on the
// sequencer would deadlock. tx must commit durably
// (synchronous_commit on), as the sequencer does: a place a reader saw is
// never given again.
func WritePlacedTx(ctx context.Context, tx pgx.Tx, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	c := columnsOf(msgs)
	batch := &pgx.Batch{}
	batch.Queue(`SELECT pg_notify($1, '')`, Channel)
	// In the order given, as WriteTx: an object's messages written
	// together keep their sequence order in the feed.
	batch.Queue(`
		WITH placed AS (
			UPDATE message_sequencer SET last_position = last_position + $8 RETURNING last_position - $8 AS before
		)
		INSERT INTO messages (id, type, aggregate_type, aggregate_id, sequence, created_at, body, position)
		SELECT m.id, m.type, m.aggregate_type, m.aggregate_id, m.sequence, m.created_at, m.body, placed.before + m.ord
		FROM placed, unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::timestamptz[], $7::bytea[])
			WITH ORDINALITY AS m(id, type, aggregate_type, aggregate_id, sequence, created_at, body, ord)
		ORDER BY m.ord`, c.ids, c.types, c.aggTypes, c.aggIDs, c.seqs, c.created, c.bodies, int64(len(msgs)))
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("write %d placed messages (%s…): %w", len(msgs), msgs[0].ID, err)
	}
	return nil
}

// columns are msgs as the arrays an insert unnests.
type columns struct {
	ids, types, aggTypes, aggIDs []string
	seqs                         []int64
	created                      []time.Time
	bodies                       [][]byte
}

func columnsOf(msgs []Message) columns {
	n := len(msgs)
	c := columns{
		ids: make([]string, n), types: make([]string, n), aggTypes: make([]string, n), aggIDs: make([]string, n),
		seqs: make([]int64, n), created: make([]time.Time, n), bodies: make([][]byte, n),
	}
	for i, m := range msgs {
		c.ids[i], c.types[i], c.aggTypes[i], c.aggIDs[i] = m.ID, m.Type, string(m.AggregateType), m.AggregateID
		c.seqs[i], c.created[i], c.bodies[i] = m.Sequence, m.CreatedAt, m.Body
	}
	return c
}

const messageColumns = `id, type, created_at, sequence, aggregate_type, aggregate_id, coalesce(position, 0), body`

func scanMessage(row pgx.Row) (Message, error) {
	var m Message
	err := row.Scan(&m.ID, &m.Type, &m.CreatedAt, &m.Sequence, &m.AggregateType, &m.AggregateID, &m.Position, &m.Body)
	m.CreatedAt = m.CreatedAt.UTC()
	return m, err
}

// Get returns the message id.
//
// It fails with ErrNotFound.
func Get(ctx context.Context, q Querier, id string) (Message, error) {
	if !strings.HasPrefix(id, "msg_") {
		return Message{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	m, err := scanMessage(q.QueryRow(ctx, `SELECT `+messageColumns+` FROM messages WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Message{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Message{}, fmt.Errorf("get message %s: %w", id, err)
	}
	return m, nil
}

// OfAggregate returns the kept messages of one object, in sequence order.
func OfAggregate(ctx context.Context, q Querier, aggregate AggregateType, id string) ([]Message, error) {
	rows, err := q.Query(ctx, `SELECT `+messageColumns+` FROM messages
		WHERE aggregate_type = $1 AND aggregate_id = $2 ORDER BY sequence`, aggregate, id)
	if err != nil {
		return nil, fmt.Errorf("messages of %s %s: %w", aggregate, id, err)
	}
	msgs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Message, error) { return scanMessage(row) })
	if err != nil {
		return nil, fmt.Errorf("messages of %s %s: %w", aggregate, id, err)
	}
	return msgs, nil
}

// Bodies returns the bytes of the messages ids, created at created (their
// primary key: each is read from its own partition), by id; a message not
// kept is missing from the map.
func Bodies(ctx context.Context, q Querier, ids []string, created []time.Time) (map[string][]byte, error) {
	rows, err := q.Query(ctx, `SELECT m.id, m.body FROM messages m
		JOIN unnest($1::text[], $2::timestamptz[]) AS k(id, created_at) ON m.id = k.id AND m.created_at = k.created_at`,
		ids, created)
	if err != nil {
		return nil, fmt.Errorf("read %d messages: %w", len(ids), err)
	}
	defer rows.Close()
	out := make(map[string][]byte, len(ids))
	for rows.Next() {
		var (
			id   string
			body []byte
		)
		if err := rows.Scan(&id, &body); err != nil {
			return nil, fmt.Errorf("read %d messages: %w", len(ids), err)
		}
		out[id] = body
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %d messages: %w", len(ids), err)
	}
	return out, nil
}
