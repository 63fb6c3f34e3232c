package console_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/console"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
)

// cluster is several paygate instances (API and console each) over one
// database, behind one address, as behind a load balancer: front says which
// instance answers.
type cluster struct {
	pool  *pgxpool.Pool
	jobs  *jobs.Client
	front atomic.Pointer[echo.Echo]
	srv   *httptest.Server
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	pool := testdb.New(t)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)
	c := &cluster{pool: pool, jobs: jc}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.front.Load().ServeHTTP(w, r)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// instance starts one more instance (a restart is a new one) with ops
// tokens ops, the finance token, and cfg's limit settings.
func (c *cluster) instance(t *testing.T, ops []string, window time.Duration) *echo.Echo {
	t.Helper()
	e, apiSrv := api.NewEcho(api.Config{Pool: c.pool, Jobs: c.jobs, OpsTokens: ops, FinanceTokens: []string{financeTok},
		AuthFailureWindow: window})
	con, err := console.New(console.Config{API: e, Pool: c.pool, Tokens: apiSrv.TokenOf})
	require.NoError(t, err)
	con.Register(e)
	return e
}

func (c *cluster) sessions(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT count(*) FROM console_sessions`).Scan(&n))
	return n
}

// status answers a GET of path with cookie, without following redirects:
// its status and Location.
func (c *cluster) status(t *testing.T, path string, cookie *http.Cookie) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.srv.URL+path, nil)
	require.NoError(t, err)
	req.AddCookie(cookie)
	resp, err := client(t).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

func TestSessionsAcrossInstancesInBrowser(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ops := []string{"alice:" + opsTok}
	a, b := c.instance(t, ops, 0), c.instance(t, ops, 0)
	c.front.Store(a)
	ctx := startBrowser(t)
	signIn(t, ctx, c.srv.URL, opsTok)
	require.Contains(t, textOf(t, ctx, "header.top"), "alice")

	got, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{c.srv.URL + "/console/"}})
	require.NoError(t, err)
	require.Len(t, got.Cookies, 1)
	cookie := &http.Cookie{Name: got.Cookies[0].Name, Value: got.Cookies[0].Value}
	var stored []byte
	require.NoError(t, c.pool.QueryRow(context.Background(), `SELECT id_hash FROM console_sessions`).Scan(&stored))
	sum := sha256.Sum256([]byte(cookie.Value))
	require.Equal(t, sum[:], stored, "the table holds the id's hash, never the id")

	// The next click lands on the other instance: still signed in.
	c.front.Store(b)
	run(t, ctx, chromedp.Navigate(c.srv.URL+"/console/books"), chromedp.WaitVisible(chromedp.CSS("#trial-balance, p.empty, main h1")))
	require.Contains(t, textOf(t, ctx, "header.top"), "alice", "instance b serves a's session")

	// A restart: a new instance, nothing in its memory.
	restarted := c.instance(t, ops, 0)
	c.front.Store(restarted)
	run(t, ctx, chromedp.Navigate(c.srv.URL+"/console/audit"), chromedp.WaitVisible(chromedp.CSS("#audit, p.empty")))
	require.Contains(t, textOf(t, ctx, "header.top"), "alice", "the restarted instance keeps the session")

	// Signing out on one instance ends the session on every other one.
	run(t, ctx,
		chromedp.Click(chromedp.CSS("form.who button")),
		chromedp.WaitVisible(chromedp.CSS("#token")),
	)
	require.Zero(t, c.sessions(t))
	for name, e := range map[string]*echo.Echo{"a": a, "b": b} {
		c.front.Store(e)
		code, loc := c.status(t, "/console/books", cookie)
		require.Equal(t, http.StatusSeeOther, code, "instance %s", name)
		require.Equal(t, "/console/signin", loc, "instance %s: the old cookie opens nothing", name)
	}
}

func TestSessionEndsWhenItsTokenIsRemoved(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.instance(t, []string{"alice:" + opsTok}, 0)
	c.front.Store(a)
	hc := client(t)
	require.Equal(t, http.StatusSeeOther, postForm(t, hc, c.srv.URL+"/console/signin", url.Values{"token": {opsTok}}).StatusCode)
	u, _ := url.Parse(c.srv.URL + "/console/")
	cookie := hc.Jar.Cookies(u)[0]
	code, _ := c.status(t, "/console/books", cookie)
	require.Equal(t, http.StatusOK, code)

	// Redeployed without alice's token: her session ends at its next
	// request, for every instance.
	c.front.Store(c.instance(t, []string{"bob:another-ops-token"}, 0))
	code, loc := c.status(t, "/console/books", cookie)
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/console/signin", loc)
	require.Zero(t, c.sessions(t), "the session is deleted, not only refused")
	c.front.Store(a)
	code, _ = c.status(t, "/console/books", cookie)
	require.Equal(t, http.StatusSeeOther, code, "an instance still configured with the token does not revive it")
}

func TestSignInFloodInBrowser(t *testing.T) {
	t.Parallel()
	// Long enough for a browser to send 11 forms (about 0.4 s each), even
	// on a busy machine: in one full make test 12 s were not, and the
	// window had passed before the 429 it checks.
	const window = 30 * time.Second
	c := newCluster(t)
	c.front.Store(c.instance(t, []string{"alice:" + opsTok}, window))
	ctx := startBrowser(t)
	navStatus := func() int {
		return eval[int](t, ctx, `performance.getEntriesByType('navigation')[0].responseStatus`)
	}
	try := func(token string) string {
		t.Helper()
		run(t, ctx,
			chromedp.Navigate(c.srv.URL+"/console/signin"),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), token),
			chromedp.Click(chromedp.CSS("#signin")),
			chromedp.WaitVisible(chromedp.CSS("p.flash.error")),
		)
		return textOf(t, ctx, "p.flash.error")
	}
	var first time.Time // the window starts before it
	for i := range 10 {
		require.Contains(t, try("wrong-"+strconv.Itoa(i)), "not one paygate knows", "failure %d", i+1)
		require.Equal(t, http.StatusUnauthorized, navStatus())
		if i == 0 {
			first = time.Now()
		}
	}
	require.Contains(t, try("wrong-10"), "Too many wrong tokens", "the 11th")
	require.Equal(t, http.StatusTooManyRequests, navStatus())
	require.Contains(t, try(opsTok), "Too many wrong tokens", "the right token waits too")

	// The same address, outside the browser: 429 with Retry-After.
	resp, err := http.PostForm(c.srv.URL+"/console/signin", url.Values{"token": {opsTok}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	wait, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, wait >= 1 && wait <= int(window/time.Second), "Retry-After %d", wait)
	require.Less(t, time.Since(first), window, "the test outran its window")

	time.Sleep(time.Until(first.Add(window + 50*time.Millisecond)))
	signIn(t, ctx, c.srv.URL, opsTok)
	require.Contains(t, textOf(t, ctx, "header.top"), "alice", "after the window a right token signs in")
	require.True(t, strings.HasPrefix(eval[string](t, ctx, `location.pathname`), "/console/"))
}
