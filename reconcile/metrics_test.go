package reconcile_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/reconcile"
)

// finishedRun writes a run of provider's day (or batch) with items of the
// given statuses, finished as status, as the runner does: items while it
// runs, then the one move to its end. It returns the items' ids.
func finishedRun(t *testing.T, pool *pgxpool.Pool, provider, day string, batch int64, status string, items ...string) []int64 {
	t.Helper()
	ctx := context.Background()
	var date, bat any
	if batch != 0 {
		bat = batch
	} else {
		date = day
	}
	var run int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO reconciliation_runs (provider, date, batch, trigger)
		VALUES ($1, $2, $3, 'cli') RETURNING id`, provider, date, bat).Scan(&run))
	ids := make([]int64, len(items))
	for i, st := range items {
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO reconciliation_items
			(run_id, position, status, type, reporting_category, currency, provider_amount)
			VALUES ($1, $2, $3, 'charge', 'charge', 'usd', 10) RETURNING id`, run, i, st).Scan(&ids[i]))
	}
	report := any(`{}`)
	if status == "failed" {
		report = nil
	}
	_, err := pool.Exec(ctx, `UPDATE reconciliation_runs SET status = $2, finished_at = now(), report = $3 WHERE id = $1`,
		run, status, report)
	require.NoError(t, err)
	return ids
}

// TestCollector: open exceptions count those of each day's or batch's
// latest completed run that nobody resolved, per provider; a run again
// supersedes the earlier; a failed run is no success.
func TestCollector(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	c := reconcile.NewCollector(pool)

	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(""), "paygate_reconciliation_open_exceptions"),
		"no run, no series")

	day1 := finishedRun(t, pool, "stripe", "2026-03-01", 0, "completed", "matched", "amount_mismatch", "missing_in_ledger", "fee_posted")
	_, err := pool.Exec(ctx, `INSERT INTO reconciliation_resolutions (item_id, resolution, note, resolved_by)
		VALUES ($1, 'provider_error', 'Stripe says so', 'finance@example.com')`, day1[2])
	require.NoError(t, err)
	finishedRun(t, pool, "stripe", "2026-03-02", 0, "completed", "missing_at_provider", "currency_mismatch")
	finishedRun(t, pool, "stripe", "2026-03-02", 0, "completed", "matched") // run again: all matched now
	finishedRun(t, pool, "stripe", "2026-03-03", 0, "failed")
	finishedRun(t, pool, "adyen", "", 7, "completed", "amount_mismatch", "matched")

	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP paygate_reconciliation_open_exceptions Exceptions (amount or currency mismatch, a movement missing on one side) of each day's or batch's latest completed run that finance has not resolved, by provider.
# TYPE paygate_reconciliation_open_exceptions gauge
paygate_reconciliation_open_exceptions{provider="adyen"} 1
paygate_reconciliation_open_exceptions{provider="stripe"} 1
`), "paygate_reconciliation_open_exceptions"))

	var stripeDay, adyenBatch time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT max(finished_at) FROM reconciliation_runs WHERE provider = 'stripe' AND status = 'completed'),
		(SELECT max(finished_at) FROM reconciliation_runs WHERE provider = 'adyen')`).Scan(&stripeDay, &adyenBatch))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP paygate_reconciliation_last_success_timestamp_seconds When the last reconciliation run that completed finished, by provider and scope (day: a UTC day's balance transactions; batch: a settlement batch's report), as a Unix time.
# TYPE paygate_reconciliation_last_success_timestamp_seconds gauge
paygate_reconciliation_last_success_timestamp_seconds{provider="adyen",scope="batch"} `+unix(adyenBatch)+`
paygate_reconciliation_last_success_timestamp_seconds{provider="stripe",scope="day"} `+unix(stripeDay)+`
`), "paygate_reconciliation_last_success_timestamp_seconds"))
}

// unix is t as the collector reports it: Unix seconds to the microsecond.
func unix(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMicro())/1e6, 'f', -1, 64)
}
