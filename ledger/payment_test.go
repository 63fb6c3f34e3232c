package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/statemachine"
)

func fact(kind statemachine.FactKind, object, amount, event string) statemachine.Fact {
	return statemachine.Fact{Kind: kind, ObjectID: object, Amount: decimal.RequireFromString(amount), Currency: "usd",
		EventID: event, At: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
}

// TestPaymentFactsOneRoundTrip: the pipelined lock reads the facts under
// the lock, the one-statement fact insert reports exactly the new facts in
// their order (a fact given twice in one call is new once), and the
// pipelined save writes history only when the state changed.
func TestPaymentFactsOneRoundTrip(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	p, facts, err := ledger.LockPaymentWithFactsTx(ctx, tx, "stripe", "pi_1")
	require.NoError(t, err)
	require.Equal(t, "pi_1", p.ID)
	require.Empty(t, facts)
	capture := fact(statemachine.FactCaptured, "ch_1", "10.00", "evt_1")
	refund := fact(statemachine.FactRefundSucceeded, "re_1", "4.00", "evt_1")
	added, err := ledger.AddFactsTx(ctx, tx, "pi_1", []statemachine.Fact{capture, capture, refund})
	require.NoError(t, err)
	require.Equal(t, []statemachine.Fact{capture, refund}, added)
	p.Summary = statemachine.Fold(added)
	require.NoError(t, ledger.SavePaymentTx(ctx, tx, p, "", "evt_1"))
	require.NoError(t, tx.Commit(ctx))

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	p, facts, err = ledger.LockPaymentWithFactsTx(ctx, tx, "stripe", "pi_1")
	require.NoError(t, err)
	require.Len(t, facts, 2)
	require.Equal(t, statemachine.StatePartiallyRefunded, p.State)
	second := fact(statemachine.FactRefundSucceeded, "re_2", "1.00", "evt_2")
	added, err = ledger.AddFactsTx(ctx, tx, "pi_1", []statemachine.Fact{refund, second})
	require.NoError(t, err)
	require.Equal(t, []statemachine.Fact{second}, added, "a stored fact is a duplicate")
	added, err = ledger.AddFactsTx(ctx, tx, "pi_1", nil)
	require.NoError(t, err)
	require.Empty(t, added)
	p.Summary = statemachine.Fold(append(facts, second))
	require.NoError(t, ledger.SavePaymentTx(ctx, tx, p, statemachine.StatePartiallyRefunded, "evt_2"))
	require.NoError(t, tx.Commit(ctx))

	history, err := ledger.History(ctx, pool, "pi_1")
	require.NoError(t, err)
	require.Len(t, history, 1, "the same state writes no history row")
	require.Equal(t, statemachine.StatePartiallyRefunded, history[0].To)
	stored, err := ledger.Facts(ctx, pool, "pi_1")
	require.NoError(t, err)
	require.Len(t, stored, 3)
	got, err := ledger.GetPayment(ctx, pool, "pi_1")
	require.NoError(t, err)
	require.Equal(t, "5", got.AmountRefunded.String())
}

// TestLockPaymentWithFactsTxWaitsForTheHolder: a second transaction's lock
// waits until the first commits, and then reads the facts it committed.
func TestLockPaymentWithFactsTxWaitsForTheHolder(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, _, err = ledger.LockPaymentWithFactsTx(ctx, first, "stripe", "pi_wait")
	require.NoError(t, err)

	got := make(chan []statemachine.Fact, 1)
	go func() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		defer tx.Rollback(ctx)
		_, facts, err := ledger.LockPaymentWithFactsTx(ctx, tx, "stripe", "pi_wait")
		if err != nil {
			t.Error(err)
		}
		got <- facts
	}()
	select {
	case <-got:
		t.Fatal("the second lock did not wait for the first transaction")
	case <-time.After(100 * time.Millisecond):
	}
	_, err = ledger.AddFactsTx(ctx, first, "pi_wait", []statemachine.Fact{fact(statemachine.FactCaptured, "ch_w", "1.00", "evt_w")})
	require.NoError(t, err)
	require.NoError(t, first.Commit(ctx))
	select {
	case facts := <-got:
		require.Len(t, facts, 1, "facts are read after the lock is granted")
	case <-time.After(5 * time.Second):
		t.Fatal("the second lock was never granted")
	}
}
