package jobs_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/ledger"
)

func payment(t *testing.T, w *worldtest.World, id string) ledger.Payment {
	t.Helper()
	p, err := ledger.GetPayment(context.Background(), w.Pool, id)
	require.NoError(t, err)
	return p
}

func byType(events []stripesim.Event, typ stripesim.EventType) []stripesim.Event {
	var out []stripesim.Event
	for _, e := range events {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func without(events []stripesim.Event, types ...stripesim.EventType) []stripesim.Event {
	var out []stripesim.Event
next:
	for _, e := range events {
		for _, typ := range types {
			if e.Type == typ {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

func TestSucceededPaymentPostsOneCapture(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd", Email: "a@example.com"})
	w.Apply(t, sim.Events()...)

	got := payment(t, w, p.ID)
	require.Equal(t, "succeeded", string(got.State))
	require.Equal(t, "360.00", ledger.Format(got.AmountCaptured, "usd"))
	txs, err := ledger.TransactionsForPayment(context.Background(), w.Pool, p.ID)
	require.NoError(t, err)
	require.Len(t, txs, 1, "payment_intent.succeeded and charge.succeeded are one money movement")
	require.Equal(t, ledger.KindCapture, txs[0].Kind)
	for _, e := range sim.Events() {
		require.Equal(t, "processed", w.Status(t, e.ID))
	}
}

// TestFullRefundBeforeSuccess: the refund's reports arrive before any report
// of the charge's success; the payment ends refunded with captured = refunded
// = amount, and the late success does not move it back.
func TestFullRefundBeforeSuccess(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "eur"})
	successes := sim.Events()
	sim.Refund(p, 0)
	refunds := sim.Events()[len(successes):]

	w.Apply(t, refunds...)
	require.Equal(t, "refunded", string(payment(t, w, p.ID).State))
	w.Apply(t, successes...)

	got := payment(t, w, p.ID)
	require.Equal(t, "refunded", string(got.State))
	require.Equal(t, "50.00", ledger.Format(got.Amount, "eur"))
	require.Equal(t, "50.00", ledger.Format(got.AmountCaptured, "eur"))
	require.Equal(t, "50.00", ledger.Format(got.AmountRefunded, "eur"))
}

func TestPaymentFailedAfterSucceededStaysSucceeded(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 1200, Currency: "usd", FailFirst: 2})
	events := sim.Events()
	failures := append(byType(events, stripesim.EventType("charge.failed")), byType(events, stripesim.EventType("payment_intent.payment_failed"))...)
	require.NotEmpty(t, failures)

	w.Apply(t, without(events, "charge.failed", "payment_intent.payment_failed")...)
	require.Equal(t, "succeeded", string(payment(t, w, p.ID).State))
	w.Apply(t, failures...)
	require.Equal(t, "succeeded", string(payment(t, w, p.ID).State))
}

func TestDisputeClosedLostBeforeCreated(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 9900, Currency: "usd"})
	d := sim.Dispute(p, 0)
	sim.CloseDispute(d, false)
	events := sim.Events()

	// The closing report first, then everything else in reverse.
	closed := byType(events, "charge.dispute.closed")
	require.Len(t, closed, 1)
	w.Apply(t, closed...)
	rest := without(events, "charge.dispute.closed")
	for i := len(rest) - 1; i >= 0; i-- {
		w.Apply(t, rest[i])
	}
	got := payment(t, w, p.ID)
	require.Equal(t, "dispute_lost", string(got.State))
	require.Equal(t, "99.00", ledger.Format(got.AmountDisputed, "usd"))
}

func TestRefundFailureReversesWhateverTheOrder(t *testing.T) {
	t.Parallel()
	for _, failedFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("failed first %t", failedFirst), func(t *testing.T) {
			t.Parallel()
			w := worldtest.New(t, nil)
			sim := stripesim.New(stripesim.Config{})
			p := sim.Pay(stripesim.PayOpts{Amount: 3000, Currency: "usd"})
			r := sim.Refund(p, 1000)
			before := len(sim.Events())
			sim.FailRefund(r.ID)
			events := sim.Events()
			if failedFirst {
				w.Apply(t, events[before:]...)
				w.Apply(t, events[:before]...)
			} else {
				w.Apply(t, events...)
			}
			got := payment(t, w, p.ID)
			require.Equal(t, "succeeded", string(got.State))
			require.Equal(t, "0.00", ledger.Format(got.AmountRefunded, "usd"))
			txs, err := ledger.TransactionsForPayment(context.Background(), w.Pool, p.ID)
			require.NoError(t, err)
			kinds := map[ledger.Kind]int{}
			for _, tx := range txs {
				kinds[tx.Kind]++
			}
			require.Equal(t, map[ledger.Kind]int{ledger.KindCapture: 1, ledger.KindRefund: 1, ledger.KindRefundReversal: 1}, kinds)
		})
	}
}

func TestZeroAndThreeDecimalCurrenciesConvertExactly(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	jpy := sim.Pay(stripesim.PayOpts{Amount: 123456, Currency: "jpy"})
	kwd := sim.Pay(stripesim.PayOpts{Amount: 1234, Currency: "kwd"})
	sim.Refund(kwd, 1)
	w.Apply(t, sim.Events()...)

	require.Equal(t, "123456", ledger.Format(payment(t, w, jpy.ID).AmountCaptured, "jpy"))
	got := payment(t, w, kwd.ID)
	require.Equal(t, "1.234", ledger.Format(got.AmountCaptured, "kwd"))
	require.Equal(t, "0.001", ledger.Format(got.AmountRefunded, "kwd"))
	require.Equal(t, "partially_refunded", string(got.State))
}

// TestFiftyConcurrentEventsForOnePayment: all of one payment's reports,
// copied and delivered at once, give one capture and each refund once.
func TestFiftyConcurrentEventsForOnePayment(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 100000, Currency: "usd"})
	var refunds []string
	for range 4 {
		refunds = append(refunds, sim.Refund(p, 5000).ID)
	}
	events := sim.Events()
	var batch []stripesim.Event
	for len(batch) < 50 {
		batch = append(batch, events...)
	}
	batch = batch[:50]

	var wg sync.WaitGroup
	for _, e := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Ingest(t, e)
		}()
	}
	wg.Wait()
	w.Settle(t)

	txs, err := ledger.TransactionsForPayment(context.Background(), w.Pool, p.ID)
	require.NoError(t, err)
	kinds := map[ledger.Kind]int{}
	for _, tx := range txs {
		kinds[tx.Kind]++
	}
	require.Equal(t, map[ledger.Kind]int{ledger.KindCapture: 1, ledger.KindRefund: 4}, kinds)
	got := payment(t, w, p.ID)
	require.Equal(t, "partially_refunded", string(got.State))
	require.Equal(t, "200.00", ledger.Format(got.AmountRefunded, "usd"))
	snap := w.Snapshot(t, []string{p.ID})
	require.Equal(t, []string{"usd debits=1200.00 credits=1200.00 balanced=true"}, snap.TrialBalance)
}

func TestImpossibleEventsArePoisonAtOnce(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 1000, Currency: "usd"})
	w.Apply(t, sim.Events()...)

	unknown := sim.Emit("charge.succeeded", map[string]any{
		"id": "ch_unknown_cur", "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "zzz",
	})
	negative := sim.Emit("refund.updated", map[string]any{
		"id": "re_negative", "object": "refund", "amount": -5, "currency": "usd", "status": "succeeded", "payment_intent": p.ID,
	})
	otherCurrency := sim.Emit("refund.updated", map[string]any{
		"id": "re_eur", "object": "refund", "amount": 5, "currency": "eur", "status": "succeeded", "payment_intent": p.ID,
	})
	missingAmount := sim.Emit("charge.refund.updated", map[string]any{
		"id": "re_noamount", "object": "refund", "currency": "usd", "status": "succeeded", "payment_intent": p.ID,
	})
	ignored := sim.Ignored()
	w.Apply(t, unknown, negative, otherCurrency, missingAmount, ignored)

	for _, e := range []stripesim.Event{unknown, negative, otherCurrency, missingAmount} {
		require.Equal(t, "poison", w.Status(t, e.ID), e.ID)
		var attempts int
		var lastError string
		require.NoError(t, w.Pool.QueryRow(context.Background(),
			`SELECT attempts, last_error FROM inbox_events WHERE event_id = $1`, e.ID).Scan(&attempts, &lastError))
		require.Equal(t, 1, attempts, "a permanent failure is not retried")
		require.NotEmpty(t, lastError)
	}
	require.Equal(t, "ignored", w.Status(t, ignored.ID))
	got := payment(t, w, p.ID)
	require.Equal(t, "0.00", ledger.Format(got.AmountRefunded, "usd"), "nothing of a poison event is applied")
	require.Equal(t, 1, w.Count(t, `SELECT count(*) FROM ledger_transactions`))
}

func TestTransientFailuresRetryThenPoison(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	sim.Pay(stripesim.PayOpts{Amount: 1000, Currency: "usd"})
	events := sim.Events()
	// Make every attempt fail with a database error that a retry could fix.
	_, err := w.Pool.Exec(context.Background(), `
		CREATE FUNCTION fail_facts() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'simulated outage'; END $$;
		CREATE TRIGGER fail_facts BEFORE INSERT ON payment_facts FOR EACH ROW EXECUTE FUNCTION fail_facts();`)
	require.NoError(t, err)
	w.Ingest(t, events[0])

	deadline := time.Now().Add(90 * time.Second)
	for w.Status(t, events[0].ID) != "poison" {
		// River backs off attempt^4 seconds; pull retries forward.
		_, err := w.Pool.Exec(context.Background(), `UPDATE river_job SET scheduled_at = now() WHERE state = 'retryable'`)
		require.NoError(t, err)
		require.False(t, time.Now().After(deadline), "event never became poison")
		time.Sleep(50 * time.Millisecond)
	}
	var attempts int
	var lastError string
	require.NoError(t, w.Pool.QueryRow(context.Background(),
		`SELECT attempts, last_error FROM inbox_events WHERE event_id = $1`, events[0].ID).Scan(&attempts, &lastError))
	require.Equal(t, 3, attempts, "tried PAYGATE_PROCESS_MAX_ATTEMPTS times")
	require.Contains(t, lastError, "simulated outage")
}

// TestRefConflictIsPoison: a second report of one refund with another
// amount would rewrite a posted movement; it is refused and parked for ops,
// and the first posting stands.
func TestRefConflictIsPoison(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "usd"})
	r := sim.Refund(p, 1000)
	w.Apply(t, sim.Events()...)

	conflicting := sim.Emit("refund.updated", map[string]any{
		"id": r.ID, "object": "refund", "amount": 2000, "currency": "usd", "status": "succeeded",
		"payment_intent": p.ID, "charge": p.ChargeID,
	})
	w.Apply(t, conflicting)
	require.Equal(t, "poison", w.Status(t, conflicting.ID))
	var lastError string
	require.NoError(t, w.Pool.QueryRow(context.Background(),
		`SELECT last_error FROM inbox_events WHERE event_id = $1`, conflicting.ID).Scan(&lastError))
	require.Contains(t, lastError, "stripe:refund:"+r.ID)
	require.Equal(t, "10.00", ledger.Format(payment(t, w, p.ID).AmountRefunded, "usd"))
}
