package stripesim_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
)

var day = time.Date(2025, 3, 14, 9, 30, 0, 0, time.UTC)

func newSim(t *testing.T) *stripesim.Sim {
	t.Helper()
	return stripesim.New(stripesim.Config{Seed: 42, Now: day})
}

// decode parses an event as stripe-go does and its data.object into T.
func decode[T any](t *testing.T, ev stripesim.Event) (stripe.Event, T) {
	t.Helper()
	var e stripe.Event
	require.NoError(t, json.Unmarshal(ev.Payload, &e), "event %s", ev.Type)
	var obj T
	require.NoError(t, json.Unmarshal(e.Data.Raw, &obj), "data.object of %s", ev.Type)
	return e, obj
}

func types(evs []stripesim.Event) []stripesim.EventType {
	out := make([]stripesim.EventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func txn(t *testing.T, sim *stripesim.Sim, id string) stripesim.BalanceTransaction {
	t.Helper()
	bt, ok := sim.BalanceTransaction(id)
	require.True(t, ok, "balance transaction %s", id)
	return bt
}

func TestEnvelopeHasStripesShape(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	sim.Pay(stripesim.PayOpts{Amount: 1000, Currency: "USD", Email: "a@example.com"})
	ev := sim.Events()[0]

	var raw map[string]any
	require.NoError(t, json.Unmarshal(ev.Payload, &raw))
	require.ElementsMatch(t, []string{"id", "object", "api_version", "created", "data", "livemode", "pending_webhooks", "request", "type"}, keys(raw))
	require.Regexp(t, `^evt_[0-9A-Za-z]{24}$`, raw["id"])
	require.Equal(t, "event", raw["object"])
	require.Equal(t, "2024-06-20", raw["api_version"])
	require.Equal(t, float64(day.Unix()), raw["created"])
	require.Equal(t, false, raw["livemode"])
	require.Equal(t, float64(1), raw["pending_webhooks"])
	req := raw["request"].(map[string]any)
	require.Regexp(t, `^req_`, req["id"])
	require.Contains(t, req, "idempotency_key")
	require.Nil(t, req["idempotency_key"])
	require.Equal(t, "charge.succeeded", raw["type"])
	obj := raw["data"].(map[string]any)["object"].(map[string]any)
	require.Equal(t, "charge", obj["object"])
	require.Equal(t, float64(1000), obj["amount"], "amounts are integer minor units")
	require.Equal(t, "usd", obj["currency"], "currencies are lowercase")

	require.Equal(t, ev.ObjectID, obj["id"])
	require.Equal(t, day, ev.Created)
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestPayAutomaticCapture(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p := sim.Pay(stripesim.PayOpts{Amount: 10000, Currency: "usd", Email: "jenny@example.com", Name: "Jenny Rosen", Metadata: map[string]string{"order": "42"}})

	evs := sim.Events()
	require.Equal(t, []stripesim.EventType{stripesim.EventChargeSucceeded, stripesim.EventPaymentIntentSucceeded}, types(evs))

	e, ch := decode[stripe.Charge](t, evs[0])
	require.Equal(t, "2024-06-20", e.APIVersion)
	require.Equal(t, stripe.EventType("charge.succeeded"), e.Type)
	require.Equal(t, p.ChargeID, ch.ID)
	require.Regexp(t, `^ch_`, ch.ID)
	require.Equal(t, p.ID, ch.PaymentIntent.ID)
	require.Equal(t, int64(10000), ch.Amount)
	require.Equal(t, int64(10000), ch.AmountCaptured)
	require.True(t, ch.Captured)
	require.True(t, ch.Paid)
	require.Equal(t, stripe.ChargeStatusSucceeded, ch.Status)
	require.Equal(t, stripe.Currency("usd"), ch.Currency)
	require.Equal(t, "jenny@example.com", ch.ReceiptEmail)
	require.Equal(t, "jenny@example.com", ch.BillingDetails.Email)
	require.Equal(t, "Jenny Rosen", ch.BillingDetails.Name)
	require.Equal(t, p.BalanceTransactionID, ch.BalanceTransaction.ID)
	require.Equal(t, "42", ch.Metadata["order"])
	require.Nil(t, ch.Refunds, "since 2022-11-15 a charge lists its refunds only when expanded")
	require.NotContains(t, string(evs[0].Payload), `"refunds"`)

	_, pi := decode[stripe.PaymentIntent](t, evs[1])
	require.Equal(t, p.ID, pi.ID)
	require.Regexp(t, `^pi_`, pi.ID)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
	require.Equal(t, int64(10000), pi.Amount)
	require.Equal(t, int64(10000), pi.AmountReceived)
	require.Equal(t, int64(0), pi.AmountCapturable)
	require.Equal(t, p.ChargeID, pi.LatestCharge.ID)
	require.Equal(t, "jenny@example.com", pi.ReceiptEmail)
	require.Equal(t, day.Unix(), pi.Created)

	bt := txn(t, sim, p.BalanceTransactionID)
	require.Equal(t, stripesim.TxnCharge, bt.Type)
	require.Equal(t, stripesim.CategoryCharge, bt.ReportingCategory)
	require.Equal(t, p.ChargeID, bt.Source)
	require.Equal(t, int64(10000), bt.Amount)
	require.Equal(t, int64(320), bt.Fee, "2.9%% of 100.00 + 0.30")
	require.Equal(t, int64(9680), bt.Net)
	require.Equal(t, "usd", bt.Currency)
	require.Equal(t, "pending", bt.Status)
	require.Equal(t, time.Date(2025, 3, 16, 0, 0, 0, 0, time.UTC).Unix(), bt.AvailableOn)
	require.Equal(t, []stripesim.FeeDetail{{Amount: 320, Currency: "usd", Description: "Stripe processing fees", Type: "stripe_fee"}}, bt.FeeDetails)

	sim.Advance(72 * time.Hour)
	require.Equal(t, "available", txn(t, sim, p.BalanceTransactionID).Status)
}

func TestChargeFeeIsIntegerStripePricing(t *testing.T) {
	t.Parallel()
	for amount, fee := range map[int64]int64{
		1:       30,
		50:      31, // 1.45 rounds down
		1000:    59,
		1017:    59, // 29.493
		1018:    60, // 29.522
		10000:   320,
		1234567: 35832, // 35802.443 + 30
	} {
		sim := newSim(t)
		p := sim.Pay(stripesim.PayOpts{Amount: amount})
		bt := txn(t, sim, p.BalanceTransactionID)
		require.Equal(t, fee, bt.Fee, "fee on %d", amount)
		require.Equal(t, amount-fee, bt.Net)
	}

	free := stripesim.New(stripesim.Config{Seed: 1, Fees: &stripesim.Fees{}})
	p := free.Pay(stripesim.PayOpts{Amount: 500})
	bt := txn(t, free, p.BalanceTransactionID)
	require.Zero(t, bt.Fee)
	require.Empty(t, bt.FeeDetails)
}

func TestPayWithDeclinesAndProcessing(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p := sim.Pay(stripesim.PayOpts{Amount: 2500, Currency: "eur", Processing: true, FailFirst: 2})

	evs := sim.Events()
	require.Equal(t, []stripesim.EventType{
		stripesim.EventPaymentIntentProcessing,
		stripesim.EventChargeFailed, stripesim.EventPaymentIntentPaymentFailed,
		stripesim.EventChargeFailed, stripesim.EventPaymentIntentPaymentFailed,
		stripesim.EventChargeSucceeded, stripesim.EventPaymentIntentSucceeded,
	}, types(evs))
	require.Len(t, p.FailedChargeIDs, 2)

	_, pi := decode[stripe.PaymentIntent](t, evs[0])
	require.Equal(t, stripe.PaymentIntentStatusProcessing, pi.Status)

	_, failed := decode[stripe.Charge](t, evs[1])
	require.Equal(t, p.FailedChargeIDs[0], failed.ID)
	require.Equal(t, stripe.ChargeStatusFailed, failed.Status)
	require.False(t, failed.Paid)
	require.False(t, failed.Captured)
	require.Equal(t, "card_declined", failed.FailureCode)
	require.Equal(t, "Your card was declined.", failed.FailureMessage)
	require.Nil(t, failed.BalanceTransaction, "a declined charge moves no money")

	_, pi = decode[stripe.PaymentIntent](t, evs[4])
	require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, pi.Status)
	require.Equal(t, p.FailedChargeIDs[1], pi.LatestCharge.ID)
	require.Equal(t, p.FailedChargeIDs[1], pi.LastPaymentError.ChargeID)
	require.Equal(t, stripe.ErrorCode("card_declined"), pi.LastPaymentError.Code)

	_, pi = decode[stripe.PaymentIntent](t, evs[6])
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
	require.Equal(t, p.ChargeID, pi.LatestCharge.ID)
	require.Nil(t, pi.LastPaymentError)

	require.Len(t, sim.BalanceTransactions(), 1, "only the successful charge moves money")

	declined := sim.Pay(stripesim.PayOpts{Amount: 700, Declined: true})
	evs = sim.EventsOf(declined.ID)
	require.Equal(t, []stripesim.EventType{stripesim.EventChargeFailed, stripesim.EventPaymentIntentPaymentFailed}, types(evs))
	require.Empty(t, declined.BalanceTransactionID)
}

func TestManualCaptureAndCancel(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p := sim.Pay(stripesim.PayOpts{Amount: 5000, ManualCapture: true})
	evs := sim.Events()
	require.Equal(t, []stripesim.EventType{stripesim.EventChargeSucceeded, stripesim.EventPaymentIntentAmountCapturableUpdated}, types(evs))
	require.Empty(t, p.BalanceTransactionID)

	_, ch := decode[stripe.Charge](t, evs[0])
	require.False(t, ch.Captured)
	require.True(t, ch.Paid)
	require.Zero(t, ch.AmountCaptured)
	require.Nil(t, ch.BalanceTransaction)
	_, pi := decode[stripe.PaymentIntent](t, evs[1])
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, pi.Status)
	require.Equal(t, int64(5000), pi.AmountCapturable)
	require.Equal(t, stripe.PaymentIntentCaptureMethodManual, pi.CaptureMethod)

	sim.Capture(p)
	evs = sim.Events()[2:]
	require.Equal(t, []stripesim.EventType{stripesim.EventChargeCaptured, stripesim.EventPaymentIntentSucceeded}, types(evs))
	_, ch = decode[stripe.Charge](t, evs[0])
	require.True(t, ch.Captured)
	require.Equal(t, int64(5000), ch.AmountCaptured)
	require.Equal(t, p.BalanceTransactionID, ch.BalanceTransaction.ID)
	_, pi = decode[stripe.PaymentIntent](t, evs[1])
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, pi.Status)
	require.Equal(t, int64(5000), pi.AmountReceived)
	require.Zero(t, pi.AmountCapturable)
	require.Panics(t, func() { sim.Capture(p) }, "capturing twice is a script bug")
	require.Panics(t, func() { sim.Cancel(p) }, "a succeeded intent cannot be canceled")

	held := sim.Pay(stripesim.PayOpts{Amount: 800, ManualCapture: true})
	sim.Cancel(held)
	evs = sim.EventsOf(held.ID)
	require.Equal(t, stripesim.EventPaymentIntentCanceled, evs[len(evs)-1].Type)
	_, pi = decode[stripe.PaymentIntent](t, evs[len(evs)-1])
	require.Equal(t, stripe.PaymentIntentStatusCanceled, pi.Status)
	require.Equal(t, stripe.PaymentIntentCancellationReasonRequestedByCustomer, pi.CancellationReason)
	require.Equal(t, day.Unix(), pi.CanceledAt)
}

func TestRefundAndRefundFailure(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p := sim.Pay(stripesim.PayOpts{Amount: 3000, Currency: "gbp"})
	mark := len(sim.Events())
	r := sim.Refund(p, 1000)
	require.Equal(t, "succeeded", r.Status)

	evs := sim.Events()[mark:]
	require.Equal(t, []stripesim.EventType{
		stripesim.EventRefundCreated, stripesim.EventChargeRefunded,
		stripesim.EventRefundUpdated, stripesim.EventChargeRefundUpdated,
	}, types(evs))

	_, re := decode[stripe.Refund](t, evs[0])
	require.Equal(t, r.ID, re.ID)
	require.Regexp(t, `^re_`, re.ID)
	require.Equal(t, stripe.RefundStatusPending, re.Status)
	require.Equal(t, int64(1000), re.Amount)
	require.Equal(t, p.ChargeID, re.Charge.ID)
	require.Equal(t, p.ID, re.PaymentIntent.ID)
	require.Equal(t, stripe.Currency("gbp"), re.Currency)
	require.Equal(t, r.BalanceTransactionID, re.BalanceTransaction.ID)

	_, ch := decode[stripe.Charge](t, evs[1])
	require.Equal(t, int64(1000), ch.AmountRefunded)
	require.False(t, ch.Refunded, "partially refunded")
	require.Nil(t, ch.Refunds, "charge.refunded names no refund: only amount_refunded")

	for _, ev := range evs[2:] {
		e, re := decode[stripe.Refund](t, ev)
		require.Equal(t, stripe.RefundStatusSucceeded, re.Status)
		require.Equal(t, "pending", e.Data.PreviousAttributes["status"])
	}

	bt := txn(t, sim, r.BalanceTransactionID)
	require.Equal(t, stripesim.TxnRefund, bt.Type)
	require.Equal(t, stripesim.CategoryRefund, bt.ReportingCategory)
	require.Equal(t, int64(-1000), bt.Amount)
	require.Zero(t, bt.Fee)
	require.Equal(t, int64(-1000), bt.Net)
	require.Equal(t, r.ID, bt.Source)

	mark = len(sim.Events())
	rest := sim.Refund(p, 0)
	require.Equal(t, int64(2000), rest.Amount, "0 refunds what is left")
	_, ch = decode[stripe.Charge](t, sim.Events()[mark+1])
	require.True(t, ch.Refunded)
	require.Equal(t, int64(3000), ch.AmountRefunded)
	require.Panics(t, func() { sim.Refund(p, 1) }, "nothing left to refund")

	mark = len(sim.Events())
	failed := sim.FailRefund(r.ID)
	require.Equal(t, "failed", failed.Status)
	evs = sim.Events()[mark:]
	require.Equal(t, []stripesim.EventType{stripesim.EventRefundFailed, stripesim.EventRefundUpdated, stripesim.EventChargeRefundUpdated}, types(evs))
	for _, ev := range evs {
		_, re := decode[stripe.Refund](t, ev)
		require.Equal(t, stripe.RefundStatusFailed, re.Status)
		require.Equal(t, stripe.RefundFailureReasonExpiredOrCanceledCard, re.FailureReason)
		require.Equal(t, failed.FailureBalanceTransactionID, re.FailureBalanceTransaction.ID)
		require.Equal(t, r.BalanceTransactionID, re.BalanceTransaction.ID)
	}
	rev := txn(t, sim, failed.FailureBalanceTransactionID)
	require.Equal(t, stripesim.TxnRefundFailure, rev.Type)
	require.Equal(t, stripesim.CategoryRefundFailure, rev.ReportingCategory)
	require.Equal(t, int64(1000), rev.Amount, "reverses the refund")
	require.Equal(t, r.ID, rev.Source)
	require.Panics(t, func() { sim.FailRefund(r.ID) })
}

func TestDisputeWonAndLost(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p := sim.Pay(stripesim.PayOpts{Amount: 4000})
	mark := len(sim.Events())
	d := sim.Dispute(p, 0)
	require.Equal(t, int64(4000), d.Amount)

	evs := sim.Events()[mark:]
	require.Equal(t, []stripesim.EventType{stripesim.EventChargeDisputeCreated, stripesim.EventChargeDisputeFundsWithdrawn}, types(evs))
	_, dp := decode[stripe.Dispute](t, evs[0])
	require.Regexp(t, `^dp_`, dp.ID)
	require.Equal(t, stripe.DisputeStatusNeedsResponse, dp.Status)
	require.Equal(t, p.ChargeID, dp.Charge.ID)
	require.Equal(t, p.ID, dp.PaymentIntent.ID)
	require.Empty(t, dp.BalanceTransactions)

	_, dp = decode[stripe.Dispute](t, evs[1])
	require.Len(t, dp.BalanceTransactions, 1)
	w := dp.BalanceTransactions[0]
	require.Equal(t, d.WithdrawalBalanceTransactionID, w.ID)
	require.Equal(t, int64(-4000), w.Amount)
	require.Equal(t, int64(1500), w.Fee)
	require.Equal(t, int64(-5500), w.Net)
	require.Equal(t, stripe.BalanceTransactionReportingCategoryDispute, w.ReportingCategory)
	require.Equal(t, stripe.BalanceTransactionTypeAdjustment, w.Type)
	require.Equal(t, d.ID, w.Source.ID)

	mark = len(sim.Events())
	sim.CloseDispute(d, true)
	evs = sim.Events()[mark:]
	require.Equal(t, []stripesim.EventType{stripesim.EventChargeDisputeFundsReinstated, stripesim.EventChargeDisputeClosed}, types(evs))
	_, dp = decode[stripe.Dispute](t, evs[1])
	require.Equal(t, stripe.DisputeStatusWon, dp.Status)
	require.Len(t, dp.BalanceTransactions, 2)
	back := dp.BalanceTransactions[1]
	require.Equal(t, d.ReinstatementBalanceTransactionID, back.ID)
	require.Equal(t, int64(4000), back.Amount)
	require.Equal(t, int64(-1500), back.Fee)
	require.Equal(t, stripe.BalanceTransactionReportingCategory("dispute_reversal"), back.ReportingCategory)
	require.Panics(t, func() { sim.CloseDispute(d, false) }, "already closed")

	q := sim.Pay(stripesim.PayOpts{Amount: 900})
	lost := sim.Dispute(q, 300)
	mark = len(sim.Events())
	sim.CloseDispute(lost, false)
	evs = sim.Events()[mark:]
	require.Equal(t, []stripesim.EventType{stripesim.EventChargeDisputeClosed}, types(evs))
	_, dp = decode[stripe.Dispute](t, evs[0])
	require.Equal(t, stripe.DisputeStatusLost, dp.Status)
	require.Equal(t, int64(300), dp.Amount)
	require.Empty(t, lost.ReinstatementBalanceTransactionID)

	inq := sim.Inquiry(sim.Pay(stripesim.PayOpts{Amount: 100}), 0)
	_, dp = decode[stripe.Dispute](t, sim.EventsOf(inq.ID)[0])
	require.Equal(t, stripe.DisputeStatusWarningNeedsResponse, dp.Status)
	sim.CloseDispute(inq, true)
	_, dp = decode[stripe.Dispute](t, sim.EventsOf(inq.ID)[1])
	require.Equal(t, stripe.DisputeStatusWarningClosed, dp.Status)
	require.Empty(t, inq.WithdrawalBalanceTransactionID)
}

func TestPayoutAndFailure(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p := sim.Pay(stripesim.PayOpts{Amount: 10000})
	po := sim.Payout(9680, "usd")
	ev := sim.Events()[len(sim.Events())-1]
	require.Equal(t, stripesim.EventPayoutPaid, ev.Type)
	require.Empty(t, ev.PaymentIntentID)
	_, out := decode[stripe.Payout](t, ev)
	require.Regexp(t, `^po_`, out.ID)
	require.Equal(t, stripe.PayoutStatusPaid, out.Status)
	require.Equal(t, int64(9680), out.Amount)
	require.Equal(t, po.BalanceTransactionID, out.BalanceTransaction.ID)
	require.Equal(t, time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC).Unix(), out.ArrivalDate)

	bt := txn(t, sim, po.BalanceTransactionID)
	require.Equal(t, stripesim.TxnPayout, bt.Type)
	require.Equal(t, stripesim.CategoryPayout, bt.ReportingCategory)
	require.Equal(t, int64(-9680), bt.Amount)
	require.Equal(t, po.ID, bt.Source)

	sim.FailPayout(po)
	ev = sim.Events()[len(sim.Events())-1]
	require.Equal(t, stripesim.EventPayoutFailed, ev.Type)
	_, out = decode[stripe.Payout](t, ev)
	require.Equal(t, stripe.PayoutStatusFailed, out.Status)
	require.Equal(t, stripe.PayoutFailureCodeAccountClosed, out.FailureCode)
	require.Equal(t, po.FailureBalanceTransactionID, out.FailureBalanceTransaction.ID)
	rev := txn(t, sim, po.FailureBalanceTransactionID)
	require.Equal(t, stripesim.TxnPayoutFailure, rev.Type)
	require.Equal(t, stripesim.CategoryPayoutReversal, rev.ReportingCategory)
	require.Equal(t, int64(9680), rev.Amount)
	require.Panics(t, func() { sim.FailPayout(po) })
	_ = p
}

func TestIgnoredAndEmit(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	ev := sim.Ignored()
	require.Equal(t, stripesim.EventCustomerCreated, ev.Type)
	_, c := decode[stripe.Customer](t, ev)
	require.Regexp(t, `^cus_`, c.ID)

	odd := sim.Emit(stripesim.EventChargeSucceeded, map[string]any{
		"id": "ch_weird", "object": "charge", "amount": -5, "currency": "zzz", "payment_intent": "pi_weird",
	})
	require.Equal(t, "ch_weird", odd.ObjectID)
	require.Equal(t, "pi_weird", odd.PaymentIntentID)
	_, ch := decode[stripe.Charge](t, odd)
	require.Equal(t, int64(-5), ch.Amount)
	require.Len(t, sim.Events(), 2)
}

func TestSameSeedSameWorld(t *testing.T) {
	t.Parallel()
	script := func(seed int64) ([]stripesim.Event, []stripesim.BalanceTransaction) {
		sim := stripesim.New(stripesim.Config{Seed: seed, Now: day})
		p := sim.Pay(stripesim.PayOpts{Amount: 1200, FailFirst: 1})
		sim.Refund(p, 200)
		sim.Advance(time.Hour)
		sim.CloseDispute(sim.Dispute(p, 0), true)
		sim.Payout(100, "usd")
		return sim.Events(), sim.BalanceTransactions()
	}
	e1, t1 := script(7)
	e2, t2 := script(7)
	require.Equal(t, e1, e2)
	require.Equal(t, t1, t2)
	e3, _ := script(8)
	require.NotEqual(t, e1[0].ID, e3[0].ID)

	a, b := stripesim.New(stripesim.Config{}), stripesim.New(stripesim.Config{})
	require.NotEqual(t, a.Seed(), b.Seed(), "seed 0 draws a fresh seed")
	require.NotEqual(t, a.Ignored().ID, b.Ignored().ID)
}

func TestClockPutsEventsOnAChosenDay(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	other := time.Date(2025, 1, 2, 23, 59, 59, 0, time.UTC)
	sim.SetNow(other)
	p := sim.Pay(stripesim.PayOpts{Amount: 100})
	sim.Advance(2 * time.Second)
	r := sim.Refund(p, 50)
	for _, ev := range sim.EventsOf(p.ID) {
		switch ev.ObjectID {
		case r.ID:
			require.Equal(t, other.Add(2*time.Second), ev.Created)
		default:
			if ev.Type != stripesim.EventChargeRefunded {
				require.Equal(t, other, ev.Created, ev.Type)
			}
		}
	}
	require.Equal(t, other.Unix(), txn(t, sim, p.BalanceTransactionID).Created)
	require.Equal(t, other.Add(2*time.Second).Unix(), txn(t, sim, r.BalanceTransactionID).Created)
}

func TestReconciliationKnobs(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p := sim.Pay(stripesim.PayOpts{Amount: 1000})
	sim.TamperBalanceTransaction(p.BalanceTransactionID, 990)
	bt := txn(t, sim, p.BalanceTransactionID)
	require.Equal(t, int64(990), bt.Amount)
	require.Equal(t, int64(990-59), bt.Net)
	_, ch := decode[stripe.Charge](t, sim.Events()[0])
	require.Equal(t, int64(1000), ch.Amount, "events keep what was sent")

	q := sim.Pay(stripesim.PayOpts{Amount: 2000})
	sim.TamperBalanceTransactionCurrency(q.BalanceTransactionID, "EUR")
	require.Equal(t, "eur", txn(t, sim, q.BalanceTransactionID).Currency)

	gone := sim.Pay(stripesim.PayOpts{Amount: 3000})
	sim.DropBalanceTransaction(gone.BalanceTransactionID)
	_, ok := sim.BalanceTransaction(gone.BalanceTransactionID)
	require.False(t, ok)

	fee := sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Amount: -200, Currency: "usd"})
	require.Equal(t, stripesim.TxnStripeFee, fee.Type)
	require.Equal(t, stripesim.CategoryFee, fee.ReportingCategory)
	require.Equal(t, int64(-200), fee.Net)
	require.Empty(t, fee.Source)

	ids := map[string]bool{}
	for _, bt := range sim.BalanceTransactions() {
		ids[bt.ID] = true
	}
	require.Equal(t, map[string]bool{p.BalanceTransactionID: true, q.BalanceTransactionID: true, fee.ID: true}, ids)

	require.Panics(t, func() { sim.TamperBalanceTransaction("txn_nope", 1) })
	require.Panics(t, func() { sim.SkipEvent("evt_nope") })
}
