package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/ledger"
)

// TestObjectsThatCanNeverBeAppliedArePoisonAtOnce: a signed event with a
// sane envelope whose data.object is dated outside 2000–2100, or whose keys
// another reader would read differently, is poison on its first attempt,
// not retried, and dates nothing in the ledger.
func TestObjectsThatCanNeverBeAppliedArePoisonAtOnce(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	ctx := context.Background()
	sim := stripesim.New(stripesim.Config{})
	refund := func(id string, created any) map[string]any {
		return map[string]any{"id": id, "object": "refund", "amount": 500, "currency": "usd", "charge": "ch_h1",
			"payment_intent": "pi_h1", "status": "succeeded", "created": created}
	}
	cases := map[string]stripesim.Event{
		"created in 5138":     sim.Emit(stripesim.EventRefundUpdated, refund("re_far", int64(99_999_999_999))),
		"created before 2000": sim.Emit(stripesim.EventRefundUpdated, refund("re_old", int64(-5_000_000_000))),
		"a key that matches id only in another case": sim.Emit(stripesim.EventRefundUpdated, func() map[string]any {
			r := refund("re_case", int64(1_700_000_000))
			r["ID"] = "re_other"
			return r
		}()),
		"payout created at int64 max": sim.Emit(stripesim.EventPayoutPaid, map[string]any{
			"id": "po_max", "object": "payout", "amount": 100, "currency": "usd", "created": int64(9_223_372_036_854_775_807)}),
	}
	for name, ev := range cases {
		w.Apply(t, ev)
		require.Equal(t, "poison", w.Status(t, ev.ID), name)
		require.Equal(t, 1, w.Count(t, `SELECT attempts FROM inbox_events WHERE event_id = $1`, ev.ID), "%s: poison at once, never retried", name)
	}
	for _, ref := range []string{"stripe:refund:re_far", "stripe:refund:re_old", "stripe:refund:re_case", "stripe:refund:re_other", "stripe:payout:po_max"} {
		_, err := ledger.TransactionByRef(ctx, w.Pool, ref)
		require.ErrorIs(t, err, ledger.ErrNotFound, ref)
	}
	require.Zero(t, w.Count(t, `SELECT count(*) FROM ledger_transactions WHERE occurred_at < '2000-01-01' OR occurred_at >= '2100-01-01'`))
}
