package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/console"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	striperef "github.com/paygate/paygate/provider/stripe"
)

type refundBundle struct {
	sim   *stripesim.Sim
	world *worldtest.World
	echo  *echo.Echo
	srv   *httptest.Server
	seen  int // events of sim already applied
	// refundPosts counts the Refund form's submissions that reached the
	// server.
	refundPosts atomic.Int32
}

// setupRefunds serves the API and the console over a world whose workers
// run, the submit_refund worker calling the Stripe simulator through
// paygate's own client: a refund asked for in the browser goes to "Stripe"
// and settles when the test delivers the simulator's events. Refund posts
// are held back a little, as a slow network would, so that a second click
// lands while the first is still on its way.
func setupRefunds(t *testing.T) *refundBundle {
	t.Helper()
	sim := stripesim.New(stripesim.Config{})
	simSrv := sim.Start(t)
	client, err := striperef.NewAPI(striperef.APIConfig{APIKey: sim.APIKey(), URL: simSrv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	world := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.Refunders = map[string]provider.Refunder{"stripe": client}
	}})
	e, apiSrv := api.NewEcho(api.Config{Pool: world.Pool, Jobs: world.Jobs, OpsTokens: []string{"alice:" + opsTok}, FinanceTokens: []string{financeTok}})
	con, err := console.New(console.Config{API: e, Pool: world.Pool, Tokens: apiSrv.TokenOf})
	require.NoError(t, err)
	con.Register(e)
	b := &refundBundle{sim: sim, world: world, echo: e}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/refunds") {
			b.refundPosts.Add(1)
			time.Sleep(300 * time.Millisecond)
		}
		e.ServeHTTP(w, r)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// deliver applies the simulator's events not applied yet, as its webhooks
// would deliver them.
func (b *refundBundle) deliver(t *testing.T) {
	t.Helper()
	events := b.sim.Events()
	b.world.Apply(t, events[b.seen:]...)
	b.seen = len(events)
}

// requests reads a payment's refund requests from the API, independently
// of the console.
func (b *refundBundle) requests(t *testing.T, paymentID string) []api.RefundRequestView {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/v1/payments/"+paymentID+"/refund-requests", nil)
	req.Header.Set("Authorization", "Bearer "+opsTok)
	rec := httptest.NewRecorder()
	b.echo.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var v api.RefundRequestList
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	return v.RefundRequests
}

func rowState(t *testing.T, ctx context.Context, id string) string {
	t.Helper()
	return eval[string](t, ctx, `(() => { const r = document.querySelector('#refund-requests tr.refund-row[data-id="`+id+`"]'); return r ? r.dataset.state : '' })()`)
}

// TestRefundFromPaymentInBrowser: ops refund from the payment page; two
// fast clicks are one refund request, whose progress the page shows as
// Stripe takes it and its events settle it; the API's refusal is shown as
// it wrote it; finance reads the same page without the form.
func TestRefundFromPaymentInBrowser(t *testing.T) {
	t.Parallel()
	b := setupRefunds(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd"})
	b.deliver(t)
	page := b.srv.URL + "/console/payments?" + url.Values{"id": {p.ID}}.Encode()

	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, opsTok)
	run(t, ctx, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS("#payment-status")))
	require.Equal(t, "$360.00", textOf(t, ctx, "#payment-amount"))
	run(t, ctx, chromedp.Click(chromedp.CSS("#refund summary")), chromedp.WaitVisible(chromedp.CSS("#refund-amount")))
	require.Equal(t, "360.00", eval[string](t, ctx, `document.querySelector('#refund-amount').value`), "the default: everything refundable")

	// Over the refundable amount: the API refuses, and says why.
	run(t, ctx,
		chromedp.SetValue(chromedp.CSS("#refund-amount"), "360.01"),
		chromedp.Click(chromedp.CSS("#refund-submit")),
		chromedp.WaitVisible(chromedp.CSS(".flash.error")),
	)
	require.Contains(t, textOf(t, ctx, ".flash.error"), "(422)")
	require.Empty(t, b.requests(t, p.ID), "a refusal records nothing")

	// Two clicks on Refund, the second while the first is in flight: both
	// reach the server, and the form's one Idempotency-Key makes them one
	// refund request.
	posts := b.refundPosts.Load()
	run(t, ctx,
		chromedp.Click(chromedp.CSS("#refund summary")),
		chromedp.WaitVisible(chromedp.CSS("#refund-amount")),
		chromedp.SetValue(chromedp.CSS("#refund-amount"), "25.50"),
		chromedp.SetValue(chromedp.CSS("#refund-reason"), "requested_by_customer"),
		chromedp.SetValue(chromedp.CSS("#refund-note"), "parcel lost"),
	)
	eval[bool](t, ctx, `(() => { const b = document.querySelector('#refund-submit'); b.click(); setTimeout(() => b.click(), 80); return true })()`)
	require.Eventually(t, func() bool { return b.refundPosts.Load() == posts+2 }, 10*time.Second, 20*time.Millisecond,
		"both clicks must reach the server (got %d)", b.refundPosts.Load()-posts)
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS("#refund-requests")))
	time.Sleep(200 * time.Millisecond) // let a straggling duplicate finish before counting
	rs := b.requests(t, p.ID)
	require.Len(t, rs, 1, "two clicks, one refund request")
	r := rs[0]
	require.Equal(t, "25.50", r.Amount)
	require.Equal(t, "requested_by_customer", *r.Reason)
	require.Equal(t, "parcel lost", *r.Note)
	require.Contains(t, r.Actor, "alice")
	run(t, ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#refund-requests")))
	require.Equal(t, 1, eval[int](t, ctx, `document.querySelectorAll('#refund-requests tr.refund-row').length`))
	require.Contains(t, []string{"requested", "submitted"}, rowState(t, ctx, r.ID), "open until Stripe's events settle it")
	require.Contains(t, textOf(t, ctx, "#refund-requests"), "$25.50")
	require.Contains(t, textOf(t, ctx, "#refunds-open"), "reload")

	// Stripe took it: submitted, with Stripe's refund id.
	require.Eventually(t, func() bool { return len(b.sim.Refunds(p)) == 1 }, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return b.requests(t, p.ID)[0].ProviderRefundID != nil }, 30*time.Second, 50*time.Millisecond)
	run(t, ctx, chromedp.Click(chromedp.CSS("#refunds-reload")), chromedp.WaitVisible(chromedp.CSS("#refund-requests")))
	require.Equal(t, "submitted", rowState(t, ctx, r.ID))
	require.Contains(t, textOf(t, ctx, "#refund-requests"), b.sim.Refunds(p)[0].ID)
	require.Equal(t, "334.50", eval[string](t, ctx, `document.querySelector('#refund-amount').value`), "the open request is not refundable twice")

	// Its events settle it: succeeded, and the payment shows the refund.
	b.deliver(t)
	require.Eventually(t, func() bool { return b.requests(t, p.ID)[0].State == "succeeded" }, 30*time.Second, 50*time.Millisecond)
	run(t, ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#refund-requests")))
	require.Equal(t, "succeeded", rowState(t, ctx, r.ID))
	require.Equal(t, "$25.50", textOf(t, ctx, "#payment-refunded"))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#refunds-open').length`), "nothing left to wait for")
	require.Equal(t, "334.50", eval[string](t, ctx, `document.querySelector('#refund-amount').value`))

	// Finance reads payments, from the list in the nav, without the form,
	// and follows the payment's history to its events, without actions.
	run(t, ctx, chromedp.Click(chromedp.CSS("form.who button")), chromedp.WaitVisible(chromedp.CSS("#token")))
	signIn(t, ctx, b.srv.URL, financeTok)
	run(t, ctx,
		chromedp.Click(chromedp.CSS(`nav.main a[href="/console/payments"]`)),
		chromedp.WaitVisible(chromedp.CSS("#payments")),
	)
	require.Contains(t, textOf(t, ctx, "#payments"), "$360.00")
	run(t, ctx, chromedp.Click(chromedp.CSS(`#payments a.id`)), chromedp.WaitVisible(chromedp.CSS("#refund-requests")))
	require.Equal(t, "partially_refunded", textOf(t, ctx, "#payment-status"))
	require.Equal(t, "succeeded", rowState(t, ctx, r.ID))
	require.True(t, eval[bool](t, ctx, `document.documentElement.scrollWidth <= window.innerWidth`), "the payment page fits its window")
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#refund, #refund-form, #refund-none, form[action$="/refunds"]').length`),
		"finance sees no refund form")
	run(t, ctx, chromedp.Click(chromedp.CSS(`ol.timeline a.id`)), chromedp.WaitVisible(chromedp.CSS("#event-status")))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#replay, #discard').length`), "no ops action for finance")

	// Nor can finance post the form by hand: the console refuses before
	// the API is asked.
	c := client(t)
	require.Equal(t, http.StatusSeeOther, postForm(t, c, b.srv.URL+"/console/signin", url.Values{"token": {financeTok}}).StatusCode)
	csrf := regexp.MustCompile(`name="csrf" value="([^"]*)"`).FindStringSubmatch(getPage(t, c, page))[1]
	resp := postForm(t, c, b.srv.URL+"/console/payments/"+p.ID+"/refunds",
		url.Values{"csrf": {csrf}, "idempotency_key": {"finance-try"}, "amount": {"1.00"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Len(t, b.requests(t, p.ID), 1)
}
