package jobs_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/refund"
)

// adyenPayment is what Adyen's own account says of one payment once the
// script ran: what was captured and refunded, in Adyen's minor units.
type adyenPayment struct {
	psp                string
	currency           string
	captured, refunded int64
}

// adyenScript plays a random lifecycle on sim, days passing between steps
// as at Adyen: authorisations refused or granted in currencies whose minor
// units Adyen counts its own way (CLP with two decimals, ISK two, IDR none),
// captures days later that may fail at the scheme, cancellations (plain and
// CANCEL_OR_REFUND), refunds partial or full that may be refused, fail or be
// reversed a week later, chargebacks accepted, left open, reversed, and
// charged back a second time. It returns the items in the order Adyen sent
// them and the truth of each payment.
func adyenScript(t *rapid.T, sim *adyensim.Sim) (items []adyensim.Item, truth []adyenPayment) {
	hours := func(label string, lo, hi int) {
		sim.Advance(time.Duration(rapid.IntRange(lo, hi).Draw(t, label)) * time.Hour)
	}
	for i := range rapid.IntRange(1, 3).Draw(t, "payments") {
		name := func(s string) string { return s + "_" + string(rune('a'+i)) }
		currency := rapid.SampledFrom([]string{"EUR", "JPY", "KWD", "CLP", "ISK", "IDR"}).Draw(t, name("currency"))
		unit := int64(1)
		if currency == "CLP" || currency == "ISK" {
			unit = 100 // whole pesos and krónur: what the ledger can hold
		}
		amount := unit * rapid.Int64Range(1, 100_000).Draw(t, name("amount"))
		granted := rapid.IntRange(0, 4).Draw(t, name("refused")) > 0
		psp, it := sim.Authorise(amount, currency, name("order"), granted)
		items = append(items, it)
		if !granted {
			continue
		}
		p := adyenPayment{psp: psp, currency: currency}
		hours(name("capture_after_hours"), 0, 7*24)
		switch rapid.IntRange(0, 5).Draw(t, name("then")) {
		case 0: // left authorised
			truth = append(truth, p)
			continue
		case 1:
			_, it := sim.Cancel(psp)
			items = append(items, it)
			truth = append(truth, p)
			continue
		case 2:
			_, it := sim.CancelOrRefund(psp, "cancel")
			items = append(items, it)
			truth = append(truth, p)
			continue
		}
		capture, it := sim.Capture(psp, amount)
		items = append(items, it)
		p.captured = amount
		if rapid.IntRange(0, 5).Draw(t, name("capture_fails")) == 0 {
			hours(name("capture_fails_after_hours"), 24, 5*24)
			items = append(items, sim.CaptureFailed(psp, capture, amount))
			p.captured = 0
			truth = append(truth, p)
			continue
		}
		left := amount
		for range rapid.IntRange(0, 3).Draw(t, name("refunds")) {
			if left == 0 {
				break
			}
			hours(name("refund_after_hours"), 0, 72)
			value := left
			if !rapid.Bool().Draw(t, name("full")) {
				value = unit * rapid.Int64Range(1, left/unit).Draw(t, name("refund"))
			}
			accepted := rapid.IntRange(0, 5).Draw(t, name("refund_refused")) > 0
			refund, it := sim.Refund(psp, value, accepted)
			items = append(items, it)
			if !accepted {
				continue
			}
			left -= value
			p.refunded += value
			switch rapid.IntRange(0, 5).Draw(t, name("refund_after")) {
			case 0:
				hours(name("refund_fails_after_hours"), 24, 10*24)
				items = append(items, sim.RefundFailed(psp, refund, value))
				p.refunded -= value
			case 1:
				hours(name("refund_reversed_after_hours"), 24, 10*24)
				items = append(items, sim.RefundedReversed(psp, refund, value))
				p.refunded -= value
			}
		}
		hours(name("dispute_after_hours"), 0, 30*24)
		switch rapid.IntRange(0, 4).Draw(t, name("dispute")) {
		case 1:
			_, it := sim.Chargeback(psp, amount, "Undefended") // left open
			items = append(items, it)
		case 2:
			_, it := sim.Chargeback(psp, amount, "Accepted")
			items = append(items, it)
		case 3, 4:
			dispute, it := sim.Chargeback(psp, amount, "Pending")
			items = append(items, it)
			hours(name("dispute_reversed_after_hours"), 24, 60*24)
			items = append(items, sim.ChargebackReversed(psp, dispute, amount))
			if rapid.Bool().Draw(t, name("second_chargeback")) {
				hours(name("second_chargeback_after_hours"), 24, 30*24)
				items = append(items, sim.SecondChargeback(psp, dispute, amount))
			}
		}
		truth = append(truth, p)
	}
	return items, truth
}

// adyenEvents turns items into the events the webhook files, through
// paygate's own Receiver: each item arrives as a batch of its own.
func adyenEvents(t *rapid.T, sim *adyensim.Sim, items []adyensim.Item) []provider.Event {
	r, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{sim.HMACKey()}})
	require.NoError(t, err)
	var events []provider.Event
	for _, it := range items {
		evs, err := r.Receive(http.Header{}, sim.Batch(false, it), sim.Now())
		require.NoError(t, err)
		events = append(events, evs...)
	}
	return events
}

// TestAdyenAnyOrderAnyDuplicatesSameBooks is the order property for Adyen's
// lifecycles: the same items applied one at a time in the order Adyen sent
// them, shuffled with duplicates through concurrent workers, and shuffled
// with duplicates all at once give the same payments and the same ledger,
// balanced; and the books agree with what Adyen's account says was
// captured and refunded (invariants 3 and 8).
func TestAdyenAnyOrderAnyDuplicatesSameBooks(t *testing.T) {
	t.Parallel()
	canonical := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) { c.EventWorkers = 1 }})
	shuffled := worldtest.New(t, nil)
	batched := worldtest.New(t, nil)

	rapid.Check(t, func(rt *rapid.T) {
		sim := adyensim.New(adyensim.Config{Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
		items, truth := adyenScript(rt, sim)
		events := adyenEvents(rt, sim, items)
		var payments []string
		for _, p := range truth {
			payments = append(payments, p.psp)
		}

		canonical.ApplyEvents(rt, events...)
		var delivery []provider.Event
		for _, e := range events {
			for range rapid.IntRange(1, 3).Draw(rt, "copies") {
				delivery = append(delivery, e)
			}
		}
		shuffled.ApplyEvents(rt, rapid.Permutation(delivery).Draw(rt, "order")...)
		batched.ApplyEventsAtOnce(rt, rapid.Permutation(delivery).Draw(rt, "order_at_once")...)

		want := canonical.Snapshot(rt, payments)
		for name, w := range map[string]*worldtest.World{"shuffled with duplicates": shuffled, "all at once": batched} {
			got := w.Snapshot(rt, payments)
			require.Equal(rt, want, got, "items in Adyen's order vs %s", name)
			for _, tb := range got.TrialBalance {
				require.Contains(rt, tb, "balanced=true")
			}
			require.Zero(rt, w.Count(rt, `SELECT count(*) FROM inbox_events WHERE status = 'poison'`))
		}
		requireAdyenTruth(rt, canonical, truth)
	})
}

// requireAdyenTruth checks each payment's captured and refunded amounts,
// and its ledger's captures and refunds net of their corrections, against
// Adyen's account.
func requireAdyenTruth(t *rapid.T, w *worldtest.World, truth []adyenPayment) {
	ctx := context.Background()
	for _, p := range truth {
		got, err := ledger.GetPayment(ctx, w.Pool, p.psp)
		require.NoError(t, err, "payment %s", p.psp)
		require.Equal(t, adyen.Name, got.Provider)
		wantCaptured, _, err := adyen.FromMinor(&p.captured, p.currency, "captured")
		require.NoError(t, err)
		wantRefunded, _, err := adyen.FromMinor(&p.refunded, p.currency, "refunded")
		require.NoError(t, err)
		require.True(t, wantCaptured.Equal(got.AmountCaptured), "%s captured: adyen %s, paygate %s", p.psp, wantCaptured, got.AmountCaptured)
		require.True(t, wantRefunded.Equal(got.AmountRefunded), "%s refunded: adyen %s, paygate %s", p.psp, wantRefunded, got.AmountRefunded)
		txs, err := ledger.TransactionsForPayment(ctx, w.Pool, p.psp)
		require.NoError(t, err)
		sales, refunds := decimal.Zero, decimal.Zero
		for _, tx := range txs {
			for _, e := range tx.Entries {
				switch e.Account {
				case ledger.AccountSales:
					sales = sales.Add(e.Credit).Sub(e.Debit)
				case ledger.AccountRefunds:
					refunds = refunds.Add(e.Debit).Sub(e.Credit)
				}
			}
		}
		require.True(t, sales.Equal(got.AmountCaptured), "%s: ledger sales %s, API amount_captured %s", p.psp, sales, got.AmountCaptured)
		require.True(t, refunds.Equal(got.AmountRefunded), "%s: ledger refunds %s, API amount_refunded %s", p.psp, refunds, got.AmountRefunded)
	}
}

// adyenSagaRefund is one refund paygate asks Adyen for, and its fate at
// Adyen: "succeeded" (REFUND success true), "refused" (success false),
// "failed" (success true, then REFUND_FAILED) or "reversed" (success true,
// then REFUNDED_REVERSED).
type adyenSagaRefund struct {
	value           int64
	fate            string
	hours, laterHrs int
}

type adyenSagaPayment struct {
	currency string
	amount   int64
	refunds  []adyenSagaRefund
}

// drawAdyenSagaPlan draws payments captured in full in currencies whose
// minor units Adyen counts its own way, each with refund requests whose
// amounts fit what was captured, and their fates.
func drawAdyenSagaPlan(t *rapid.T) []adyenSagaPayment {
	var plan []adyenSagaPayment
	for i := range rapid.IntRange(1, 2).Draw(t, "saga_payments") {
		name := func(s string) string { return s + "_" + string(rune('a'+i)) }
		p := adyenSagaPayment{currency: rapid.SampledFrom([]string{"EUR", "JPY", "KWD", "CLP"}).Draw(t, name("saga_currency"))}
		unit := int64(1)
		if p.currency == "CLP" {
			unit = 100
		}
		p.amount = unit * rapid.Int64Range(3, 100_000).Draw(t, name("saga_amount"))
		left := p.amount
		for j := range rapid.IntRange(1, 3).Draw(t, name("saga_refunds")) {
			if left == 0 {
				break
			}
			label := func(s string) string { return fmt.Sprintf("%s_%d", name(s), j) }
			value := left
			if !rapid.Bool().Draw(t, label("saga_full")) {
				value = unit * rapid.Int64Range(1, left/unit).Draw(t, label("saga_value"))
			}
			left -= value
			p.refunds = append(p.refunds, adyenSagaRefund{
				value:    value,
				fate:     rapid.SampledFrom([]string{"succeeded", "refused", "failed", "reversed"}).Draw(t, label("saga_fate")),
				hours:    rapid.IntRange(0, 72).Draw(t, label("saga_outcome_after_hours")),
				laterHrs: rapid.IntRange(24, 10*24).Draw(t, label("saga_failure_after_hours")),
			})
		}
		plan = append(plan, p)
	}
	return plan
}

// checkoutSwitch serves the Checkout API of the simulator a case plays
// on: a World's refund client is configured once, and outlives the cases.
type checkoutSwitch struct{ sim atomic.Pointer[adyensim.Sim] }

func (c *checkoutSwitch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.sim.Load().CheckoutHandler().ServeHTTP(w, r)
}

// adyenSagaWorld is a World whose submit_refund worker calls the
// simulated Checkout API through paygate's Adyen client, with room in the
// default queue for every refund of a case waiting on its held answer.
type adyenSagaWorld struct {
	*worldtest.World
	checkout *checkoutSwitch
}

func newAdyenSagaWorld(t *testing.T, canonical bool) *adyenSagaWorld {
	t.Helper()
	sw := &checkoutSwitch{}
	srv := httptest.NewServer(sw)
	t.Cleanup(srv.Close)
	client, err := adyen.NewAPI(adyen.APIConfig{APIKey: adyensim.DefaultAPIKey, MerchantAccount: adyensim.DefaultMerchantAccount,
		CheckoutURL: srv.URL + adyensim.CheckoutPath})
	require.NoError(t, err)
	w := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		if canonical {
			c.EventWorkers = 1
		}
		c.Refunders = map[string]provider.Refunder{adyen.Name: client}
		c.RefundCallTimeout = 2 * time.Minute // answers are held while the case plays
		c.Email.OpsEmail = "ops@example.test"
		c.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 16}}
	}})
	return &adyenSagaWorld{World: w, checkout: sw}
}

// sagaStep is what reaches paygate: Adyen's 201 for a refund (its held
// answer released), or one notification.
type sagaStep struct {
	release   string // the refund's pspReference
	requestID string
	event     provider.Event
}

// sagaRun is one World's play of a plan.
type sagaRun struct {
	steps    []sagaStep        // in the order Adyen acted
	requests map[string]string // request id → refund pspReference
	fates    map[string]string // refund pspReference → fate
	truth    []adyenPayment
}

// play runs plan on w with a simulator of its own (seed makes its
// references the same in every World): the payments are authorised,
// captured and booked; then each refund is asked for through the API's
// path (a request and its submit_refund job), made at Adyen with its
// answer held, and given its REFUND (and later REFUND_FAILED or
// REFUNDED_REVERSED). Nothing after the captures is applied yet: it
// returns the steps.
func (w *adyenSagaWorld) play(t *rapid.T, plan []adyenSagaPayment, seed int64) sagaRun {
	ctx := context.Background()
	sim := adyensim.New(adyensim.Config{Seed: seed, Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
	w.checkout.sim.Store(sim)
	run := sagaRun{requests: map[string]string{}, fates: map[string]string{}}
	var setup []adyensim.Item
	psps := make([]string, len(plan))
	for i, p := range plan {
		psp, auth := sim.Authorise(p.amount, p.currency, fmt.Sprintf("saga-order-%d", i), true)
		sim.Advance(time.Hour)
		_, capture := sim.Capture(psp, p.amount)
		setup = append(setup, auth, capture)
		psps[i] = psp
		run.truth = append(run.truth, adyenPayment{psp: psp, currency: p.currency, captured: p.amount})
	}
	w.ApplyEvents(t, adyenEvents(t, sim, setup)...)

	for i, p := range plan {
		for _, r := range p.refunds {
			sim.Advance(time.Hour)
			amount, _, err := adyen.FromMinor(&r.value, p.currency, "refund")
			require.NoError(t, err)
			// One at a time, so that every World's simulator hands out
			// the same references in the same order.
			made := len(sim.CheckoutRefunds())
			sim.HoldNextRefundAnswers(1)
			var req refund.Request
			require.NoError(t, pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
				req, err = refund.CreateTx(ctx, tx, refund.New{PaymentID: psps[i], Actor: "ops:property",
					Reason: "requested_by_customer", Amount: decimal.NewNullDecimal(amount), CanRefund: w.Jobs.CanRefund})
				if err != nil {
					return err
				}
				return w.Jobs.InsertSubmitRefundTx(ctx, tx, req.ID)
			}))
			deadline := time.Now().Add(30 * time.Second)
			for len(sim.CheckoutRefunds()) == made {
				require.True(t, time.Now().Before(deadline), "the saga submits refund request %s", req.ID)
				time.Sleep(5 * time.Millisecond)
			}
			refundPSP := sim.CheckoutRefunds()[made].PspReference
			run.requests[req.ID], run.fates[refundPSP] = refundPSP, r.fate
			run.steps = append(run.steps, sagaStep{release: refundPSP, requestID: req.ID})

			sim.Advance(time.Duration(r.hours) * time.Hour)
			items := []adyensim.Item{sim.RefundOutcome(refundPSP, r.fate != "refused", "Insufficient balance on payment")}
			switch r.fate {
			case "failed":
				sim.Advance(time.Duration(r.laterHrs) * time.Hour)
				items = append(items, sim.RefundFailed(psps[i], refundPSP, r.value))
			case "reversed":
				sim.Advance(time.Duration(r.laterHrs) * time.Hour)
				items = append(items, sim.RefundedReversed(psps[i], refundPSP, r.value))
			}
			for _, ev := range adyenEvents(t, sim, items) {
				run.steps = append(run.steps, sagaStep{event: ev})
			}
			if r.fate == "succeeded" {
				run.truth[i].refunded += r.value
			}
		}
	}
	return run
}

// apply makes steps reach paygate one at a time: a release waits for the
// submit_refund job to record Adyen's answer, a notification for its
// processing.
func (w *adyenSagaWorld) apply(t *rapid.T, steps []sagaStep) {
	for _, s := range steps {
		if s.release == "" {
			w.ApplyEvents(t, s.event)
			continue
		}
		require.True(t, w.checkout.sim.Load().ReleaseRefundAnswer(s.release), "refund %s was held", s.release)
		w.awaitSubmitted(t, s.requestID)
	}
}

// applyAtOnce makes every step reach paygate together: the notifications
// ingested while the events queue is paused, the answers released, then
// everything worked at once.
func (w *adyenSagaWorld) applyAtOnce(t *rapid.T, steps []sagaStep) {
	ctx := context.Background()
	require.NoError(t, w.Jobs.River.QueuePause(ctx, jobs.QueueEvents, nil))
	for _, s := range steps {
		if s.release == "" {
			w.IngestEvents(t, s.event)
		} else {
			require.True(t, w.checkout.sim.Load().ReleaseRefundAnswer(s.release), "refund %s was held", s.release)
		}
	}
	require.NoError(t, w.Jobs.River.QueueResume(ctx, jobs.QueueEvents, nil))
	w.Settle(t)
	for _, s := range steps {
		if s.release != "" {
			w.awaitSubmitted(t, s.requestID)
		}
	}
}

// awaitSubmitted waits until the submit_refund job of request id finished
// with Adyen's answer.
func (w *adyenSagaWorld) awaitSubmitted(t *rapid.T, id string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state string
		require.NoError(t, w.Pool.QueryRow(context.Background(),
			`SELECT state FROM river_job WHERE kind = 'submit_refund' AND args->>'request_id' = $1`, id).Scan(&state))
		if state == "completed" {
			return
		}
		require.Contains(t, []string{"available", "running", "scheduled", "retryable", "pending"}, state,
			"the submit_refund job of %s", id)
		require.True(t, time.Now().Before(deadline), "the submit_refund job of %s is still %s", id, state)
		time.Sleep(5 * time.Millisecond)
	}
}

// sagaSnapshot is what the books and the refund requests say once every
// step arrived, in terms every World shares: request ids (random per
// World) are named by their refund's pspReference, and the confirmation
// of a refund that failed in the end, sent only when its success arrived
// first, is left out.
func sagaSnapshot(t *rapid.T, w *adyenSagaWorld, run sagaRun) (worldtest.Snapshot, []string) {
	var payments []string
	for _, p := range run.truth {
		payments = append(payments, p.psp)
	}
	s := w.Snapshot(t, payments)
	var emails []string
	for _, e := range s.Emails {
		f := strings.Fields(e)
		require.GreaterOrEqual(t, len(f), 2, "an email intent names its kind and object: %q", e)
		if f[0] == string(jobs.EmailRefundConfirmation) && run.fates[f[1]] != "succeeded" {
			continue
		}
		if psp, ok := run.requests[f[1]]; ok {
			e = strings.Replace(e, f[1], "request-of-"+psp, 1)
		}
		emails = append(emails, e)
	}
	slices.Sort(emails)
	s.Emails = emails
	rows, err := w.Pool.Query(context.Background(), `
		SELECT id, amount::text || ' ' || currency || ' ' || state || ' ' || coalesce(provider_refund_id, '-') || ' ' || coalesce(failure_reason, '')
		FROM refund_requests WHERE payment_id = ANY($1)`, payments)
	require.NoError(t, err)
	var requests []string
	for rows.Next() {
		var id, desc string
		require.NoError(t, rows.Scan(&id, &desc))
		psp := run.requests[id]
		require.NotEmpty(t, psp, "request %s is one the case asked for", id)
		require.Contains(t, desc, " "+psp+" ", "request %s names the refund Adyen made for it", id)
		requests = append(requests, desc)
	}
	require.NoError(t, rows.Err())
	slices.Sort(requests)
	return s, requests
}

// TestAdyenSagaRefundsAnyOrderSameBooks is the order property for refunds
// paygate starts at Adyen: the saga submits each refund, Adyen makes it
// and its 201 reaches paygate at any point among the REFUND (success true
// or false) and the REFUND_FAILED or REFUNDED_REVERSED that follow, which
// arrive in any order and duplicated, through concurrent workers or all
// at once. Every order gives the same payments, ledger, emails and refund
// requests as Adyen's own order, the books balance, each request ends as
// Adyen decided, and what is refunded is what Adyen kept refunded.
func TestAdyenSagaRefundsAnyOrderSameBooks(t *testing.T) {
	t.Parallel()
	canonical := newAdyenSagaWorld(t, true)
	shuffled := newAdyenSagaWorld(t, false)
	batched := newAdyenSagaWorld(t, false)

	rapid.Check(t, func(rt *rapid.T) {
		plan := drawAdyenSagaPlan(rt)
		seed := adyensim.New(adyensim.Config{}).Seed() // fresh references: the Worlds outlive each case
		runs := map[*adyenSagaWorld]sagaRun{}
		for _, w := range []*adyenSagaWorld{canonical, shuffled, batched} {
			runs[w] = w.play(rt, plan, seed)
		}
		steps := runs[canonical].steps
		var delivery []int
		for i, s := range steps {
			copies := 1
			if s.release == "" {
				copies = rapid.IntRange(1, 3).Draw(rt, "copies")
			}
			for range copies {
				delivery = append(delivery, i)
			}
		}
		order := rapid.Permutation(delivery).Draw(rt, "order")
		atOnce := rapid.Permutation(delivery).Draw(rt, "order_at_once")
		pick := func(run sagaRun, idx []int) []sagaStep {
			var out []sagaStep
			released := map[int]bool{}
			for _, i := range idx {
				if run.steps[i].release != "" && released[i] {
					continue
				}
				released[i] = true
				out = append(out, run.steps[i])
			}
			return out
		}

		canonical.apply(rt, steps)
		shuffled.apply(rt, pick(runs[shuffled], order))
		batched.applyAtOnce(rt, pick(runs[batched], atOnce))

		want, wantRequests := sagaSnapshot(rt, canonical, runs[canonical])
		for name, w := range map[string]*adyenSagaWorld{"shuffled with duplicates": shuffled, "all at once": batched} {
			got, gotRequests := sagaSnapshot(rt, w, runs[w])
			require.Equal(rt, want, got, "Adyen's order vs %s", name)
			require.Equal(rt, wantRequests, gotRequests, "refund requests: Adyen's order vs %s", name)
			for _, tb := range got.TrialBalance {
				require.Contains(rt, tb, "balanced=true")
			}
			require.Zero(rt, w.Count(rt, `SELECT count(*) FROM inbox_events WHERE status = 'poison'`))
		}
		for psp, fate := range runs[canonical].fates {
			want := "failed"
			if fate == "succeeded" {
				want = "succeeded"
			}
			require.Equal(rt, 1, canonical.Count(rt, `SELECT count(*) FROM refund_requests WHERE provider_refund_id = $1 AND state = $2`, psp, want),
				"refund %s (%s) ends %s", psp, fate, want)
		}
		requireAdyenTruth(rt, canonical.World, runs[canonical].truth)
	})
}
