package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/stripesim"
)

// withWords is events as Stripe sends them for a PaymentIntent created with
// a customer and a description (the simulator's have neither): each of its
// PaymentIntent and charge objects carries them.
func withWords(t *testing.T, events []stripesim.Event, p *stripesim.Payment, customer, description string) []stripesim.Event {
	t.Helper()
	out := make([]stripesim.Event, len(events))
	for i, ev := range events {
		out[i] = ev
		if ev.PaymentIntentID != p.ID {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(ev.Payload))
		dec.UseNumber()
		var env map[string]any
		require.NoError(t, dec.Decode(&env))
		obj := env["data"].(map[string]any)["object"].(map[string]any)
		if o := obj["object"]; o != "payment_intent" && o != "charge" {
			continue
		}
		obj["customer"], obj["description"] = customer, description
		raw, err := json.MarshalIndent(env, "", "  ")
		require.NoError(t, err)
		out[i].Payload = raw
	}
	return out
}

// pay runs a payment at the simulator with the merchant's words and
// applies its events.
func (b *refundBundle) pay(t *testing.T, opts stripesim.PayOpts, customer, description string) *stripesim.Payment {
	t.Helper()
	p := b.sim.Pay(opts)
	events := b.sim.Events()
	if customer != "" || description != "" {
		events = withWords(t, events, p, customer, description)
	}
	b.world.Apply(t, events[b.seen:]...)
	b.seen = len(events)
	return p
}

func search(t *testing.T, ctx context.Context, base, term string) {
	t.Helper()
	run(t, ctx,
		chromedp.Navigate(base+"/console/payments"),
		chromedp.WaitVisible(chromedp.CSS("#payment-q")),
		chromedp.SendKeys(chromedp.CSS("#payment-q"), term),
		// The form's page carries a mark the answer's page does not, so
		// the wait below is for the answer, not the form's own heading.
		chromedp.Evaluate[chromedp.Void](`document.body.dataset.searching = "1"`),
		chromedp.Click(chromedp.CSS("#payment-search-submit")),
		chromedp.WaitVisible(chromedp.CSS("body:not([data-searching]) main h1")),
	)
}

// TestPaymentSearchInBrowser: the payments' one search box opens the
// payment a term finds alone (by its id, its order's reference, its
// customer, and for ops its receipt email whatever its case), lists those
// a term finds together, and says so when it finds none; the list shows
// each payment's reference under its id; the payment's page shows the
// merchant's words, "—" where none is known.
func TestPaymentSearchInBrowser(t *testing.T) {
	t.Parallel()
	b := setupRefunds(t)
	ada := b.pay(t, stripesim.PayOpts{Amount: 2450, Currency: "eur", Email: "Ada.Lovelace@Example.com",
		Metadata: map[string]string{"order_id": "ord_1001", "channel": "web", "gift_note": "Happy birthday!"}},
		"cus_ada", "2 × espresso beans, 1 kg")
	bob1 := b.pay(t, stripesim.PayOpts{Amount: 1200, Metadata: map[string]string{"order_id": "ord_1002"}}, "cus_bob", "")
	bob2 := b.pay(t, stripesim.PayOpts{Amount: 1300, Metadata: map[string]string{"order_id": "ord_1003"}}, "cus_bob", "")
	bare := b.pay(t, stripesim.PayOpts{Amount: 999}, "", "")

	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, opsTok)
	opened := func(id string) {
		t.Helper()
		run(t, ctx, chromedp.WaitVisible(chromedp.CSS("#payment-status")))
		require.Contains(t, textOf(t, ctx, "main h1"), id)
		require.Equal(t, "/console/payments?"+url.Values{"id": {id}}.Encode(), eval[string](t, ctx, `location.pathname + location.search`))
	}

	// One match opens the payment: by its id, its order, its email (ops).
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/payments"), chromedp.WaitVisible(chromedp.CSS("#payment-q")))
	require.Contains(t, eval[string](t, ctx, `document.querySelector('#payment-q').placeholder`), "email")
	for _, term := range []string{ada.ID, "ord_1001", " ord_1001 ", "cus_ada", "ada.lovelace@example.com", "ADA.LOVELACE@EXAMPLE.COM"} {
		search(t, ctx, b.srv.URL, term)
		opened(ada.ID)
	}

	// The payment's page: reference, customer, description, metadata.
	require.Contains(t, textOf(t, ctx, "#payment-reference"), "ord_1001")
	require.Contains(t, textOf(t, ctx, "#payment-customer"), "cus_ada")
	require.Equal(t, "2 × espresso beans, 1 kg", textOf(t, ctx, "#payment-description"))
	require.Equal(t, [][]string{{"channel", "web"}, {"gift_note", "Happy birthday!"}, {"order_id", "ord_1001"}},
		eval[[][]string](t, ctx, `[...document.querySelectorAll('#payment-metadata tr')].map(r => [...r.cells].map(c => c.textContent))`))

	// Several matches are listed, each with its order under its id.
	search(t, ctx, b.srv.URL, "cus_bob")
	require.Contains(t, textOf(t, ctx, "main h1"), "Payments matching")
	require.Equal(t, "cus_bob", textOf(t, ctx, "#search-term"))
	rows := func() [][]string {
		return eval[[][]string](t, ctx, `[...document.querySelectorAll('#payments tr.payment-row')].map(r => [r.dataset.id, (r.querySelector('.payment-reference') || {}).textContent || ''])`)
	}
	require.Equal(t, [][]string{{bob2.ID, "ord_1003"}, {bob1.ID, "ord_1002"}}, rows(), "newest first, each with its order")
	run(t, ctx, chromedp.Click(chromedp.CSS(`#payments tr.payment-row[data-id="`+bob1.ID+`"] a.id`)))
	opened(bob1.ID)
	require.Equal(t, "—", textOf(t, ctx, "#payment-description"))
	// From a payment to its customer's others.
	run(t, ctx, chromedp.Click(chromedp.CSS("#customer-payments")), chromedp.WaitVisible(chromedp.CSS("#payments")))
	require.Len(t, rows(), 2)
	require.Contains(t, textOf(t, ctx, "main h1"), "Payments of customer")
	require.Equal(t, "cus_bob", textOf(t, ctx, "#search-term"))

	// None: said so, with what the box finds.
	search(t, ctx, b.srv.URL, "ord_404")
	none := textOf(t, ctx, "#search-none")
	require.Contains(t, none, "No payment matches ord_404")
	require.Contains(t, none, "receipt email")
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#payments').length`))

	// The whole list: references under the ids that have one, none under
	// the payment without.
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/payments"), chromedp.WaitVisible(chromedp.CSS("#payments")))
	require.Equal(t, [][]string{{bare.ID, ""}, {bob2.ID, "ord_1003"}, {bob1.ID, "ord_1002"}, {ada.ID, "ord_1001"}}, rows())
	refBox := eval[map[string]float64](t, ctx, `(() => { const r = document.querySelector('#payments .payment-reference'), id = r.parentElement.querySelector('a.id'); const a = r.getBoundingClientRect(), b = id.getBoundingClientRect(); return {below: a.top - b.bottom, size: parseFloat(getComputedStyle(r).fontSize), idSize: parseFloat(getComputedStyle(id).fontSize)} })()`)
	require.GreaterOrEqual(t, refBox["below"], -0.5, "the reference sits under the id")
	require.Less(t, refBox["size"], refBox["idSize"], "smaller than the id")
	require.Equal(t, "rgb(105, 115, 134)", eval[string](t, ctx, `getComputedStyle(document.querySelector('#payments .payment-reference')).color`), "muted")

	// A payment of which nothing is known: dashes, no metadata table.
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/payments?id="+bare.ID), chromedp.WaitVisible(chromedp.CSS("#payment-details")))
	for _, sel := range []string{"#payment-reference", "#payment-customer", "#payment-description", "#payment-metadata-none"} {
		require.Equal(t, "—", textOf(t, ctx, sel), sel)
	}
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#payment-metadata').length`))

	// Finance searches by id, order and customer, not by email.
	signOut(t, ctx)
	signIn(t, ctx, b.srv.URL, financeTok)
	search(t, ctx, b.srv.URL, "ord_1001")
	opened(ada.ID)
	require.NotContains(t, eval[string](t, ctx, `document.querySelector('#payment-q').placeholder`), "email")
	search(t, ctx, b.srv.URL, "ada.lovelace@example.com")
	require.Contains(t, textOf(t, ctx, "#search-none"), "No payment matches")
	require.NotContains(t, textOf(t, ctx, "#search-none"), "email")
}

// doubleCharges reads the API's double charges in a state, independently
// of the console.
func (b *refundBundle) doubleCharges(t *testing.T, state string) []api.DoubleChargeView {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "/v1/ops/double-charges?state="+state, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+opsTok)
	rec := httptest.NewRecorder()
	b.echo.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var page api.DoubleChargePage
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &page))
	return page.DoubleCharges
}

// TestDoubleChargesInBrowser: ops and finance find the open double charges
// in the navigation, each with its payments; ops refund one payment from
// there (the payment's Refund form, its Idempotency-Key, back on the same
// page) until the double charge resolves, and dismiss another with a note
// (required); finance reads the same page without a form.
func TestDoubleChargesInBrowser(t *testing.T) {
	t.Parallel()
	b := setupRefunds(t)
	twice := map[string]string{"order_id": "ord_2002"}
	first := b.pay(t, stripesim.PayOpts{Amount: 4999, Metadata: twice}, "", "")
	second := b.pay(t, stripesim.PayOpts{Amount: 4999, Metadata: twice}, "", "")
	parts := map[string]string{"order_id": "ord_3003"}
	partA := b.pay(t, stripesim.PayOpts{Amount: 10000, Metadata: parts}, "", "")
	partB := b.pay(t, stripesim.PayOpts{Amount: 5000, Metadata: parts}, "", "")
	b.pay(t, stripesim.PayOpts{Amount: 700, Metadata: map[string]string{"order_id": "ord_once"}}, "", "")
	require.Len(t, b.doubleCharges(t, "open"), 2)

	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, opsTok)
	run(t, ctx, chromedp.Click(chromedp.CSS(`nav.main a[href="/console/double-charges"]`)), chromedp.WaitVisible(chromedp.CSS("section.double-charge")))
	sections := func() []string {
		return eval[[]string](t, ctx, `[...document.querySelectorAll('section.double-charge')].map(s => s.dataset.reference)`)
	}
	require.ElementsMatch(t, []string{"ord_2002", "ord_3003"}, sections())
	dc := `section.double-charge[data-reference="ord_2002"]`
	payments := eval[[][]string](t, ctx, `[...document.querySelectorAll('`+dc+` tr.dc-payment')].map(r => [...r.cells].slice(0, 6).map(c => c.textContent.trim()))`)
	require.Equal(t, [][]string{
		{first.ID, "stripe", "succeeded", "usd", "$49.99", "$0.00"},
		{second.ID, "stripe", "succeeded", "usd", "$49.99", "$0.00"},
	}, payments)
	require.Contains(t, textOf(t, ctx, dc+" .dc-head"), "detected")
	require.Equal(t, "/console/payments?id="+second.ID, eval[string](t, ctx,
		`document.querySelector('`+dc+` tr.dc-payment[data-id="`+second.ID+`"] a.id').getAttribute('href')`))

	// Refund the second payment from here.
	row := dc + ` tr.dc-payment[data-id="` + second.ID + `"]`
	run(t, ctx, chromedp.Click(chromedp.CSS(row+" details.refund summary")), chromedp.WaitVisible(chromedp.CSS(row+" .refund-amount")))
	require.Equal(t, "49.99", eval[string](t, ctx, `document.querySelector('`+row+` .refund-amount').value`), "everything refundable")
	require.Equal(t, "duplicate", eval[string](t, ctx, `document.querySelector('`+row+` .refund-reason').value`))
	run(t, ctx,
		chromedp.SendKeys(chromedp.CSS(row+" .refund-note"), "charged twice for ord_2002"),
		chromedp.Click(chromedp.CSS(row+" .refund-submit")),
		chromedp.WaitVisible(chromedp.CSS(".flash.ok")),
	)
	require.Contains(t, textOf(t, ctx, ".flash.ok"), "Refund of $49.99 requested")
	require.Equal(t, "/console/double-charges", eval[string](t, ctx, `location.pathname`), "back on the double charges")
	rs := b.requests(t, second.ID)
	require.Len(t, rs, 1)
	require.Equal(t, "49.99", rs[0].Amount)
	require.Equal(t, "duplicate", *rs[0].Reason)
	require.Contains(t, rs[0].Actor, "alice")
	require.Empty(t, b.requests(t, first.ID))
	require.Contains(t, textOf(t, ctx, row+" .dc-refund"), "refund on its way")
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('`+row+` .refund-form').length`), "nothing left to refund while it is on its way")

	// Stripe refunds it; once its events are applied the double charge is
	// resolved: no longer open, listed as resolved.
	require.Eventually(t, func() bool { return len(b.sim.Refunds(second)) == 1 }, 30*time.Second, 50*time.Millisecond)
	b.deliver(t)
	require.Eventually(t, func() bool { return len(b.doubleCharges(t, "resolved")) == 1 }, 30*time.Second, 50*time.Millisecond)
	run(t, ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("section.double-charge")))
	require.Equal(t, []string{"ord_3003"}, sections())
	run(t, ctx, chromedp.Click(chromedp.CSS(`#dc-tabs a[data-state="resolved"]`)), chromedp.WaitVisible(chromedp.CSS("section.double-charge")))
	require.Equal(t, []string{"ord_2002"}, sections())
	require.Contains(t, textOf(t, ctx, dc+" .dc-head"), "resolved")
	require.Equal(t, []string{"$49.99", "$49.99"}, eval[[]string](t, ctx, `[...document.querySelector('`+row+`').cells].slice(4, 6).map(c => c.textContent.trim())`),
		"captured, and refunded")
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('section.double-charge form').length`), "no action on a resolved one")

	// Dismiss the other: a note is required, by the console as by the API.
	other := `section.double-charge[data-reference="ord_3003"]`
	run(t, ctx, chromedp.Click(chromedp.CSS(`#dc-tabs a[data-state="open"]`)), chromedp.WaitVisible(chromedp.CSS(other)))
	require.ElementsMatch(t, []string{partA.ID, partB.ID}, eval[[]string](t, ctx, `[...document.querySelectorAll('`+other+` tr.dc-payment')].map(r => r.dataset.id)`))
	run(t, ctx, chromedp.Click(chromedp.CSS(other+" details.dismiss summary")), chromedp.WaitVisible(chromedp.CSS(other+" .dc-dismiss-note")))
	require.True(t, eval[bool](t, ctx, `document.querySelector('`+other+` .dc-dismiss-note').required`))
	eval[bool](t, ctx, `(() => { const n = document.querySelector('`+other+` .dc-dismiss-note'); n.required = false; n.value = '   '; return true })()`)
	run(t, ctx, chromedp.Click(chromedp.CSS(other+" .dc-dismiss-submit")), chromedp.WaitVisible(chromedp.CSS(".flash.error")))
	require.Contains(t, textOf(t, ctx, ".flash.error"), "needs a note")
	require.Len(t, b.doubleCharges(t, "open"), 1, "nothing dismissed without a note")
	const note = "ord_3003 is paid in two instalments, by contract"
	run(t, ctx,
		chromedp.Click(chromedp.CSS(other+" details.dismiss summary")),
		chromedp.WaitVisible(chromedp.CSS(other+" .dc-dismiss-note")),
		chromedp.SendKeys(chromedp.CSS(other+" .dc-dismiss-note"), note),
		chromedp.Click(chromedp.CSS(other+" .dc-dismiss-submit")),
		chromedp.WaitVisible(chromedp.CSS(".flash.ok")),
	)
	require.Contains(t, textOf(t, ctx, ".flash.ok"), "Dismissed the double charge of ord_3003")
	require.Equal(t, "No open double charges.", textOf(t, ctx, "#dc-none"))
	dismissed := b.doubleCharges(t, "dismissed")
	require.Len(t, dismissed, 1)
	require.Equal(t, note, *dismissed[0].Note)
	require.Contains(t, *dismissed[0].DismissedBy, "alice")
	run(t, ctx, chromedp.Click(chromedp.CSS(`#dc-tabs a[data-state="dismissed"]`)), chromedp.WaitVisible(chromedp.CSS(other)))
	require.Contains(t, textOf(t, ctx, other+" .dc-note"), note)
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/audit"), chromedp.WaitVisible(chromedp.CSS("#audit")))
	require.Contains(t, textOf(t, ctx, "#audit"), note)

	// Finance reads them, without a form.
	signOut(t, ctx)
	signIn(t, ctx, b.srv.URL, financeTok)
	run(t, ctx, chromedp.Click(chromedp.CSS(`nav.main a[href="/console/double-charges"]`)), chromedp.WaitVisible(chromedp.CSS("#dc-none")))
	run(t, ctx, chromedp.Click(chromedp.CSS(`#dc-tabs a[data-state="dismissed"]`)), chromedp.WaitVisible(chromedp.CSS(other)))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('.dc-dismiss, .refund-form, details.refund').length`))
	// Nor can finance post the dismissal by hand.
	c := client(t)
	require.Equal(t, http.StatusSeeOther, postForm(t, c, b.srv.URL+"/console/signin", url.Values{"token": {financeTok}}).StatusCode)
	csrf := regexp.MustCompile(`name="csrf" value="([^"]*)"`).FindStringSubmatch(getPage(t, c, b.srv.URL+"/console/double-charges"))[1]
	resp := postForm(t, c, b.srv.URL+"/console/double-charges/dismiss",
		url.Values{"csrf": {csrf}, "idempotency_key": {"finance-try"}, "reference": {"ord_2002"}, "note": {"n"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}
