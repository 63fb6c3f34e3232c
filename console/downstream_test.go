package console_test

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/console"
	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/outbox"
)

type downstreamBundle struct {
	pool       *pgxpool.Pool
	jobs       *jobs.Client
	echo       *echo.Echo
	srv        *httptest.Server
	relay      *delivery.Relay
	dispatcher *delivery.Dispatcher
}

// setupDownstream serves the API, with endpoints that may be on this
// machine, and the console on a fresh database. River only inserts: the
// test moves messages itself, with the relay's Step and a Dispatch, so it
// knows when a delivery was made. A failed attempt is retried at once.
func setupDownstream(t *testing.T) *downstreamBundle {
	t.Helper()
	pool := testdb.New(t)
	guard := delivery.GuardConfig{AllowPrivate: true}
	dispatcher := delivery.NewDispatcher(delivery.DispatcherConfig{
		Pool:     pool,
		Sender:   delivery.NewSender(delivery.SenderConfig{Guard: guard, Timeout: 5 * time.Second}),
		Schedule: []time.Duration{time.Millisecond},
		Jitter:   func(d time.Duration) time.Duration { return d },
	})
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true, Register: func(w *river.Workers) []*river.PeriodicJob {
		river.AddWorker(w, &delivery.DeliverWorker{Dispatcher: dispatcher})
		return nil
	}})
	require.NoError(t, err)
	e, apiSrv := api.NewEcho(api.Config{Pool: pool, Jobs: jc, OpsTokens: []string{"alice:" + opsTok}, FinanceTokens: []string{financeTok},
		Delivery: delivery.NewStore(pool, guard)})
	con, err := console.New(console.Config{API: e, Pool: pool, Tokens: apiSrv.TokenOf})
	require.NoError(t, err)
	con.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &downstreamBundle{pool: pool, jobs: jc, echo: e, srv: srv, dispatcher: dispatcher,
		relay: delivery.NewRelay(delivery.RelayConfig{Pool: pool, River: jc.River})}
}

// writeMessage commits the first message of payment id, as applying an
// event would, and returns its id.
func (b *downstreamBundle) writeMessage(t *testing.T, id string) string {
	t.Helper()
	m, err := outbox.New(outbox.AggregatePayment, id, 1, "payment.succeeded", time.Now(),
		outbox.PaymentData{Payment: outbox.PaymentView{ID: id, Provider: "stripe", Status: "succeeded", Currency: "usd",
			Amount: "12.00", AmountCaptured: "12.00", AmountRefunded: "0.00", AmountDisputed: "0.00", UpdatedAt: time.Now()}})
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return outbox.WriteTx(ctx, tx, []outbox.Message{m}) }))
	return m.ID
}

// apiAnswer reads the API directly, as a check independent of the console.
func (b *downstreamBundle) apiAnswer(t *testing.T, path string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+opsTok)
	rec := httptest.NewRecorder()
	b.echo.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func (b *downstreamBundle) secret(t *testing.T, endpointID string) string {
	t.Helper()
	code, body := b.apiAnswer(t, "/v1/endpoints/"+endpointID+"/secret")
	require.Equal(t, http.StatusOK, code, body)
	m := regexp.MustCompile(`"secret": "([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m, body)
	return m[1]
}

// receiver is the merchant's endpoint: it answers its first request 503,
// the others 204.
type receiver struct {
	mu         sync.Mutex
	bodies     []string
	signatures []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, string(body))
	r.signatures = append(r.signatures, req.Header.Get("webhook-signature"))
	first := len(r.bodies) == 1
	r.mu.Unlock()
	if first {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "try later")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) requests() ([]string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bodies...), append([]string(nil), r.signatures...)
}

func TestDownstreamInBrowser(t *testing.T) {
	t.Parallel()
	b := setupDownstream(t)
	recv := &receiver{}
	merchant := httptest.NewServer(recv)
	t.Cleanup(merchant.Close)
	// Written before the endpoint exists: never given to it, until a
	// recovery asks for it.
	before := b.writeMessage(t, "pi_before")

	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, opsTok)
	require.Contains(t, textOf(t, ctx, "nav.main"), "Downstream")
	run(t, ctx,
		chromedp.Click(chromedp.CSS(`nav.main a[href="/console/endpoints"]`)),
		chromedp.WaitVisible(chromedp.CSS("#create-endpoint")),
	)
	require.Contains(t, textOf(t, ctx, "p.empty"), "No endpoints yet")
	require.True(t, eval[bool](t, ctx, `document.querySelector('#type-all').checked`), "all types by default")

	// Created: the secret is shown once, and is the API's.
	run(t, ctx,
		chromedp.SetValue(chromedp.CSS("#endpoint-url"), merchant.URL+"/paygate"),
		chromedp.SetValue(chromedp.CSS("#endpoint-description"), "orders service"),
		chromedp.Click(chromedp.CSS("#create-endpoint button")),
		chromedp.WaitVisible(chromedp.CSS("#secret-box")),
	)
	id := strings.TrimPrefix(eval[string](t, ctx, `location.pathname`), "/console/endpoints/")
	require.True(t, strings.HasPrefix(id, "ep_"), id)
	secret := textOf(t, ctx, "#secret")
	require.True(t, strings.HasPrefix(secret, "whsec_"), secret)
	require.Equal(t, b.secret(t, id), secret)
	require.Contains(t, textOf(t, ctx, "#secret-box"), "Shown once")
	require.Contains(t, textOf(t, ctx, "#secret-box"), "/v1/endpoints/"+id+"/secret")
	require.Contains(t, textOf(t, ctx, ".flash.ok"), "Endpoint created")
	require.Equal(t, "enabled", textOf(t, ctx, "#endpoint-health"))
	run(t, ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#endpoint-facts")))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#secret-box').length`), "shown once")
	require.NotContains(t, textOf(t, ctx, "body"), secret)

	// Disabled with the operator's reason, then enabled again.
	run(t, ctx, chromedp.Click(chromedp.CSS("#disable")), chromedp.WaitVisible(chromedp.CSS("#enable")))
	require.Equal(t, "disabled", textOf(t, ctx, "#endpoint-status"))
	require.Equal(t, "disabled", textOf(t, ctx, "#endpoint-health"))
	require.Equal(t, "disabled by an operator", textOf(t, ctx, "#disabled-reason"))
	run(t, ctx, chromedp.Click(chromedp.CSS("#enable")), chromedp.WaitVisible(chromedp.CSS("#disable")))
	require.Equal(t, "enabled", textOf(t, ctx, "#endpoint-status"))
	require.Contains(t, textOf(t, ctx, ".flash.ok"), "Enabled")

	// Rotation needs its confirmation, which the server checks too.
	eval[bool](t, ctx, `(() => { document.querySelector('#rotate-secret').submit(); return true })()`)
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(".flash.error")))
	require.Contains(t, textOf(t, ctx, ".flash.error"), "not rotated")
	require.Equal(t, secret, b.secret(t, id))
	run(t, ctx,
		chromedp.Click(chromedp.CSS("#rotate-confirm")),
		chromedp.Click(chromedp.CSS("#rotate-secret button")),
		chromedp.WaitVisible(chromedp.CSS("#secret-box")),
	)
	rotated := textOf(t, ctx, "#secret")
	require.NotEqual(t, secret, rotated)
	require.Equal(t, b.secret(t, id), rotated)
	require.Contains(t, textOf(t, ctx, "#secret-box"), "24 h")

	// A message delivered on the second attempt.
	msg := b.writeMessage(t, "pi_console")
	require.NoError(t, b.relay.Step(t.Context()))
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := b.dispatcher.Dispatch(t.Context(), b.jobs.River, id)
		require.NoError(t, err)
		if bodies, _ := recv.requests(); len(bodies) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	bodies, signatures := recv.requests()
	require.Len(t, bodies, 2)
	require.Contains(t, bodies[1], `"id":"pi_console"`)
	require.Len(t, strings.Fields(signatures[1]), 2, "the new secret and, for 24 h, the old one sign")

	run(t, ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#deliveries")))
	require.Equal(t, "healthy", textOf(t, ctx, "#endpoint-health"))
	row := `#deliveries tr.delivery-row[data-message="` + msg + `"]`
	require.Equal(t, "succeeded", eval[string](t, ctx, `document.querySelector('`+row+`').dataset.status`))
	require.Equal(t, "2", textOf(t, ctx, row+" td.num"))
	run(t, ctx,
		chromedp.SetValue(chromedp.CSS("#delivery-status-filter"), "failed"),
		chromedp.Click(chromedp.CSS("#delivery-filters button")),
		chromedp.WaitVisible(chromedp.CSS("#deliveries-all")),
	)
	require.Contains(t, textOf(t, ctx, "p.empty"), "No deliveries match")
	run(t, ctx,
		chromedp.Click(chromedp.CSS("#deliveries-all")),
		chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.Click(chromedp.CSS(row+" a.id")),
		chromedp.WaitVisible(chromedp.CSS("#attempts")),
	)

	// The delivery: its attempts with what the endpoint answered, and the
	// message.
	require.Equal(t, "succeeded", textOf(t, ctx, "#delivery-status"))
	require.Equal(t, []string{"503", "204"},
		eval[[]string](t, ctx, `[...document.querySelectorAll('#attempts tr.attempt-row')].map(r => r.dataset.status)`))
	require.Contains(t, textOf(t, ctx, `#attempts tr.attempt-row[data-attempt="1"]`), "try later")
	require.Contains(t, textOf(t, ctx, "#message-data"), "\"id\": \"pi_console\"", "the data is pretty-printed")
	require.Contains(t, textOf(t, ctx, "#message-facts"), "payment.succeeded")
	run(t, ctx, chromedp.Click(chromedp.CSS("#resend button")), chromedp.WaitVisible(chromedp.CSS(".flash.ok")))
	require.Contains(t, textOf(t, ctx, ".flash.ok"), "Resent")
	require.Equal(t, "pending", textOf(t, ctx, "#delivery-status"))

	// Recovery finds the message from before the endpoint; the one pending
	// again is left alone.
	run(t, ctx,
		chromedp.Click(chromedp.CSS(`main > p.small a`)),
		chromedp.WaitVisible(chromedp.CSS("#recover-since")),
		chromedp.SetValue(chromedp.CSS("#recover-since"), time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04")),
		chromedp.Click(chromedp.CSS("#recover button")),
		chromedp.WaitVisible(chromedp.CSS(".flash.ok")),
	)
	require.Equal(t, "1 message queued.", textOf(t, ctx, ".flash.ok"))
	require.Equal(t, "pending", eval[string](t, ctx, `document.querySelector('#deliveries tr.delivery-row[data-message="`+before+`"]').dataset.status`))

	// Deleted, once confirmed.
	run(t, ctx,
		chromedp.Click(chromedp.CSS("#delete-confirm")),
		chromedp.Click(chromedp.CSS("#delete-endpoint button")),
		chromedp.WaitVisible(chromedp.CSS("#create-endpoint")),
	)
	require.Contains(t, textOf(t, ctx, ".flash.ok"), "deleted")
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#endpoints').length`))
	code, _ := b.apiAnswer(t, "/v1/endpoints/"+id)
	require.Equal(t, http.StatusNotFound, code)

	// Finance sees neither the link nor the pages.
	run(t, ctx, chromedp.Click(chromedp.CSS("form.who button")), chromedp.WaitVisible(chromedp.CSS("#token")))
	signIn(t, ctx, b.srv.URL, financeTok)
	require.NotContains(t, textOf(t, ctx, "nav.main"), "Downstream")
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/endpoints"))
	require.Contains(t, textOf(t, ctx, "#refused"), "not available to your role")
}

// TestEndpointFormsOnce: a form sent twice is one action, and the second
// answer still shows the new endpoint's secret; a post without the
// session's token does nothing.
func TestEndpointFormsOnce(t *testing.T) {
	t.Parallel()
	b := setupDownstream(t)
	c := client(t)
	require.Equal(t, http.StatusSeeOther, postForm(t, c, b.srv.URL+"/console/signin", url.Values{"token": {opsTok}}).StatusCode)
	page := getPage(t, c, b.srv.URL+"/console/endpoints")
	form := url.Values{
		"csrf": {hidden(t, page, "create-endpoint", "csrf")}, "idempotency_key": {hidden(t, page, "create-endpoint", "idempotency_key")},
		"url": {"http://127.0.0.1:9/hook"}, "event_types": {"payment.succeeded", "refund_request.failed"},
	}
	noToken := url.Values{"idempotency_key": form["idempotency_key"], "url": form["url"], "event_types": form["event_types"]}
	require.Equal(t, http.StatusForbidden, postForm(t, c, b.srv.URL+"/console/endpoints", noToken).StatusCode)

	first := postForm(t, c, b.srv.URL+"/console/endpoints", form)
	second := postForm(t, c, b.srv.URL+"/console/endpoints", form)
	require.Equal(t, http.StatusSeeOther, first.StatusCode)
	require.Equal(t, first.Header.Get("Location"), second.Header.Get("Location"))
	_, list := b.apiAnswer(t, "/v1/endpoints")
	require.Equal(t, 1, strings.Count(list, `"id": "ep_`), list)
	id := strings.TrimPrefix(first.Header.Get("Location"), "/console/endpoints/")
	shown := html.UnescapeString(getPage(t, c, b.srv.URL+first.Header.Get("Location")))
	require.Contains(t, shown, `id="secret-box"`, "the replayed answer shows the secret")
	require.Contains(t, shown, b.secret(t, id))
	require.Contains(t, shown, "already done (the same form sent twice)")
	require.Contains(t, html.UnescapeString(getPage(t, c, b.srv.URL+"/console/endpoints")), `id="broker-state">Off: set`,
		"the broker's state beside the endpoints")

	// The API's refusal is shown on the form, which keeps what was typed.
	form.Set("idempotency_key", "console-other-key")
	form.Set("url", "ftp://127.0.0.1/hook")
	resp, err := c.PostForm(b.srv.URL+"/console/endpoints", form)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
	require.Contains(t, string(body), `id="create-error"`)
	require.Contains(t, string(body), `value="ftp://127.0.0.1/hook"`)
}
