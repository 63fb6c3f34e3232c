package outbox_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/outbox"
)

// partitionName is the name the migration gives the partition of month.
func partitionName(month time.Time) string {
	return fmt.Sprintf("messages_%04d_%02d", month.Year(), int(month.Month()))
}

// createPastPartition makes the partition of a month that has begun, as
// the owner: paygate only ever creates months ahead, so messages dated in
// the past have nowhere else to go but DEFAULT.
func createPastPartition(t *testing.T, owner *pgxpool.Pool, month time.Time) string {
	t.Helper()
	name := partitionName(month)
	_, err := owner.Exec(t.Context(), fmt.Sprintf(`CREATE TABLE %s PARTITION OF messages FOR VALUES FROM ('%s') TO ('%s')`,
		name, month.Format(time.RFC3339), month.AddDate(0, 1, 0).Format(time.RFC3339)))
	require.NoError(t, err)
	return name
}

// writeAt writes one message of payment id dated at, as the app does.
func writeAt(t *testing.T, app *pgxpool.Pool, id string, at time.Time) outbox.Message {
	t.Helper()
	m, err := outbox.New(outbox.AggregatePayment, id, 1, "payment.succeeded", at, map[string]any{"payment": map[string]any{"id": id}})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(t.Context(), app, func(tx pgx.Tx) error {
		return outbox.WriteTx(t.Context(), tx, []outbox.Message{m})
	}))
	return m
}

// deliver records where m stands at endpoint ep_1.
func deliver(t *testing.T, owner *pgxpool.Pool, m outbox.Message, status string) {
	t.Helper()
	_, err := owner.Exec(t.Context(), `
		INSERT INTO deliveries (endpoint_id, message_id, message_created_at, type, aggregate, sequence, position,
		                        status, next_attempt_at)
		VALUES ('ep_1', $1, $2, $3, $4, $5, 1, $6, now())`,
		m.ID, m.CreatedAt, m.Type, string(m.AggregateType)+":"+m.AggregateID, m.Sequence, status)
	require.NoError(t, err)
}

func partitionExists(t *testing.T, q *pgxpool.Pool, name string) bool {
	t.Helper()
	var exists bool
	require.NoError(t, q.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists))
	return exists
}

// TestRetention: a month whose messages are all older than keepFrom is
// dropped whole, by the app role, with its deliveries; a month one of
// whose messages is still pending somewhere is kept and reported with the
// pending count until that delivery settles; a month reaching keepFrom, the
// current one and the months ahead are never touched.
func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	owner, url := testdb.NewWithURL(t)
	app := testdb.AppRole(t, url)

	now := time.Now().UTC()
	current := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	old, held, straddling := current.AddDate(0, -3, 0), current.AddDate(0, -2, 0), current.AddDate(0, -1, 0)
	for _, m := range []time.Time{old, held, straddling} {
		createPastPartition(t, owner, m)
	}
	_, err := owner.Exec(ctx, `INSERT INTO endpoints (id, url, event_types, secret)
		VALUES ('ep_1', 'https://merchant.example/hooks', '{*}', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')`)
	require.NoError(t, err)

	oldMsgs := []outbox.Message{
		writeAt(t, app, "pi_old_1", old.Add(36*time.Hour)),
		writeAt(t, app, "pi_old_2", old.Add(48*time.Hour)),
		writeAt(t, app, "pi_old_3", old.AddDate(0, 1, 0).Add(-time.Microsecond)),
	}
	deliver(t, owner, oldMsgs[0], "succeeded")
	deliver(t, owner, oldMsgs[1], "failed")
	heldMsgs := []outbox.Message{
		writeAt(t, app, "pi_held_1", held.Add(time.Hour)),
		writeAt(t, app, "pi_held_2", held.Add(2*time.Hour)),
	}
	deliver(t, owner, heldMsgs[0], "succeeded")
	deliver(t, owner, heldMsgs[1], "pending")
	early := writeAt(t, app, "pi_straddling", straddling.Add(time.Hour))
	recent := writeAt(t, app, "pi_now", now)

	var inDefault int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM messages_default`).Scan(&inDefault))
	require.Zero(t, inDefault, "every message went to its month's partition")

	// Messages not placed in the feed yet, or placed but not handed on
	// by a relay (a broker's publisher, down), keep their month.
	dropped, err := outbox.DropExpired(ctx, app, held)
	require.NoError(t, err)
	require.Equal(t, []outbox.Dropped{{Partition: partitionName(old), Pending: 3}}, dropped, "three unplaced")
	_, err = outbox.Sequence(ctx, app, 100)
	require.NoError(t, err)
	_, err = owner.Exec(ctx, `INSERT INTO message_relays (name, position) VALUES ('nats', 0)`)
	require.NoError(t, err)
	dropped, err = outbox.DropExpired(ctx, app, held)
	require.NoError(t, err)
	require.Equal(t, []outbox.Dropped{{Partition: partitionName(old), Pending: 3}}, dropped, "three the relay has not handed on")
	_, err = owner.Exec(ctx, `UPDATE message_relays SET position = (SELECT max(position) FROM messages)`)
	require.NoError(t, err)

	// Keeping from the first instant of held: old's messages are all
	// older, to the last microsecond of the month.
	dropped, err = outbox.DropExpired(ctx, app, held)
	require.NoError(t, err)
	require.Equal(t, []outbox.Dropped{{Partition: partitionName(old), Messages: 3}}, dropped)
	require.False(t, partitionExists(t, owner, partitionName(old)))
	for _, m := range oldMsgs {
		_, err := outbox.Get(ctx, app, m.ID)
		require.ErrorIs(t, err, outbox.ErrNotFound, "dropped with its month")
	}
	var deliveries int
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE message_created_at < $1`, held).Scan(&deliveries))
	require.Zero(t, deliveries, "the month's deliveries go with it")

	// Keeping from inside straddling: held is past the retention but one
	// of its messages has not left; straddling reaches keepFrom.
	dropped, err = outbox.DropExpired(ctx, app, straddling.Add(10*24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []outbox.Dropped{{Partition: partitionName(held), Pending: 1}}, dropped)
	for _, m := range append(heldMsgs, early, recent) {
		got, err := outbox.Get(ctx, app, m.ID)
		require.NoError(t, err, "kept: %s", m.AggregateID)
		require.Equal(t, m.Body, got.Body)
	}

	// Nothing left to keep from now on: the month that reached the old
	// keepFrom goes, the held one stays held, the current one stays.
	dropped, err = outbox.DropExpired(ctx, app, now)
	require.NoError(t, err)
	require.Equal(t, []outbox.Dropped{
		{Partition: partitionName(held), Pending: 1},
		{Partition: partitionName(straddling), Messages: 1},
	}, dropped)
	require.True(t, partitionExists(t, owner, partitionName(held)))
	require.True(t, partitionExists(t, owner, partitionName(current)))

	// Once the pending delivery settles, its month goes too.
	_, err = owner.Exec(ctx, `UPDATE deliveries SET status = 'failed' WHERE message_id = $1`, heldMsgs[1].ID)
	require.NoError(t, err)
	dropped, err = outbox.DropExpired(ctx, app, now)
	require.NoError(t, err)
	require.Equal(t, []outbox.Dropped{{Partition: partitionName(held), Messages: 2}}, dropped)
	require.False(t, partitionExists(t, owner, partitionName(held)))
	require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM deliveries`).Scan(&deliveries))
	require.Zero(t, deliveries)

	// The current month and the months ahead are never dropped, and the
	// database itself refuses, whoever asks.
	got, err := outbox.Get(ctx, app, recent.ID)
	require.NoError(t, err)
	require.Equal(t, recent.Body, got.Body)
	for i := range 4 {
		require.True(t, partitionExists(t, owner, partitionName(current.AddDate(0, i, 0))), "month +%d", i)
	}
	_, err = app.Exec(ctx, `SELECT paygate_message_partition_drop($1, now())`, partitionName(current))
	require.ErrorContains(t, err, "holds messages created on or after")
	_, err = owner.Exec(ctx, `SELECT paygate_message_partition_drop('messages_default', now() + interval '100 years')`)
	require.ErrorContains(t, err, "default partition is never dropped")
	_, err = app.Exec(ctx, `DELETE FROM messages WHERE id = $1`, recent.ID)
	require.ErrorContains(t, err, "permission denied", "messages leave by whole months only")
}

// TestRetentionKeepsWhatAnEndpointHasNotRead: a message of an endpoint's
// types placed after its place in the feed is pending there, even with no
// delivery row yet (a disabled endpoint reads nothing), and keeps its
// month; once the endpoint's place is past it, the month goes.
func TestRetentionKeepsWhatAnEndpointHasNotRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	owner, url := testdb.NewWithURL(t)
	app := testdb.AppRole(t, url)
	now := time.Now().UTC()
	old := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, -2, 0)
	createPastPartition(t, owner, old)
	_, err := owner.Exec(ctx, `INSERT INTO endpoints (id, url, event_types, secret, status, created_at)
		VALUES ('ep_1', 'https://merchant.example/hooks', '{payment.refunded}', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
		        'disabled', $1)`, old.AddDate(0, -1, 0))
	require.NoError(t, err)
	writeAt(t, app, "pi_other_type", old.Add(time.Hour))
	refunded, err := outbox.New(outbox.AggregatePayment, "pi_refunded", 2, "payment.refunded", old.Add(2*time.Hour),
		map[string]any{"payment": map[string]any{"id": "pi_refunded"}})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		return outbox.WriteTx(ctx, tx, []outbox.Message{refunded})
	}))
	_, err = outbox.Sequence(ctx, app, 100)
	require.NoError(t, err)

	dropped, err := outbox.DropExpired(ctx, app, now)
	require.NoError(t, err)
	require.Equal(t, []outbox.Dropped{{Partition: partitionName(old), Pending: 1}}, dropped, "the refund, not read yet")

	_, err = owner.Exec(ctx, `UPDATE endpoints SET handed_through = (SELECT last_position FROM message_sequencer)`)
	require.NoError(t, err)
	dropped, err = outbox.DropExpired(ctx, app, now)
	require.NoError(t, err)
	require.Equal(t, []outbox.Dropped{{Partition: partitionName(old), Messages: 2}}, dropped)
}
