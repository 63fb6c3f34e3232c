package console_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/oauth2-proxy/mockoidc"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/console"
	"github.com/paygate/paygate/internal/oidctest"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
	"github.com/paygate/paygate/signin"
)

// signinBundle is the API and the console with sign-in by an OpenID
// Connect provider (mockoidc over HTTP). The console is reached at
// http://localhost:<port> and the provider at 127.0.0.1: two sites, as a
// company's provider and paygate are, so that the browser applies its
// cross-site cookie rules to the provider's redirect back.
type signinBundle struct {
	*testBundle
	idp   *oidctest.Provider
	base  string
	front atomic.Pointer[echo.Echo] // the instance that answers
}

func (b *signinBundle) instance(t *testing.T, opts ...func(*console.Config)) *echo.Echo {
	t.Helper()
	e, apiSrv := api.NewEcho(api.Config{Pool: b.pool, Jobs: b.jobs, OpsTokens: []string{"alice:" + opsTok}, FinanceTokens: []string{financeTok}})
	p, err := signin.New(signin.Config{
		Issuer: b.idp.Issuer(), ClientID: b.idp.ClientID, ClientSecret: b.idp.ClientSecret,
		RedirectURL: b.base + "/console/oidc/callback", Scopes: []string{"email", "profile", "groups"}, Pool: b.pool,
	})
	require.NoError(t, err)
	cfg := console.Config{API: e, Pool: b.pool, Tokens: apiSrv.TokenOf, SignIn: p, PublicURL: b.base,
		AccessContact: "paygate-ops@example.com"}
	for _, o := range opts {
		o(&cfg)
	}
	con, err := console.New(cfg)
	require.NoError(t, err)
	con.Register(e)
	return e
}

func setupSignIn(t *testing.T, opts ...func(*console.Config)) *signinBundle {
	t.Helper()
	pool := testdb.New(t)
	// Runs are inserted, never worked: the worker is registered so that
	// River accepts their jobs.
	worker := jobs.NewReconcileWorker(reconcile.New(reconcile.Config{
		Pool: pool, Provider: reconcile.Unavailable(stripe.Name, stripe.ErrNoAPIKey), RecoveryWait: -1,
	}), nil)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true, Register: func(w *river.Workers) []*river.PeriodicJob {
		river.AddWorker(w, worker)
		return nil
	}})
	require.NoError(t, err)
	b := &signinBundle{testBundle: &testBundle{pool: pool, jobs: jc, reconcile: worker}, idp: oidctest.Start(t)}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.front.Load().ServeHTTP(w, r)
	}))
	t.Cleanup(b.srv.Close)
	_, port, err := net.SplitHostPort(b.srv.Listener.Addr().String())
	require.NoError(t, err)
	b.base = "http://localhost:" + port
	b.echo = b.instance(t, opts...)
	b.front.Store(b.echo)
	return b
}

func countSessions(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM console_sessions`).Scan(&n))
	return n
}

// begin asks the console to sign in with the provider, as the sign-in
// page's button does, and lets the provider sign in whoever is queued: the
// callback URL the provider sends the browser back to.
func (b *signinBundle) begin(t *testing.T, hc *http.Client) string {
	t.Helper()
	resp, err := hc.Get(b.base + "/console/oidc/login")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	auth := resp.Header.Get("Location")
	require.True(t, strings.HasPrefix(auth, b.idp.AuthorizationEndpoint()+"?"), auth)
	back := oidctest.Authorize(t, auth)
	require.True(t, strings.HasPrefix(back, b.base+"/console/oidc/callback?"), back)
	return back
}

func get(t *testing.T, hc *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := hc.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestSignInWithTheProviderInBrowser: ops and then finance sign in with the
// company's provider, are named in the header, act as themselves (the
// audit log and the run name them), and sign out, offered the provider's
// logout.
func TestSignInWithTheProviderInBrowser(t *testing.T) {
	t.Parallel()
	b := setupSignIn(t)
	b.seed(t, "evt_person", "charge.succeeded", `unknown currency "zzz"`)
	ctx := startBrowser(t)

	b.idp.Person("ann-sub", "ann@example.com", "engineering", "paygate-ops")
	run(t, ctx, chromedp.Navigate(b.base+"/console/"), chromedp.WaitVisible(chromedp.CSS("#signin-provider")))
	require.Contains(t, textOf(t, ctx, "#signin-provider"), "127.0.0.1")
	require.Equal(t, 1, eval[int](t, ctx, `document.querySelectorAll('#token').length`), "the token form stays")
	// The provider shows its own page first, as a real one asks for a
	// password: the way back starts on its site.
	b.idp.LoginPage.Store(true)
	run(t, ctx,
		chromedp.Click(chromedp.CSS("#signin-provider")),
		chromedp.WaitVisible(chromedp.CSS("#idp-continue")),
		chromedp.Click(chromedp.CSS("#idp-continue")),
		chromedp.WaitVisible(chromedp.CSS("nav.main")),
	)
	require.Equal(t, "/console/poison", eval[string](t, ctx, `location.pathname`))
	require.Equal(t, "ann@example.com · ops", textOf(t, ctx, "#who"))

	const reason = "a made-up currency, discarded by a person"
	run(t, ctx,
		chromedp.Navigate(b.base+"/console/events/stripe/evt_person"),
		chromedp.SendKeys(chromedp.CSS("#discard-reason"), reason),
		chromedp.Click(chromedp.CSS("#discard button")),
		chromedp.WaitVisible(chromedp.CSS(".flash.ok")),
	)
	require.Equal(t, "discarded", b.eventStatus(t, "evt_person"))
	var actor string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT actor FROM ops_audit_log WHERE event_id = 'evt_person' AND action = 'discard'`).Scan(&actor))
	require.Equal(t, "ann@example.com", actor, "the audit log names the person")
	run(t, ctx, chromedp.Navigate(b.base+"/console/audit"))
	require.Contains(t, textOf(t, ctx, "#audit"), "ann@example.com")

	// Signing out ends the session here and offers the provider's.
	run(t, ctx, chromedp.Click(chromedp.CSS("form.who button")), chromedp.WaitVisible(chromedp.CSS("#provider-logout")))
	require.Zero(t, countSessions(t, b.pool))
	logout, err := url.Parse(eval[string](t, ctx, `document.querySelector('#provider-logout').href`))
	require.NoError(t, err)
	require.Equal(t, b.idp.Addr()+oidctest.LogoutPath, logout.Scheme+"://"+logout.Host+logout.Path)
	require.Equal(t, b.base+"/console/signin", logout.Query().Get("post_logout_redirect_uri"))
	require.Equal(t, b.idp.ClientID, logout.Query().Get("client_id"))
	run(t, ctx, chromedp.Navigate(b.base+"/console/poison"), chromedp.WaitVisible(chromedp.CSS("#signin-provider")))

	b.idp.Person("fred-sub", "fred@example.com", "paygate-finance")
	run(t, ctx,
		chromedp.Click(chromedp.CSS("#signin-provider")),
		chromedp.Click(chromedp.CSS("#idp-continue")),
		chromedp.WaitVisible(chromedp.CSS("nav.main")),
	)
	require.Equal(t, "/console/reconciliation", eval[string](t, ctx, `location.pathname`))
	require.Equal(t, "fred@example.com · finance", textOf(t, ctx, "#who"))
	require.NotContains(t, textOf(t, ctx, "nav.main"), "Poison")
	run(t, ctx,
		chromedp.SetValue(chromedp.CSS("#run-date"), "2024-06-01"),
		chromedp.Click(chromedp.CSS("#start-run button")),
	)
	require.Equal(t, "running", textOf(t, ctx, "#run-status"))
	var requestedBy string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT requested_by FROM reconciliation_runs`).Scan(&requestedBy))
	require.Equal(t, "fred@example.com", requestedBy)
	run(t, ctx, chromedp.Navigate(b.base+"/console/poison"))
	require.Contains(t, textOf(t, ctx, "#refused"), "not available to your role")
	run(t, ctx, chromedp.Click(chromedp.CSS("form.who button")), chromedp.WaitVisible(chromedp.CSS("#provider-logout")))
	require.Zero(t, countSessions(t, b.pool))
}

// TestSignInRefusals: answers that are not this browser's, replayed, or
// carry an ID token that fails verification sign nobody in.
func TestSignInRefusals(t *testing.T) {
	t.Parallel()
	b := setupSignIn(t)
	refused := func(name string, hc *http.Client, callback string, status int) {
		t.Helper()
		code, body := get(t, hc, callback)
		require.Equal(t, status, code, "%s: %s", name, body)
		require.Contains(t, body, `id="signin-error"`, name)
		require.Zero(t, countSessions(t, b.pool), "%s: no session", name)
	}

	b.idp.Person("ann-sub", "ann@example.com", "paygate-ops")
	hc := client(t)
	back, err := url.Parse(b.begin(t, hc))
	require.NoError(t, err)
	q := back.Query()
	q.Set("state", "a-state-of-another-sign-in")
	wrong := *back
	wrong.RawQuery = q.Encode()
	refused("a wrong state", hc, wrong.String(), http.StatusBadRequest)

	b.idp.Person("ann-sub", "ann@example.com", "paygate-ops")
	hc = client(t)
	callback := b.begin(t, hc)
	flow := hc.Jar.Cookies(must(url.Parse(b.base + "/console/oidc/callback")))
	require.Len(t, flow, 1, "the flow's cookie")
	code, body := get(t, hc, callback)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 1, countSessions(t, b.pool))
	_, err = b.pool.Exec(context.Background(), `DELETE FROM console_sessions`)
	require.NoError(t, err)
	refused("the same callback again", hc, callback, http.StatusBadRequest)
	replayer := client(t)
	replayer.Jar.SetCookies(must(url.Parse(b.base+"/console/oidc/callback")), flow)
	refused("the same callback, with a copy of the flow's cookie", replayer, callback, http.StatusBadRequest)

	// The code again, with a flow of its own: the provider refuses it.
	b.idp.Person("ann-sub", "ann@example.com", "paygate-ops")
	hc = client(t)
	fresh, err := url.Parse(b.begin(t, hc))
	require.NoError(t, err)
	q = fresh.Query()
	q.Set("code", must(url.Parse(callback)).Query().Get("code"))
	fresh.RawQuery = q.Encode()
	refused("a replayed code", hc, fresh.String(), http.StatusUnauthorized)

	b.idp.QueueUser(oidctest.Tampered{MockUser: &mockoidc.MockUser{Subject: "ann-sub", Email: "ann@example.com",
		EmailVerified: true, Groups: []string{"paygate-ops"}}, Audience: "another-client"})
	hc = client(t)
	refused("an ID token for another audience", hc, b.begin(t, hc), http.StatusUnauthorized)

	b.idp.FastForward(-time.Hour)
	b.idp.Person("ann-sub", "ann@example.com", "paygate-ops")
	hc = client(t)
	refused("an expired ID token", hc, b.begin(t, hc), http.StatusUnauthorized)
	b.idp.FastForward(time.Hour)

	b.idp.SignWithUnpublished(t)
	b.idp.Person("ann-sub", "ann@example.com", "paygate-ops")
	hc = client(t)
	refused("an ID token signed with a key the provider does not publish", hc, b.begin(t, hc), http.StatusUnauthorized)

	// Rotated at the provider: the new key is fetched, and signs in.
	b.idp.Rotate(t)
	b.idp.Person("ann-sub", "ann@example.com", "paygate-ops")
	hc = client(t)
	code, body = get(t, hc, b.begin(t, hc))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "ann@example.com")
	require.Equal(t, 1, countSessions(t, b.pool))
}

// TestSignInWithoutARole: a person whose groups map to no role is refused
// with a page that says why and whom to ask; a person taken out of their
// group loses access at their next sign-in, on every session they have.
func TestSignInWithoutARole(t *testing.T) {
	t.Parallel()
	b := setupSignIn(t)
	b.idp.Person("ann-sub", "ann@example.com", "engineering", "design")
	hc := client(t)
	code, body := get(t, hc, b.begin(t, hc))
	require.Equal(t, http.StatusForbidden, code)
	for _, want := range []string{`id="norole"`, "ann@example.com", "paygate-ops", "paygate-finance", "groups",
		"engineering", "paygate-ops@example.com"} {
		require.Contains(t, body, want)
	}
	require.Zero(t, countSessions(t, b.pool))

	// Signed in as ops on one browser...
	b.idp.Person("ann-sub", "ann@example.com", "paygate-ops")
	first := client(t)
	code, _ = get(t, first, b.begin(t, first))
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, first, b.base+"/console/poison")
	require.Equal(t, http.StatusOK, code)
	// ...then moved to finance, and signing in on another.
	b.idp.Person("ann-sub", "ann@example.com", "paygate-finance")
	second := client(t)
	code, _ = get(t, second, b.begin(t, second))
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, first, b.base+"/console/poison")
	require.Equal(t, http.StatusForbidden, code, "the first browser's session has the roles of the latest sign-in")
	// Then taken out of every group.
	b.idp.Person("ann-sub", "ann@example.com")
	third := client(t)
	code, _ = get(t, third, b.begin(t, third))
	require.Equal(t, http.StatusForbidden, code)
	for _, hc := range []*http.Client{first, second} {
		code, _ = get(t, hc, b.base+"/console/reconciliation")
		require.Equal(t, http.StatusSeeOther, code, "no session of hers is left")
	}
	require.Zero(t, countSessions(t, b.pool))
}

// TestPersonSessionsLastAtMostTheirMaxAge: PAYGATE_SESSION_MAX_AGE bounds a
// person's session as it does a token's.
func TestPersonSessionsLastAtMostTheirMaxAge(t *testing.T) {
	t.Parallel()
	b := setupSignIn(t, func(c *console.Config) { c.SessionTTL = 2 * time.Second })
	b.idp.Person("ann-sub", "ann@example.com", "paygate-ops")
	hc := client(t)
	code, _ := get(t, hc, b.begin(t, hc))
	require.Equal(t, http.StatusOK, code)
	var life float64
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT extract(epoch FROM expires_at - created_at)::float8 FROM console_sessions`).Scan(&life))
	require.InDelta(t, 2.0, life, 0.01, "seconds")
	code, _ = get(t, hc, b.base+"/console/poison")
	require.Equal(t, http.StatusOK, code)
	time.Sleep(2100 * time.Millisecond)
	code, _ = get(t, hc, b.base+"/console/poison")
	require.Equal(t, http.StatusSeeOther, code)
}

// TestTokenSignInTurnedOff: with PAYGATE_CONSOLE_TOKENS=false the sign-in
// page offers only the provider, a token is refused, and token sessions
// started before end.
func TestTokenSignInTurnedOff(t *testing.T) {
	t.Parallel()
	b := setupSignIn(t)
	hc := client(t)
	require.Equal(t, http.StatusSeeOther, postForm(t, hc, b.base+"/console/signin", url.Values{"token": {opsTok}}).StatusCode)
	require.Equal(t, 1, countSessions(t, b.pool))

	b.front.Store(b.instance(t, func(c *console.Config) { c.DisableTokens = true }))
	code, body := get(t, hc, b.base+"/console/poison")
	require.Equal(t, http.StatusSeeOther, code, body)
	require.Zero(t, countSessions(t, b.pool), "the token session ends")
	code, body = get(t, hc, b.base+"/console/signin")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `id="signin-provider"`)
	require.NotContains(t, body, `name="token"`)
	require.Equal(t, http.StatusForbidden, postForm(t, hc, b.base+"/console/signin", url.Values{"token": {opsTok}}).StatusCode)
	require.Zero(t, countSessions(t, b.pool))

	b.idp.Person("ann-sub", "ann@example.com", "paygate-ops")
	code, _ = get(t, hc, b.begin(t, hc))
	require.Equal(t, http.StatusOK, code, "people still sign in")

	_, err := console.New(console.Config{API: b.echo, Pool: b.pool, DisableTokens: true})
	require.ErrorIs(t, err, console.ErrNoSignIn)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
