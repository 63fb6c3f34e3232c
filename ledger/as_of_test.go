package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/ledger"
)

// bruteForceAsOf sums every entry of the transactions posted at or before
// asOf, straight from the entries, in Go.
func bruteForceAsOf(t require.TestingT, ctx context.Context, pool *pgxpool.Pool, asOf time.Time) map[string]string {
	rows, err := pool.Query(ctx, `
		SELECT e.account, e.currency, e.debit::text, e.credit::text, t.posted_at
		FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id`)
	require.NoError(t, err)
	defer rows.Close()
	type key struct{ account, currency string }
	sums := map[key][2]decimal.Decimal{}
	for rows.Next() {
		var account, currency, debit, credit string
		var posted time.Time
		require.NoError(t, rows.Scan(&account, &currency, &debit, &credit, &posted))
		if posted.After(asOf) {
			continue
		}
		s := sums[key{account, currency}]
		s[0], s[1] = s[0].Add(decimal.RequireFromString(debit)), s[1].Add(decimal.RequireFromString(credit))
		sums[key{account, currency}] = s
	}
	require.NoError(t, rows.Err())
	out := map[string]string{}
	for k, s := range sums {
		out[k.account+" "+k.currency] = ledger.Format(s[0], k.currency) + " " + ledger.Format(s[1], k.currency)
	}
	return out
}

func asMap(tb ledger.TrialBalanceReport) map[string]string {
	out := map[string]string{}
	for _, a := range tb.Accounts {
		out[string(a.Account)+" "+a.Currency] = ledger.Format(a.Debits, a.Currency) + " " + ledger.Format(a.Credits, a.Currency)
	}
	return out
}

// TestTrialBalanceAsOfEqualsBruteForce: at random instants (midnights and
// the microseconds around them, and the last minutes included), the trial
// balance as of the instant equals the sum of the entries posted by then,
// whether the snapshot is missing, fresh, stale (postings dated before
// cuts already built, a close that moves postings), or rebuilt.
func TestTrialBalanceAsOfEqualsBruteForce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	start := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC) // ended months: the snapshot may cover them
	const days = 70
	n := 0
	closedThrough := time.Time{}
	// Instants a little before now: on both sides of the minute a posting
	// may be written after its posted_at without marking the snapshot.
	recent := []time.Duration{0, time.Second, 30 * time.Second, 59 * time.Second, 61 * time.Second,
		90 * time.Second, 2 * time.Minute, 5 * time.Minute}

	rapid.Check(t, func(rt *rapid.T) {
		// Post a few transactions at random instants: the ledger grows
		// from case to case, with postings dated anywhere in the span,
		// so most of them land in days the snapshot already covers.
		// Some cases post only about now: a posting months late marks the
		// snapshot, which hides whether the recent cuts are right.
		recentOnly := rapid.Bool().Draw(rt, "recent_only")
		for range rapid.IntRange(1, 8).Draw(rt, "postings") {
			n++
			at := start.Add(time.Duration(rapid.Int64Range(0, days*24*3600-1).Draw(rt, "at_s")) * time.Second)
			when := rapid.IntRange(0, 3).Draw(rt, "when")
			if recentOnly {
				when = 1
			}
			switch when {
			case 0:
				at = at.Truncate(24 * time.Hour)
			case 1:
				// About now: within the lag a posting may take unmarked,
				// or over it (rapid draws small numbers most often, so the
				// lateness is picked from both sides of the lag).
				at = time.Now().Add(-rapid.SampledFrom(recent).Draw(rt, "late_by"))
			}
			currency := rapid.SampledFrom([]string{"usd", "jpy", "kwd"}).Draw(rt, "currency")
			minor := rapid.Int64Range(1, 1_000_000).Draw(rt, "minor")
			amount, _ := ledger.FromMinor(minor, currency)
			ref := fmt.Sprintf("t%d", n)
			var txn ledger.Transaction
			switch rapid.IntRange(0, 2).Draw(rt, "kind") {
			case 0:
				txn = ledger.NewCapture("capture:"+ref, "pi_"+ref, "evt", currency, amount, at)
			case 1:
				txn = ledger.NewRefund("refund:"+ref, "pi_"+ref, "evt", currency, amount, at)
			default:
				txn = ledger.NewFee("fee:"+ref, "pi_"+ref, "evt", currency, amount, at)
			}
			require.NoError(rt, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := ledger.PostTx(ctx, tx, txn)
				return err
			}))
		}
		switch rapid.IntRange(0, 5).Draw(rt, "then") {
		case 0, 1:
			_, err := ledger.RefreshBalanceSnapshots(ctx, pool, nil)
			require.NoError(rt, err)
		case 2:
			_, err := ledger.RebuildBalanceSnapshots(ctx, pool)
			require.NoError(rt, err)
		case 3:
			// Close the next month now and then: what occurred in it
			// from here on is posted at the next month's first instant.
			if closedThrough.IsZero() {
				closedThrough = start
			}
			if closedThrough.Before(start.AddDate(0, 0, days-31)) && rapid.Bool().Draw(rt, "close") {
				require.NoError(rt, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, _, err := ledger.ClosePeriodTx(ctx, tx, ledger.PeriodOf(closedThrough), "finance:test", ledger.ExportSettings{}, time.Now())
					return err
				}))
				closedThrough = closedThrough.AddDate(0, 1, 0)
			}
		}
		for range 4 {
			day := start.AddDate(0, 0, rapid.IntRange(-1, days+1).Draw(rt, "day"))
			asOf := day.Add(time.Duration(rapid.Int64Range(0, 24*3600-1).Draw(rt, "second")) * time.Second)
			switch rapid.IntRange(0, 4).Draw(rt, "edge") {
			case 0:
				asOf = day
			case 1:
				asOf = day.Add(-time.Microsecond)
			case 2:
				asOf = day.Add(time.Microsecond)
			case 3:
				asOf = time.Now().Add(-rapid.SampledFrom(recent).Draw(rt, "as_of_ago"))
			}
			got, err := ledger.TrialBalanceAsOf(ctx, pool, asOf)
			require.NoError(rt, err)
			require.Equal(rt, bruteForceAsOf(rt, ctx, pool, asOf), asMap(got), "as of %s", asOf.Format(time.RFC3339Nano))
			for _, c := range got.Currencies {
				require.True(rt, c.Balanced, "as of %s: %s", asOf, c.Currency)
			}
		}
	})
	var built int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT cut) FROM ledger_balance_snapshots`).Scan(&built))
	require.Positive(t, built, "the snapshot was built and used")
}

// TestTrialBalanceAsOfReadsTheSnapshot: once built, the sum as of a day
// comes from the snapshot plus the day's entries, not from every entry:
// a snapshot row altered by hand shows in the answer (and a rebuild puts
// it right). Without it, the property above would hold of a full scan too.
func TestTrialBalanceAsOfReadsTheSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	day1 := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("10.00"), day1))
	b.mustPost(t, ledger.NewCapture("capture:ch_2", "pi_2", "evt_2", "usd", d("5.00"), day1.AddDate(0, 0, 2)))
	before := time.Now()
	res, err := ledger.RefreshBalanceSnapshots(b.ctx, b.pool, nil)
	require.NoError(t, err)
	require.Positive(t, res.Built)
	require.WithinDuration(t, before.Add(-time.Minute), res.Through, 10*time.Second, "built up to a minute ago")
	var midnights, latest int
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT count(DISTINCT cut) FILTER (WHERE cut = date_trunc('day', cut, 'UTC')),
		       count(DISTINCT cut) FILTER (WHERE cut <> date_trunc('day', cut, 'UTC'))
		FROM ledger_balance_snapshots`).Scan(&midnights, &latest))
	require.Positive(t, midnights, "every midnight since the first posting")
	require.LessOrEqual(t, latest, 1, "and one cut within a day at most")

	_, err = b.pool.Exec(b.ctx, `UPDATE ledger_balance_snapshots SET debits = debits + 1000
		WHERE cut = '2026-09-03T00:00:00Z' AND account = 'provider_balance'`)
	require.NoError(t, err)
	tb, err := ledger.TrialBalanceAsOf(b.ctx, b.pool, day1.AddDate(0, 0, 2))
	require.NoError(t, err)
	require.Equal(t, "1015.00", ledger.Format(tb.Accounts[0].Debits, "usd"), "read from the cut at 2026-09-03 00:00")

	// A late posting dated 2026-09-01 marks it: the cuts from there on are
	// not used until made again.
	b.mustPost(t, ledger.NewFee("fee:ch_1", "pi_1", "evt_3", "usd", d("0.50"), day1))
	tb, err = ledger.TrialBalanceAsOf(b.ctx, b.pool, day1.AddDate(0, 0, 2))
	require.NoError(t, err)
	require.Equal(t, "15.00", ledger.Format(tb.Accounts[0].Debits, "usd"), "a marked day's snapshot is not read")
	require.Equal(t, "0.50", ledger.Format(tb.Accounts[0].Credits, "usd"))

	_, err = ledger.RefreshBalanceSnapshots(b.ctx, b.pool, nil)
	require.NoError(t, err)
	require.Zero(t, b.count(t, "ledger_balance_stale"), "the refresh used the marks up")
	tb, err = ledger.TrialBalanceAsOf(b.ctx, b.pool, day1.AddDate(0, 0, 2))
	require.NoError(t, err)
	require.Equal(t, "15.00", ledger.Format(tb.Accounts[0].Debits, "usd"), "the cuts from the mark on were built again")

	// A posting written as it occurs marks nothing: the newest cut, a
	// minute old, stays good, and the trial balance as of now reads it
	// plus the minute since.
	b.mustPost(t, ledger.NewCapture("capture:ch_now", "pi_now", "evt_4", "usd", d("1.00"), time.Now()))
	require.Zero(t, b.count(t, "ledger_balance_stale"))
	_, err = b.pool.Exec(b.ctx, `UPDATE ledger_balance_snapshots SET debits = debits + 1000
		WHERE cut = (SELECT max(cut) FROM ledger_balance_snapshots) AND account = 'provider_balance'`)
	require.NoError(t, err)
	tb, err = ledger.TrialBalanceAsOf(b.ctx, b.pool, time.Now())
	require.NoError(t, err)
	require.Equal(t, "1016.00", ledger.Format(tb.Accounts[0].Debits, "usd"), "read from the newest cut")
}

// TestRefreshWaitsForOlderTransactions: a transaction that began writing
// before the refresh may still post in a day the refresh would build; the
// refresh does not build while it runs.
func TestRefreshWaitsForOlderTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("10.00"), time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)))

	older, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer older.Rollback(b.ctx) //nolint:errcheck
	_, err = older.Exec(b.ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)

	_, err = ledger.RefreshBalanceSnapshots(b.ctx, b.pool, &ledger.SnapshotOpts{Wait: 300 * time.Millisecond})
	require.ErrorIs(t, err, ledger.ErrSnapshotBusy)
	require.Zero(t, b.count(t, "ledger_balance_snapshots"))

	require.NoError(t, older.Rollback(b.ctx))
	res, err := ledger.RefreshBalanceSnapshots(b.ctx, b.pool, nil)
	require.NoError(t, err)
	require.Positive(t, res.Built)
}

// TestLatePostingAfterARefresh: the newest cut is a minute behind its
// refresh; a posting written after the refresh and dated before the cut
// (more than a minute late) marks the snapshot, one dated after it does
// not, and the trial balance as of now is exact either way.
func TestLatePostingAfterARefresh(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("10.00"), time.Now().Add(-time.Hour)))
	_, err := ledger.RefreshBalanceSnapshots(b.ctx, b.pool, nil)
	require.NoError(t, err)
	require.Zero(t, b.count(t, "ledger_balance_stale"))

	exact := func() {
		t.Helper()
		for _, asOf := range []time.Time{time.Now(), time.Now().Add(-90 * time.Second), time.Now().Add(-30 * time.Second)} {
			got, err := ledger.TrialBalanceAsOf(b.ctx, b.pool, asOf)
			require.NoError(t, err)
			require.Equal(t, bruteForceAsOf(t, b.ctx, b.pool, asOf), asMap(got), "as of %s", asOf)
		}
	}
	b.mustPost(t, ledger.NewCapture("capture:ch_2", "pi_2", "evt_2", "usd", d("2.00"), time.Now().Add(-10*time.Second)))
	require.Zero(t, b.count(t, "ledger_balance_stale"), "ten seconds late: after the cut, nothing to mark")
	exact()
	b.mustPost(t, ledger.NewCapture("capture:ch_3", "pi_3", "evt_3", "usd", d("3.00"), time.Now().Add(-2*time.Minute)))
	require.Equal(t, 1, b.count(t, "ledger_balance_stale"), "two minutes late: before the cut, marked")
	exact()
	_, err = ledger.RefreshBalanceSnapshots(b.ctx, b.pool, nil)
	require.NoError(t, err)
	got, err := ledger.TrialBalanceAsOf(b.ctx, b.pool, time.Now())
	require.NoError(t, err)
	require.Equal(t, "15.00", ledger.Format(got.Accounts[0].Debits, "usd"))
}

// TestTrialBalanceNowEqualsTheSum: the trial balance of everything, read
// from the snapshot, is the sum of every entry, before a refresh, after
// one, and after late and future-dated postings since.
func TestTrialBalanceNowEqualsTheSum(t *testing.T) {
	t.Parallel()
	b := setup(t)
	same := func(what string) {
		t.Helper()
		want, err := ledger.TrialBalance(b.ctx, b.pool)
		require.NoError(t, err)
		got, err := ledger.TrialBalanceNow(b.ctx, b.pool)
		require.NoError(t, err)
		require.Equal(t, asMap(want), asMap(got), what)
	}
	day := time.Date(2026, 9, 1, 10, 0, 0, 0, time.UTC)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("10.00"), day))
	b.mustPost(t, ledger.NewCapture("capture:ch_2", "pi_2", "evt_2", "eur", d("5.00"), day.AddDate(0, 0, 2)))
	same("no snapshot yet")
	_, err := ledger.RefreshBalanceSnapshots(b.ctx, b.pool, nil)
	require.NoError(t, err)
	same("after a refresh")
	b.mustPost(t, ledger.NewFee("fee:ch_1", "pi_1", "evt_3", "usd", d("0.50"), day))
	b.mustPost(t, ledger.NewCapture("capture:ch_3", "pi_3", "evt_4", "usd", d("7.00"), time.Now()))
	b.mustPost(t, ledger.NewCapture("capture:ch_4", "pi_4", "evt_5", "usd", d("3.00"), time.Now().Add(time.Hour)))
	same("a late posting, one as it occurs, one dated ahead")
	_, err = ledger.RefreshBalanceSnapshots(b.ctx, b.pool, nil)
	require.NoError(t, err)
	same("after another refresh")
}
