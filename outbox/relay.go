package outbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A relay hands messages on elsewhere (a broker) in
// feed order, from a place of its own kept here: it locks its place, reads
// after it, hands on what it read and advances, all in one transaction, so
// a crash before the commit hands the same messages on again and none is
// skipped.

// ErrRelayBusy is LockRelayTx's error when another transaction holds the
// relay: one relay of a name runs at a time, across instances.
var ErrRelayBusy = errors.New("relay busy")

// LockRelayTx locks the place of relay name until tx ends and returns it;
// a relay never seen before starts at the beginning of the feed.
//
// It fails with ErrRelayBusy.
func LockRelayTx(ctx context.Context, tx pgx.Tx, name string) (int64, error) {
	if _, err := tx.Exec(ctx, `INSERT INTO message_relays (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, name); err != nil {
		return 0, fmt.Errorf("lock relay %s: %w", name, err)
	}
	var pos int64
	err := tx.QueryRow(ctx, `SELECT position FROM message_relays WHERE name = $1 FOR UPDATE SKIP LOCKED`, name).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrRelayBusy
	}
	if err != nil {
		return 0, fmt.Errorf("lock relay %s: %w", name, err)
	}
	return pos, nil
}

// AdvanceRelayTx moves relay name, locked by LockRelayTx in tx, to position.
func AdvanceRelayTx(ctx context.Context, tx pgx.Tx, name string, position int64) error {
	if _, err := tx.Exec(ctx, `UPDATE message_relays SET position = $2, updated_at = now() WHERE name = $1`, name, position); err != nil {
		return fmt.Errorf("advance relay %s: %w", name, err)
	}
	return nil
}

// RelayLag is how far relay name is behind the feed: the messages placed
// after its position, and the age in seconds of the oldest of them.
func RelayLag(ctx context.Context, q Querier, name string) (count int64, oldestSeconds float64, err error) {
	err = q.QueryRow(ctx, `
		SELECT count(*), coalesce(extract(epoch FROM now() - min(m.created_at)), 0)::float8
		FROM messages m
		WHERE m.position > coalesce((SELECT position FROM message_relays WHERE name = $1), 0)`, name).
		Scan(&count, &oldestSeconds)
	if err != nil {
		return 0, 0, fmt.Errorf("lag of relay %s: %w", name, err)
	}
	return count, oldestSeconds, nil
}
