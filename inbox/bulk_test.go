package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/testdb"
)

// stored returns a fresh database holding the events ids, all received.
func stored(t *testing.T, ids ...string) *pgxpool.Pool {
	t.Helper()
	pool := testdb.New(t)
	events := make([]inbox.Event, len(ids))
	for i, id := range ids {
		events[i] = ev(id)
	}
	require.NoError(t, pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		_, err := inbox.InsertManyTx(context.Background(), tx, events)
		return err
	}))
	return pool
}

func key(id string) inbox.Key { return inbox.Key{Provider: "stripe", EventID: id} }

// lockNowait tries to lock the event id from a connection of its own,
// without waiting, and reports whether some transaction holds it.
func lockNowait(t *testing.T, pool *pgxpool.Pool, id string) (held bool) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT 1 FROM inbox_events WHERE provider = 'stripe' AND event_id = $1 FOR UPDATE NOWAIT`, id)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return true
	}
	require.NoError(t, err)
	return false
}

// TestLockManyTx: the stored events come back by key, locked until the
// transaction ends; absent keys are left out, repeated keys are fine, and
// events not asked for stay unlocked.
func TestLockManyTx(t *testing.T) {
	t.Parallel()
	pool := stored(t, "evt_a", "evt_b", "evt_c")
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	got, err := inbox.LockManyTx(ctx, tx, []inbox.Key{key("evt_c"), key("evt_missing"), key("evt_a"), key("evt_c"),
		{Provider: "other", EventID: "evt_b"}})
	require.NoError(t, err)
	require.Len(t, got, 2)
	for _, id := range []string{"evt_a", "evt_c"} {
		e, ok := got[key(id)]
		require.True(t, ok, id)
		require.Equal(t, id, e.EventID)
		require.Equal(t, ev(id).Payload, e.Payload)
		require.Equal(t, inbox.StatusReceived, e.Status)
	}

	require.True(t, lockNowait(t, pool, "evt_a"))
	require.True(t, lockNowait(t, pool, "evt_c"))
	require.False(t, lockNowait(t, pool, "evt_b"), "an event not asked for is not locked")
	require.NoError(t, tx.Rollback(ctx))
	require.False(t, lockNowait(t, pool, "evt_a"), "the locks end with the transaction")

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	got, err = inbox.LockManyTx(ctx, tx, nil)
	require.NoError(t, err)
	require.Empty(t, got)

	_, err = inbox.LockTx(ctx, tx, "stripe", "evt_missing")
	require.ErrorIs(t, err, inbox.ErrNotFound)
	e, err := inbox.LockTx(ctx, tx, "stripe", "evt_b")
	require.NoError(t, err)
	require.Equal(t, "evt_b", e.EventID)
	require.True(t, lockNowait(t, pool, "evt_b"))
}

// TestSetStatusManyTx: each row gets exactly what SetStatusTx would give
// it: the last error kept when none is given, an attempt counted only when
// asked, processed_at stamped for processed and ignored only, and a key
// given twice ending as two SetStatusTx calls in order would leave it.
func TestSetStatusManyTx(t *testing.T) {
	t.Parallel()
	pool := stored(t, "evt_a", "evt_b", "evt_c", "evt_d", "evt_e")
	ctx := context.Background()
	require.NoError(t, inbox.SetStatusTx(ctx, pool, "stripe", "evt_a", inbox.StatusPoison, "old error", true))

	updates := []inbox.StatusUpdate{
		{Key: key("evt_a"), Status: inbox.StatusProcessed, Attempt: true},
		{Key: key("evt_b"), Status: inbox.StatusPoison, LastError: "boom", Attempt: true},
		{Key: key("evt_c"), Status: inbox.StatusIgnored},
		{Key: key("evt_d"), Status: inbox.StatusProcessed, LastError: "first", Attempt: true},
		{Key: key("evt_d"), Status: inbox.StatusReceived, Attempt: true},
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return inbox.SetStatusManyTx(ctx, tx, updates)
	}))

	type want struct {
		status    inbox.Status
		lastError string
		attempts  int
		stamped   bool
	}
	for id, w := range map[string]want{
		"evt_a": {inbox.StatusProcessed, "old error", 2, true},
		"evt_b": {inbox.StatusPoison, "boom", 1, false},
		"evt_c": {inbox.StatusIgnored, "", 0, true},
		"evt_d": {inbox.StatusReceived, "first", 2, true},
		"evt_e": {inbox.StatusReceived, "", 0, false},
	} {
		e, err := inbox.Get(ctx, pool, "stripe", id)
		require.NoError(t, err)
		require.Equal(t, w, want{e.Status, e.LastError, e.Attempts, e.ProcessedAt != nil}, id)
	}

	// The same updates one SetStatusTx at a time, on a fresh copy of the
	// rows, leave the same rows.
	bulk := snapshot(t, pool)
	seq := stored(t, "evt_a", "evt_b", "evt_c", "evt_d", "evt_e")
	require.NoError(t, inbox.SetStatusTx(ctx, seq, "stripe", "evt_a", inbox.StatusPoison, "old error", true))
	require.NoError(t, pgx.BeginFunc(ctx, seq, func(tx pgx.Tx) error {
		for _, u := range updates {
			if err := inbox.SetStatusTx(ctx, tx, u.Provider, u.EventID, u.Status, u.LastError, u.Attempt); err != nil {
				return err
			}
		}
		return nil
	}))
	require.Equal(t, snapshot(t, seq), bulk)
}

// snapshot lists each event's status, last error, attempts and whether
// processed_at is set, ignoring when.
func snapshot(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT format('%s %s %s %s %s', event_id, status, coalesce(last_error, '-'), attempts, processed_at IS NOT NULL)
		FROM inbox_events ORDER BY event_id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// TestSetStatusManyTxMissingKey: a key no event has fails with
// ErrNotFound naming it; nothing at all is asked of an empty call.
func TestSetStatusManyTxMissingKey(t *testing.T) {
	t.Parallel()
	pool := stored(t, "evt_a")
	ctx := context.Background()

	err := inbox.SetStatusManyTx(ctx, pool, []inbox.StatusUpdate{
		{Key: key("evt_a"), Status: inbox.StatusProcessed},
		{Key: key("evt_nope"), Status: inbox.StatusProcessed},
	})
	require.ErrorIs(t, err, inbox.ErrNotFound)
	require.ErrorContains(t, err, "stripe/evt_nope")

	err = inbox.SetStatusTx(ctx, pool, "stripe", "evt_nope", inbox.StatusProcessed, "", true)
	require.ErrorIs(t, err, inbox.ErrNotFound)

	require.NoError(t, inbox.SetStatusManyTx(ctx, pool, nil))
}

// TestSetStatusManyTxLocated: updates that carry their events' received_at
// (as LockManyTx gave it) leave the same rows as updates by key alone, and
// one whose received_at names no row fails with ErrNotFound, as a missing
// key does.
func TestSetStatusManyTxLocated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ids := []string{"evt_a", "evt_b", "evt_c"}
	byKey, located := stored(t, ids...), stored(t, ids...)
	updates := []inbox.StatusUpdate{
		{Key: key("evt_a"), Status: inbox.StatusProcessed, Attempt: true},
		{Key: key("evt_b"), Status: inbox.StatusPoison, LastError: "boom", Attempt: true},
		{Key: key("evt_b"), Status: inbox.StatusIgnored},
	}
	require.NoError(t, inbox.SetStatusManyTx(ctx, byKey, updates))
	require.NoError(t, pgx.BeginFunc(ctx, located, func(tx pgx.Tx) error {
		events, err := inbox.LockManyTx(ctx, tx, []inbox.Key{key("evt_a"), key("evt_b")})
		if err != nil {
			return err
		}
		withRows := make([]inbox.StatusUpdate, len(updates))
		for i, u := range updates {
			u.ReceivedAt = events[u.Key].ReceivedAt
			require.False(t, u.ReceivedAt.IsZero())
			withRows[i] = u
		}
		return inbox.SetStatusManyTx(ctx, tx, withRows)
	}))
	require.Equal(t, snapshot(t, byKey), snapshot(t, located))

	e, err := inbox.Get(ctx, located, "stripe", "evt_c")
	require.NoError(t, err)
	err = inbox.SetStatusManyTx(ctx, located, []inbox.StatusUpdate{
		{Key: key("evt_c"), Status: inbox.StatusProcessed, ReceivedAt: e.ReceivedAt.Add(time.Microsecond)},
	})
	require.ErrorIs(t, err, inbox.ErrNotFound)
	require.ErrorContains(t, err, "stripe/evt_c")
}

// TestLockManyTxLocksInKeyOrder: LockManyTx takes its locks in (provider,
// event_id) order whatever the order it is given, so two appliers locking
// overlapping batches wait for each other instead of deadlocking. A
// transaction holds evt_b; another asks for evt_b and evt_a, in that
// order: it must hold evt_a while it waits for evt_b.
func TestLockManyTxLocksInKeyOrder(t *testing.T) {
	t.Parallel()
	pool := stored(t, "evt_a", "evt_b")
	ctx := context.Background()
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck
	_, err = inbox.LockManyTx(ctx, holder, []inbox.Key{key("evt_b")})
	require.NoError(t, err)

	waiter, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer waiter.Rollback(ctx) //nolint:errcheck
	done := make(chan error, 1)
	go func() {
		_, err := inbox.LockManyTx(ctx, waiter, []inbox.Key{key("evt_b"), key("evt_a")})
		done <- err
	}()
	require.Eventually(t, func() bool { return lockNowait(t, pool, "evt_a") },
		5*time.Second, 20*time.Millisecond, "the waiter locked evt_a before waiting for evt_b")

	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-done)
}
