package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
)

// TestClosedPeriodsStayClosedInAnyOrder: the events of random lifecycles
// arrive shuffled and duplicated, and finance closes months in the middle
// of the stream. Whatever the order and wherever the close falls:
//
//   - every movement keeps the date the money moved (occurred_at) and the
//     books end as in creation order with no close (invariants 3 and 8);
//   - a closed month's trial balance, stored at the close and recomputed
//     from the ledger, never changes afterwards (invariant 12);
//   - the first open month absorbs every late movement: a movement posted
//     after the close that occurred in a closed month is posted at the
//     first instant of the first open month, every other one when it
//     occurred.
func TestClosedPeriodsStayClosedInAnyOrder(t *testing.T) {
	t.Parallel()
	canonical := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) { c.EventWorkers = 1 }})

	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		sim := stripesim.New(settledInUSD())
		handles, refs := script(rt, sim)
		events := sim.Events()
		var payments []string
		for _, p := range handles {
			payments = append(payments, p.ID)
		}
		canonical.Apply(rt, events...)
		want := orderFree(canonical.Snapshot(rt, payments, refs...), sim)

		// Closes are for ever: each case gets a ledger of its own.
		w := worldtest.New(t, nil)
		defer func() {
			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = w.Jobs.River.Stop(stopCtx)
			w.Pool.Close()
		}()

		var delivery []stripesim.Event
		for _, e := range events {
			for range rapid.IntRange(1, 2).Draw(rt, "copies") {
				delivery = append(delivery, e)
			}
		}
		delivery = rapid.Permutation(delivery).Draw(rt, "order")
		cut := rapid.IntRange(0, len(delivery)).Draw(rt, "cut")
		w.Apply(rt, delivery[:cut]...)

		// Close every month from the simulation's first through one of
		// those its events fall in, in order.
		first := ledger.PeriodOf(settledInUSD().Now)
		lastEvent := ledger.PeriodOf(sim.Now())
		months := 1
		for p := first; p.Start.Before(lastEvent.Start); p = p.Next() {
			months++
		}
		through := rapid.IntRange(1, months).Draw(rt, "months_closed")
		postedBefore := map[string]bool{}
		rows, err := w.Pool.Query(ctx, `SELECT ref FROM ledger_transactions`)
		require.NoError(rt, err)
		before, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(rt, err)
		for _, ref := range before {
			postedBefore[ref] = true
		}
		var closed []ledger.ClosedPeriod
		for p, i := first, 0; i < through; p, i = p.Next(), i+1 {
			require.NoError(rt, pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
				c, created, err := ledger.ClosePeriodTx(ctx, tx, p, "finance:property", ledger.ExportSettings{}, time.Now())
				require.True(rt, created)
				closed = append(closed, c)
				return err
			}))
		}
		boundary := closed[len(closed)-1].End()

		w.Apply(rt, delivery[cut:]...)

		got := orderFree(w.Snapshot(rt, payments, refs...), sim)
		for _, tb := range got.TrialBalance {
			require.Contains(rt, tb, "balanced=true")
		}
		// The canonical ledger holds every case's movements; this one, this
		// case's only.
		want.TrialBalance, got.TrialBalance = nil, nil
		require.Equal(rt, want, got, "the same movements, dated when the money moved, as in creation order without a close")
		require.Zero(rt, w.Count(rt, `SELECT count(*) FROM inbox_events WHERE status = 'poison'`))

		for _, c := range closed {
			stored, err := ledger.GetClosedPeriod(ctx, w.Pool, c.Period)
			require.NoError(rt, err)
			want := string(ledger.TrialBalanceDigestInput(c.Period, c.TrialBalance))
			require.Equal(rt, want, string(ledger.TrialBalanceDigestInput(c.Period, stored.TrialBalance)), "%s as stored", c.Period)
			require.Equal(rt, c.Digest, stored.Digest)
			now, err := ledger.TrialBalanceAsOf(ctx, w.Pool, c.End().Add(-time.Microsecond))
			require.NoError(rt, err)
			require.Equal(rt, want, string(ledger.TrialBalanceDigestInput(c.Period, now)),
				"%s recomputed from the ledger after every late movement", c.Period)
		}

		rows, err = w.Pool.Query(ctx, `SELECT ref, occurred_at, posted_at FROM ledger_transactions`)
		require.NoError(rt, err)
		type posting struct {
			Ref              string
			Occurred, Posted time.Time
		}
		all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[posting])
		require.NoError(rt, err)
		for _, p := range all {
			switch {
			case postedBefore[p.Ref]:
				require.True(rt, p.Posted.Equal(p.Occurred), "%s posted before the close: at %s, occurred %s", p.Ref, p.Posted, p.Occurred)
			case p.Occurred.Before(boundary):
				require.True(rt, p.Posted.Equal(boundary), "%s occurred %s in a closed month: posted %s, not at %s", p.Ref, p.Occurred, p.Posted, boundary)
			default:
				require.True(rt, p.Posted.Equal(p.Occurred), "%s occurred %s in an open month: posted %s", p.Ref, p.Occurred, p.Posted)
			}
		}
	})
}
