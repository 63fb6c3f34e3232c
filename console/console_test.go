package console_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/console"
	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

const (
	opsTok     = "console-ops-token"
	financeTok = "console-finance-token"
)

type testBundle struct {
	pool      *pgxpool.Pool
	jobs      *jobs.Client
	echo      *echo.Echo
	srv       *httptest.Server
	reconcile *jobs.ReconcileWorker
	// replayPosts counts the console's replay form submissions that reached
	// the server.
	replayPosts atomic.Int32
}

// setup serves the real API and the console on a fresh database, with an
// insert-only River client: jobs are inserted, never worked. Replay form
// posts are held back a little, as a slow network would, so that a second
// click lands while the first is still on its way.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := testdb.New(t)
	// Reconciliation runs with the provider a server without
	// PAYGATE_STRIPE_API_KEY has; the worker is registered so that River
	// accepts its jobs, and run by hand where a test wants the outcome.
	worker := jobs.NewReconcileWorker(reconcile.New(reconcile.Config{
		Pool: pool, Provider: reconcile.Unavailable(stripe.Name, stripe.ErrNoAPIKey), RecoveryWait: -1,
	}), nil)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true, Register: func(w *river.Workers) []*river.PeriodicJob {
		river.AddWorker(w, worker)
		return nil
	}})
	require.NoError(t, err)
	ops, finance := []string{"alice:" + opsTok}, []string{financeTok}
	e, apiSrv := api.NewEcho(api.Config{Pool: pool, Jobs: jc, OpsTokens: ops, FinanceTokens: finance})
	con, err := console.New(console.Config{API: e, Pool: pool, Tokens: apiSrv.TokenOf})
	require.NoError(t, err)
	con.Register(e)
	b := &testBundle{pool: pool, jobs: jc, echo: e, reconcile: worker}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/replay") && strings.HasPrefix(r.URL.Path, "/console/events/") {
			b.replayPosts.Add(1)
			time.Sleep(300 * time.Millisecond)
		}
		e.ServeHTTP(w, r)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// seed stores a poison event as the ingest path and the worker would (the
// inbox row and its job in one transaction, then the status).
func (b *testBundle) seed(t *testing.T, id, typ, lastError string) {
	t.Helper()
	ctx := context.Background()
	payload := fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"data":{"object":{"id":"ch_%s","currency":"zzz"}}}`, id, typ, id)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		created, err := inbox.InsertTx(ctx, tx, inbox.Event{Provider: "stripe", EventID: id, Type: typ, Payload: []byte(payload)})
		if err != nil {
			return err
		}
		require.True(t, created)
		if err := b.jobs.InsertProcessEventTx(ctx, tx, "stripe", id); err != nil {
			return err
		}
		return inbox.SetStatusTx(ctx, tx, "stripe", id, inbox.StatusPoison, lastError, true)
	}))
}

// apiGet reads the API directly, as a check independent of the console.
func (b *testBundle) apiGet(t *testing.T, token, path string) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	rec := httptest.NewRecorder()
	b.echo.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	return rec.Body.String()
}

func (b *testBundle) eventStatus(t *testing.T, id string) string {
	t.Helper()
	m := regexp.MustCompile(`"status": "([a-z]+)"`).FindStringSubmatch(b.apiGet(t, opsTok, "/v1/events/stripe/"+id))
	require.NotNil(t, m)
	return m[1]
}

func (b *testBundle) auditCount(t *testing.T, action, id string) int {
	t.Helper()
	body := b.apiGet(t, opsTok, "/v1/ops/audit?limit=100")
	return len(regexp.MustCompile(`"action": "`+action+`",\s*"provider": "stripe",\s*"event_id": "`+regexp.QuoteMeta(id)+`"`).FindAllString(body, -1))
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}

// startBrowser starts Debian's Chromium headless. A failed test leaves a
// screenshot of the page it was on under tmp/ at the module root.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not on PATH: run scripts/chromium.sh (installs Debian's chromium) first")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first call starts the browser, which lives as long as its
	// context: it takes no timeout; the test's actions do.
	require.NoError(t, chromedp.Do(bctx), "start chromium")
	ctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(cancelTimeout)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		sctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Logf("screenshot: %v", err)
			return
		}
		dir := filepath.Join(moduleRoot(t), "tmp")
		name := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+".png")
		if err := os.MkdirAll(dir, 0o755); err == nil && os.WriteFile(name, png, 0o644) == nil {
			t.Logf("screenshot of the failing page: %s", name)
		}
	})
	return ctx
}

// downloader lets the browser save files into a folder of the test's and
// returns what clicks sel and reads the file it saves as name. It waits for
// the browser to say the download completed: the file can exist, empty or
// part-written, before that.
func downloader(t *testing.T, ctx context.Context) func(sel, name string) []byte {
	t.Helper()
	dir := t.TempDir()
	completed := make(chan string, 16)
	require.NoError(t, chromedp.ListenBrowser(ctx, func(ev any) {
		if p, ok := ev.(*browser.EventDownloadProgress); ok && p.State == browser.DownloadProgressStateCompleted {
			select {
			case completed <- p.GUID:
			default:
			}
		}
	}))
	events := true
	_, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir, EventsEnabled: &events})
	require.NoError(t, err)
	return func(sel, name string) []byte {
		t.Helper()
		run(t, ctx, chromedp.Click(chromedp.CSS(sel)))
		select {
		case <-completed:
		case <-time.After(30 * time.Second):
			t.Fatalf("the download of %s did not complete", name)
		}
		body, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err, "downloaded as %s", name)
		return body
	}
}

func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

func eval[T any](t *testing.T, ctx context.Context, js string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, opts...))
	require.NoError(t, err, js)
	return v
}

func textOf(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(sel)))
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, sel)
	return s
}

func signIn(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	run(t, ctx,
		chromedp.Navigate(base+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("nav.main")),
	)
}

func TestOpsInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, "evt_discard_me", "charge.succeeded", `unknown currency "zzz"`)
	b.seed(t, "evt_replay_me", "charge.succeeded", "ledger: unbalanced")
	b.seed(t, "evt_bulk_1", "charge.refunded", "refund before charge")
	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, opsTok)
	require.Contains(t, textOf(t, ctx, "header.top"), "alice")

	// The events list, filtered by status in its form, finds the seeded
	// poison events and not an event still waiting to be processed.
	ctxDB := context.Background()
	require.NoError(t, pgx.BeginFunc(ctxDB, b.pool, func(tx pgx.Tx) error {
		_, err := inbox.InsertTx(ctxDB, tx, inbox.Event{Provider: "stripe", EventID: "evt_fresh", Type: "charge.succeeded", Payload: []byte(`{}`)})
		return err
	}))
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/events"))
	require.Contains(t, textOf(t, ctx, "#events"), "evt_fresh", "unfiltered, every status")
	run(t, ctx,
		chromedp.SetValue(chromedp.CSS("#event-status-filter"), "poison"),
		chromedp.Click(chromedp.CSS("#event-filters button")),
		chromedp.WaitVisible(chromedp.CSS("#events-all")),
	)
	events := textOf(t, ctx, "#events")
	for _, id := range []string{"evt_discard_me", "evt_replay_me", "evt_bulk_1"} {
		require.Contains(t, events, id)
	}
	require.NotContains(t, events, "evt_fresh")
	require.Equal(t, 3, eval[int](t, ctx, `document.querySelectorAll('#events tr.event-row[data-status="poison"]').length`))
	require.Equal(t, 3, eval[int](t, ctx, `document.querySelectorAll('#events tr.event-row').length`))
	run(t, ctx,
		chromedp.Click(chromedp.CSS(`#events a[href="/console/events/stripe/evt_bulk_1"]`)),
		chromedp.WaitVisible(chromedp.CSS("#event-timeline")),
	)
	timeline := textOf(t, ctx, "#event-timeline")
	require.Contains(t, timeline, "received")
	require.Contains(t, timeline, "poison")
	require.Contains(t, timeline, "1 processing attempt, the last failing: refund before charge")

	// Ops reads the runs list; starting a run is finance's.
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/reconciliation"), chromedp.WaitVisible(chromedp.CSS("#run-filters")))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#start-run').length`))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#runs-error').length`), textOf(t, ctx, "main"))

	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/poison"))
	poison := textOf(t, ctx, "#poison")
	for _, id := range []string{"evt_discard_me", "evt_replay_me", "evt_bulk_1"} {
		require.Contains(t, poison, id)
	}
	require.Contains(t, poison, `unknown currency "zzz"`)

	// Discard with a reason, from the event's page reached from the queue.
	const reason = "test fixture with a made-up currency"
	run(t, ctx,
		chromedp.Click(chromedp.CSS(`a[href="/console/events/stripe/evt_discard_me"]`)),
		chromedp.WaitVisible(chromedp.CSS("#payload")),
	)
	require.Contains(t, textOf(t, ctx, "#payload"), "\"currency\": \"zzz\"", "the payload is pretty-printed")
	run(t, ctx,
		chromedp.SendKeys(chromedp.CSS("#discard-reason"), reason),
		chromedp.Click(chromedp.CSS("#discard button")),
		chromedp.WaitVisible(chromedp.CSS(".flash.ok")),
	)
	require.Equal(t, "discarded", textOf(t, ctx, "#event-status"))
	require.Equal(t, "discarded", b.eventStatus(t, "evt_discard_me"))

	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/audit"))
	audit := textOf(t, ctx, "#audit")
	require.Contains(t, audit, "discard")
	require.Contains(t, audit, "evt_discard_me")
	require.Contains(t, audit, reason)

	// Two clicks on Replay, the second while the first is still in flight:
	// both reach the server, and the form's one Idempotency-Key makes them
	// one replay.
	run(t, ctx,
		chromedp.Navigate(b.srv.URL+"/console/events/stripe/evt_replay_me"),
		chromedp.WaitVisible(chromedp.CSS("#replay button")),
	)
	eval[bool](t, ctx, `(() => { const b = document.querySelector('#replay button'); b.click(); setTimeout(() => b.click(), 80); return true })()`)
	require.Eventually(t, func() bool { return b.replayPosts.Load() == 2 }, 10*time.Second, 20*time.Millisecond,
		"both clicks must reach the server (got %d)", b.replayPosts.Load())
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(".flash")))
	require.Eventually(t, func() bool { return b.eventStatus(t, "evt_replay_me") == "received" }, 5*time.Second, 20*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // let a straggling duplicate finish before counting
	require.Equal(t, 1, b.auditCount(t, "replay", "evt_replay_me"), "two clicks, one replay")
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/audit"), chromedp.WaitVisible(chromedp.CSS("#audit")))
	require.Equal(t, 1, eval[int](t, ctx, `document.querySelectorAll('tr.audit-row[data-action="replay"][data-event="evt_replay_me"]').length`))

	// Bulk replay shows the dry run's count, and replays only when confirmed.
	run(t, ctx,
		chromedp.Navigate(b.srv.URL+"/console/poison?type=charge.refunded"),
		chromedp.Click(chromedp.CSS("#bulk-replay")),
	)
	require.Equal(t, "1", textOf(t, ctx, "#dry-run-count"))
	require.Equal(t, "poison", b.eventStatus(t, "evt_bulk_1"), "a dry run replays nothing")
	run(t, ctx,
		chromedp.Click(chromedp.CSS("#bulk-replay-confirm")),
		chromedp.WaitVisible(chromedp.CSS(".flash.ok")),
	)
	require.Contains(t, textOf(t, ctx, ".flash.ok"), "1 of 1")
	require.Equal(t, "received", b.eventStatus(t, "evt_bulk_1"))
	require.Equal(t, "discarded", b.eventStatus(t, "evt_discard_me"), "the filter's other events are untouched")

	// An event found by id; a payment the API does not know shows its answer.
	run(t, ctx,
		chromedp.Navigate(b.srv.URL+"/console/events?provider=stripe&event_id=evt_replay_me"),
		chromedp.WaitVisible(chromedp.CSS("#event-status")),
		chromedp.Navigate(b.srv.URL+"/console/payments?id=pi_nobody"),
	)
	require.Contains(t, textOf(t, ctx, ".flash.error"), "404")

	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/events?status=discarded"))
	require.Equal(t, "evt_discard_me", textOf(t, ctx, "#events tr.event-row a.id"))
	require.Equal(t, 1, eval[int](t, ctx, `document.querySelectorAll('#events tr.event-row').length`))
}

func TestFinanceInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, "evt_secret", "charge.succeeded", "boom")
	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, financeTok)

	nav := textOf(t, ctx, "nav.main")
	require.NotContains(t, nav, "Poison")
	require.Contains(t, nav, "Reconciliation")
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/poison"))
	require.Contains(t, textOf(t, ctx, "#refused"), "not available to your role")
	require.NotContains(t, textOf(t, ctx, "body"), "evt_secret")

	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/books"), chromedp.WaitVisible(chromedp.CSS("h1")))

	run(t, ctx,
		chromedp.Navigate(b.srv.URL+"/console/reconciliation"),
		chromedp.SetValue(chromedp.CSS("#run-date"), "2024-06-01"),
		chromedp.Click(chromedp.CSS("#start-run button")),
	)
	require.Equal(t, "running", textOf(t, ctx, "#run-status"), "no worker runs in this test: the run waits")
	require.Contains(t, textOf(t, ctx, "h1"), "2024-06-01")

	// The download goes through the console with the session's token; the
	// file keeps the name the API gives it.
	download := downloader(t, ctx)
	id, err := strconv.ParseInt(regexp.MustCompile(`/runs/(\d+)/`).FindStringSubmatch(csvHref(t, ctx))[1], 10, 64)
	require.NoError(t, err)
	csv := download("#csv", fmt.Sprintf("reconciliation-2024-06-01-run-%d.csv", id))
	require.Equal(t, strings.Join(reconcile.CSVHeader, ",")+"\n", string(csv), "a run without items: the header row")

	// Without a provider API key the worker fails the run; the run page
	// makes that stand out.
	err = b.reconcile.Work(context.Background(), &river.Job[jobs.ReconcileArgs]{Args: jobs.ReconcileArgs{RunID: id}})
	require.ErrorIs(t, err, stripe.ErrNoAPIKey)
	run(t, ctx, chromedp.Reload())
	require.Equal(t, "failed", textOf(t, ctx, "#run-status"))
	require.NotEmpty(t, textOf(t, ctx, "#run-error"))

	// A second run, for the form's default day (yesterday), falls in the
	// chart's 30 days; the first one's day, long ago, does not.
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/reconciliation"), chromedp.WaitVisible(chromedp.CSS("#run-date")))
	yesterday := eval[string](t, ctx, `document.querySelector('#run-date').value`)
	require.Equal(t, time.Now().UTC().AddDate(0, 0, -1).Format("2006-01-02"), yesterday)
	run(t, ctx, chromedp.Click(chromedp.CSS("#start-run button")))
	require.Equal(t, "running", textOf(t, ctx, "#run-status"))
	recent := regexp.MustCompile(`/runs/(\d+)/`).FindStringSubmatch(csvHref(t, ctx))[1]
	// Completed as the runner would, with a report, so that the chart and
	// the list have counts to show.
	_, err = b.pool.Exec(context.Background(), `UPDATE reconciliation_runs SET status = 'completed', finished_at = now(),
		report = '{"summary": {"matched": 3, "fee_posted": 1, "amount_mismatch": 2}}' WHERE id = $1`, recent)
	require.NoError(t, err)

	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/reconciliation"), chromedp.WaitVisible(chromedp.CSS("#runs")))
	require.Equal(t, []string{"completed", "failed"},
		eval[[]string](t, ctx, `[...document.querySelectorAll('#runs tr.run-row')].map(r => r.dataset.status)`), "newest first")
	failedRow := fmt.Sprintf(`#runs tr.run-row.failed[data-run="%d"]`, id)
	require.Contains(t, textOf(t, ctx, failedRow), "2024-06-01")
	require.Contains(t, textOf(t, ctx, failedRow), "api")
	require.Equal(t, 1, eval[int](t, ctx, `document.querySelectorAll('svg#run-chart').length`))
	require.Equal(t, []string{yesterday},
		eval[[]string](t, ctx, `[...document.querySelectorAll('svg#run-chart g.day')].map(g => g.dataset.date)`),
		"one bar group per day with a run in the last 30 days")
	require.Equal(t, []string{"4", "2"}, eval[[]string](t, ctx,
		`(() => { const g = document.querySelector('svg#run-chart g.day'); return [g.dataset.matched, g.dataset.exceptions] })()`),
		"matched and fee_posted against the other statuses")
	require.Equal(t, 2, eval[int](t, ctx, `document.querySelectorAll('svg#run-chart g.day rect.matched, svg#run-chart g.day rect.exceptions').length`))
	counts := textOf(t, ctx, `#runs tr.run-row[data-run="`+recent+`"] td.counts`)
	require.Contains(t, counts, "matched 3")
	require.Contains(t, counts, "amount_mismatch 2")
	require.NotContains(t, counts, "missing_in_ledger", "statuses without items are left out")

	run(t, ctx,
		chromedp.SetValue(chromedp.CSS("#runs-date"), "2024-06-01"),
		chromedp.Click(chromedp.CSS("#run-filters button")),
		chromedp.WaitVisible(chromedp.CSS(`#run-filters a[href="/console/reconciliation"]`)),
	)
	require.Equal(t, []string{strconv.FormatInt(id, 10)},
		eval[[]string](t, ctx, `[...document.querySelectorAll('#runs tr.run-row')].map(r => r.dataset.run)`), "filtered by date")
}

func csvHref(t *testing.T, ctx context.Context) string {
	t.Helper()
	attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#csv"), "href"))
	require.NoError(t, err)
	require.True(t, attr.Exists)
	return attr.Value
}

// client is a cookie-keeping HTTP client of the test server that does not
// follow redirects, so each answer can be looked at.
func client(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func postForm(t *testing.T, c *http.Client, u string, form url.Values, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func getPage(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return string(body)
}

func hidden(t *testing.T, page, form, name string) string {
	t.Helper()
	i := strings.Index(page, `id="`+form+`"`)
	require.GreaterOrEqual(t, i, 0, "form %s", form)
	m := regexp.MustCompile(`name="` + name + `" value="([^"]*)"`).FindStringSubmatch(page[i:])
	require.NotNil(t, m, "field %s of %s", name, form)
	return m[1]
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, "evt_csrf", "charge.succeeded", "boom")
	alice, mallory := client(t), client(t)
	for _, c := range []*http.Client{alice, mallory} {
		resp := postForm(t, c, b.srv.URL+"/console/signin", url.Values{"token": {opsTok}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	}
	page := getPage(t, alice, b.srv.URL+"/console/events/stripe/evt_csrf")
	key, token := hidden(t, page, "discard", "idempotency_key"), hidden(t, page, "discard", "csrf")
	otherToken := hidden(t, getPage(t, mallory, b.srv.URL+"/console/events/stripe/evt_csrf"), "discard", "csrf")
	require.NotEqual(t, token, otherToken)
	discard := b.srv.URL + "/console/events/stripe/evt_csrf/discard"

	for name, form := range map[string]url.Values{
		"no token":                {"idempotency_key": {key}, "reason": {"r"}},
		"another session's token": {"idempotency_key": {key}, "reason": {"r"}, "csrf": {otherToken}},
		"a wrong token":           {"idempotency_key": {key}, "reason": {"r"}, "csrf": {token + "x"}},
	} {
		resp := postForm(t, alice, discard, form)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, name)
	}
	resp := postForm(t, alice, discard, url.Values{"idempotency_key": {key}, "reason": {"r"}, "csrf": {token}}, "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a browser's cross-site post")

	// A finance session's own valid form token does not open ops actions.
	finance := client(t)
	require.Equal(t, http.StatusSeeOther, postForm(t, finance, b.srv.URL+"/console/signin", url.Values{"token": {financeTok}}).StatusCode)
	financeCSRF := regexp.MustCompile(`name="csrf" value="([^"]*)"`).FindStringSubmatch(getPage(t, finance, b.srv.URL+"/console/books"))[1]
	resp = postForm(t, finance, discard, url.Values{"idempotency_key": {key}, "reason": {"r"}, "csrf": {financeCSRF}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "finance may not discard")
	require.Equal(t, "poison", b.eventStatus(t, "evt_csrf"), "no refused post reached the API")

	resp = postForm(t, alice, discard, url.Values{"idempotency_key": {key}, "reason": {"r"}, "csrf": {token}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "discarded", b.eventStatus(t, "evt_csrf"))
}

func TestSessionCookie(t *testing.T) {
	t.Parallel()
	b := setup(t)
	signin := func(t *testing.T, token string, tlsOn bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/console/signin", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tlsOn {
			req.TLS = &tls.ConnectionState{}
		}
		rec := httptest.NewRecorder()
		b.echo.ServeHTTP(rec, req)
		return rec
	}
	for _, tlsOn := range []bool{false, true} {
		rec := signin(t, opsTok, tlsOn)
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		cookies := rec.Result().Cookies()
		require.Len(t, cookies, 1)
		ck := cookies[0]
		require.Equal(t, "/console", ck.Path)
		require.True(t, ck.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
		require.Equal(t, tlsOn, ck.Secure, "Secure exactly when the request came over TLS")
		require.NotContains(t, ck.Value, opsTok, "the browser never holds the token")
		require.GreaterOrEqual(t, len(ck.Value), 40, "an unguessable id")
	}
	rec := signin(t, "not-a-token", false)
	require.Equal(t, http.StatusUnauthorized, rec.Code)
	require.Empty(t, rec.Result().Cookies(), "no session for a bad token")

	// Signing out ends the session on the server, not only in the browser.
	c := client(t)
	require.Equal(t, http.StatusSeeOther, postForm(t, c, b.srv.URL+"/console/signin", url.Values{"token": {financeTok}}).StatusCode)
	u, _ := url.Parse(b.srv.URL + "/console/")
	old := c.Jar.Cookies(u)
	require.Len(t, old, 1)
	page := getPage(t, c, b.srv.URL+"/console/books")
	csrf := regexp.MustCompile(`name="csrf" value="([^"]*)"`).FindStringSubmatch(page)[1]
	require.Equal(t, http.StatusSeeOther, postForm(t, c, b.srv.URL+"/console/signout", url.Values{"csrf": {csrf}}).StatusCode)
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/console/books", nil)
	req.AddCookie(old[0])
	resp, err := client(t).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/signin", resp.Header.Get("Location"))
}

func TestPaymentAndBooksInBrowser(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd"})
	sim.Refund(p, 10000)
	w.Apply(t, sim.Events()...)
	e, apiSrv := api.NewEcho(api.Config{Pool: w.Pool, Jobs: w.Jobs, OpsTokens: []string{opsTok}, FinanceTokens: []string{financeTok}})
	con, err := console.New(console.Config{API: e, Pool: w.Pool, Tokens: apiSrv.TokenOf})
	require.NoError(t, err)
	con.Register(e)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	ctx := startBrowser(t)
	signIn(t, ctx, srv.URL, opsTok)
	run(t, ctx,
		chromedp.Navigate(srv.URL+"/console/payments"),
		chromedp.SendKeys(chromedp.CSS(`#payment-q`), p.ID),
		chromedp.Click(chromedp.CSS(`#payment-search-submit`)),
	)
	require.Equal(t, "partially_refunded", textOf(t, ctx, "#payment-status"))
	tiles := textOf(t, ctx, ".tiles")
	require.Contains(t, tiles, "360.00")
	require.Contains(t, tiles, "100.00")
	// Events applied in one batch may make one state change, so the
	// timeline has at least one entry and ends in the payment's state.
	require.Contains(t, eval[string](t, ctx, `(() => { const li = document.querySelectorAll('ol.timeline li'); return li.length ? li[li.length-1].textContent : '' })()`), "partially_refunded")
	ledgerText := textOf(t, ctx, "#ledger")
	require.Contains(t, ledgerText, "capture")
	require.Contains(t, ledgerText, "refund")
	require.Contains(t, textOf(t, ctx, "#emails"), "skipped", "no SMTP server here: the intents are recorded as skipped")

	// The payments list, filtered by status, links to the payment.
	run(t, ctx, chromedp.Navigate(srv.URL+"/console/payments?status=refunded"), chromedp.WaitVisible(chromedp.CSS("p.empty")))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#payments').length`))
	run(t, ctx,
		chromedp.Navigate(srv.URL+"/console/payments"),
		chromedp.SetValue(chromedp.CSS(`#payment-filters select[name="status"]`), "partially_refunded"),
		chromedp.SetValue(chromedp.CSS(`#payment-filters input[name="currency"]`), "usd"),
		chromedp.Click(chromedp.CSS("#payment-filters button")),
		chromedp.WaitVisible(chromedp.CSS("#payments-all")),
	)
	require.Contains(t, textOf(t, ctx, "#payments"), p.ID)
	run(t, ctx, chromedp.Click(chromedp.CSS(`#payments a.id`)))
	require.Equal(t, "partially_refunded", textOf(t, ctx, "#payment-status"))

	run(t, ctx, chromedp.Navigate(srv.URL+"/console/books"))
	books := textOf(t, ctx, "#trial-balance")
	require.Contains(t, books, "usd")
	require.Contains(t, books, "balanced")
	require.NotContains(t, books, "UNBALANCED")
}
