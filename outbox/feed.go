package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The feed's order is a position given to each message after its commit.
//
// A serial number taken at insert is not a commit order: a transaction that
// took 10 can commit after one that took 11, and a reader that passed 11
// would never see 10. So positions are given by Sequence, one caller at a
// time (message_sequencer's row lock), to the messages its statement can
// see, which are committed; a message committed later is not seen and gets
// a later position from a later call. Positions therefore only grow in the
// order readers can see them: a reader at position p has seen every message
// that will ever hold a position up to p, and one committed late is placed
// after p, never behind it. Within one call, messages are placed in insert
// order, so an object's messages, inserted one after the other under its
// lock, keep their sequence order.

// ErrInvalidCursor is returned for a cursor the feed did not hand out.
var ErrInvalidCursor = errors.New("invalid cursor")

// Cursor is a place in the feed, as the feed hands it out: the position of
// the last message read.
func Cursor(position int64) string { return "pos_" + strconv.FormatInt(position, 10) }

// ParseCursor reads a cursor Cursor made; "" is the beginning.
//
// It fails with ErrInvalidCursor.
func ParseCursor(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	digits, ok := strings.CutPrefix(s, "pos_")
	p, err := strconv.ParseInt(digits, 10, 64)
	if !ok || err != nil || p < 0 || strconv.FormatInt(p, 10) != digits {
		return 0, fmt.Errorf("%w: %q", ErrInvalidCursor, s)
	}
	return p, nil
}

// Sequence gives positions to up to limit committed messages that have
// none, in insert order, and returns how many it placed. When another
// caller is placing messages at that moment it returns 0 at once: that
// caller places them.
func Sequence(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, limit int) (int, error) {
	var placed int
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// After ByIndexSQL: the unplaced messages are read by their own
		// index whatever the statistics were when the caller's connection
		// made the plan it keeps. One made on those of an empty feed read
		// every message at every step of the relay, holding the sequencer's
		// lock, which every transaction that places messages waits for
		// (TestSequenceReadsTheUnplacedOnly).
		var last int64
		b := &pgx.Batch{}
		b.Queue(ByIndexSQL)
		b.Queue(`SELECT last_position FROM message_sequencer FOR UPDATE SKIP LOCKED`).QueryRow(func(row pgx.Row) error {
			return row.Scan(&last)
		})
		err := tx.SendBatch(ctx, b).Close()
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		// A statement of its own, after the lock: its snapshot sees every
		// message committed before the previous caller let go. The rows
		// are then updated by their primary key from a list: a join the
		// planner could get wrong (on empty statistics it scanned a
		// partition per row) is not needed.
		rows, err := tx.Query(ctx, `SELECT id, created_at FROM messages WHERE position IS NULL ORDER BY n LIMIT $1`, limit)
		if err != nil {
			return err
		}
		var (
			ids     []string
			created []time.Time
		)
		for rows.Next() {
			var (
				id string
				at time.Time
			)
			if err := rows.Scan(&id, &at); err != nil {
				rows.Close()
				return err
			}
			ids, created = append(ids, id), append(created, at)
		}
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		positions := make([]int64, len(ids))
		for i := range ids {
			positions[i] = last + int64(i) + 1
		}
		if _, err := tx.Exec(ctx, `
			UPDATE messages m SET position = u.position
			FROM unnest($1::text[], $2::timestamptz[], $3::bigint[]) AS u(id, created_at, position)
			WHERE m.id = u.id AND m.created_at = u.created_at`, ids, created, positions); err != nil {
			return err
		}
		placed = len(ids)
		_, err = tx.Exec(ctx, `UPDATE message_sequencer SET last_position = $1`, positions[len(positions)-1])
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sequence messages: %w", err)
	}
	return placed, nil
}

// Read returns up to limit messages placed after position after, in feed
// order, of the given types (all when types is empty).
//
// It reads by the feed's position index after ByIndexSQL, in one
// transaction (a batch is one, or db's own): a connection keeps the plan
// of a statement it runs often, and one made on the statistics of an
// empty feed sorts a sequential scan of every message, which the NATS
// publisher and a feed reader then ran at every read as the feed grew
// (TestReadGoesByPosition).
func Read(ctx context.Context, db Batcher, after int64, limit int, types []string) ([]Message, error) {
	var filter []string
	if len(types) > 0 {
		filter = types
	}
	var msgs []Message
	err := QueryByIndex(ctx, db, func(rows pgx.Rows) error {
		var err error
		msgs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Message, error) { return scanMessage(row) })
		return err
	}, `SELECT `+messageColumns+` FROM messages
		WHERE position > $1 AND position IS NOT NULL AND ($3::text[] IS NULL OR type = ANY($3))
		ORDER BY position LIMIT $2`, after, limit, filter)
	if err != nil {
		return nil, fmt.Errorf("read messages after %d: %w", after, err)
	}
	return msgs, nil
}

// Batcher sends a batch of statements: a pool, a connection or a
// transaction.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// ByIndexSQL, first in a transaction, has its statements planned as if
// scans of whole tables were not there, and without JIT, for the rest of
// it: a reader of the feed or of an endpoint's deliveries then goes by an
// index whatever the statistics were when its connection made the plan it
// keeps. Without JIT because the scans left (of one-row tables) are costed
// as disabled, which puts a plan past jit_above_cost, and compiling it
// took half a second a read.
const ByIndexSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)`

// QueryByIndex runs sql with args after ByIndexSQL, in one batch (one
// transaction, or db's own), and hands its rows to read; with read nil the
// statement's result is discarded.
func QueryByIndex(ctx context.Context, db Batcher, read func(pgx.Rows) error, sql string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(ByIndexSQL)
	q := b.Queue(sql, args...)
	if read != nil {
		q.Query(read)
	}
	return db.SendBatch(ctx, b).Close()
}

// Unplaced counts the committed messages the sequencer has not placed yet,
// and the age in seconds of the oldest (0 when none).
func Unplaced(ctx context.Context, q Querier) (count int64, oldestSeconds float64, err error) {
	err = q.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
		FROM messages WHERE position IS NULL`).Scan(&count, &oldestSeconds)
	if err != nil {
		return 0, 0, fmt.Errorf("count unplaced messages: %w", err)
	}
	return count, oldestSeconds, nil
}
