package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/stripesim"
)

// TestBatchDefersAPaymentAnotherBatchHolds: while another batch of this
// process holds a payment, a batch commits its other events at once and
// leaves that payment's events received, without waiting on the
// database's lock; once the payment is let go they are applied, and the
// books are those of applying every event one at a time.
func TestBatchDefersAPaymentAnotherBatchHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := stripesim.New(stripesim.Config{Seed: 11})
	held := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd"})
	sim.Refund(held, 6000)
	heldEvents := sim.Events()
	sim.Pay(stripesim.PayOpts{Amount: 1500, Currency: "jpy"})
	events := sim.Events()
	free := events[len(heldEvents):]

	alone := newApplyWorld(t)
	for _, k := range alone.store(t, events) {
		require.NoError(t, alone.applier.apply(ctx, alone.rc, []inbox.Key{k})[0])
	}

	w := newApplyWorld(t)
	keys := w.store(t, events)
	other := w.applier.claims.begin() // another batch, still open
	taken, _ := other.take("stripe/" + held.ID)
	require.True(t, taken)

	done := make(chan []error, 1)
	go func() { done <- w.applier.apply(ctx, w.rc, keys) }()
	status := func(id string) string {
		var s string
		require.NoError(t, w.pool.QueryRow(ctx, `SELECT status FROM inbox_events WHERE event_id = $1`, id).Scan(&s))
		return s
	}
	require.Eventually(t, func() bool {
		for _, e := range free {
			if status(e.ID) != "processed" {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "the other payment's events commit without waiting")
	for _, e := range heldEvents {
		require.Equal(t, "received", status(e.ID), "%s waits for the payment", e.ID)
	}
	select {
	case <-done:
		t.Fatal("apply returned while the payment was still held")
	case <-time.After(50 * time.Millisecond):
	}

	other.release()
	for i, err := range <-done {
		require.NoError(t, err, keys[i].EventID)
	}
	require.Equal(t, alone.books(t), w.books(t))
}
