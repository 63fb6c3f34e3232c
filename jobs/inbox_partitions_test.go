package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
)

// TestInboxPartitionsWorker: the upkeep keeps months ready ahead; with no
// retention it drops nothing, however old the events; with one, it drops
// the months past it, and the ledger is never pruned.
func TestInboxPartitionsWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewAppRole(t)

	events := []inbox.Event{
		{Provider: "stripe", EventID: "evt_kept_1", Type: "charge.succeeded", Payload: []byte(`{}`)},
		{Provider: "stripe", EventID: "evt_kept_2", Type: "charge.succeeded", Payload: []byte(`{}`)},
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := inbox.InsertManyTx(ctx, tx, events); err != nil {
			return err
		}
		if err := inbox.SetStatusManyTx(ctx, tx, []inbox.StatusUpdate{
			{Key: inbox.Key{Provider: "stripe", EventID: "evt_kept_1"}, Status: inbox.StatusProcessed},
			{Key: inbox.Key{Provider: "stripe", EventID: "evt_kept_2"}, Status: inbox.StatusProcessed},
		}); err != nil {
			return err
		}
		_, err := ledger.PostTx(ctx, tx, ledger.NewCapture("stripe:charge:ch_kept:capture", "pi_kept", "evt_kept_1",
			"usd", decimal.RequireFromString("12.34"), time.Now()))
		return err
	}))
	ledgerRows := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_transactions) + (SELECT count(*) FROM ledger_entries)`).Scan(&n))
		return n
	}
	before := ledgerRows()
	work := func(w *jobs.InboxPartitionsWorker) {
		require.NoError(t, w.Work(ctx, &river.Job[jobs.InboxPartitionsArgs]{}))
	}

	// Years later, with payloads kept forever: nothing goes.
	later := time.Now().AddDate(3, 0, 0)
	work(&jobs.InboxPartitionsWorker{Pool: pool, Now: func() time.Time { return later }})
	_, err := inbox.Get(ctx, pool, "stripe", "evt_kept_1")
	require.NoError(t, err, "forever keeps every payload")
	parts, err := inbox.Partitions(ctx, pool)
	require.NoError(t, err)
	require.Contains(t, partitionNames(parts), inbox.PartitionName(time.Date(later.Year(), later.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, 1, 0)),
		"next month's partition is ready")

	// With a 30-day retention, three years on, this month is long past it.
	work(&jobs.InboxPartitionsWorker{Pool: pool, Retention: 30 * 24 * time.Hour, Now: func() time.Time { return later }})
	_, err = inbox.Get(ctx, pool, "stripe", "evt_kept_1")
	require.ErrorIs(t, err, inbox.ErrNotFound, "the payload is past the retention")
	counts, err := inbox.Counts(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, counts[inbox.StatusProcessed])
	require.Equal(t, before, ledgerRows(), "the ledger is never pruned")
	var payment int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE payment_id = 'pi_kept'`).Scan(&payment))
	require.Equal(t, 1, payment)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		news, err := inbox.InsertManyTx(ctx, tx, events)
		require.Equal(t, []bool{false, false}, news, "a retry of a dropped event is still a duplicate")
		return err
	}))
}

func partitionNames(parts []inbox.Partition) []string {
	names := make([]string, len(parts))
	for i, p := range parts {
		names[i] = p.Name
	}
	return names
}
