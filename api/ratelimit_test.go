package api_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
)

// fromAddr calls /v1/me from peer with token, and X-Forwarded-For xff when
// not "".
func fromAddr(t *testing.T, e http.Handler, peer, xff, token string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/v1/me", nil)
	req.RemoteAddr = peer + ":40000"
	if xff != "" {
		req.Header.Set(echo.HeaderXForwardedFor, xff)
	}
	req.Header.Set(echo.HeaderAuthorization, "Bearer "+token)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func TestFailedAuthenticationsAreLimited(t *testing.T) {
	t.Parallel()
	const window = 2 * time.Second
	var log bytes.Buffer
	b := setupOps(t, func(c *api.Config) {
		c.AuthFailureWindow = window
		c.Logger = slog.New(slog.NewTextHandler(&log, nil))
	})
	const guesser, bystander = "203.0.113.7", "203.0.113.8"
	var first time.Time // the window starts before it
	for i := range 10 {
		rec := fromAddr(t, b.echo, guesser, "", "wrong-guess-"+strconv.Itoa(i))
		require.Equal(t, http.StatusUnauthorized, rec.Code, "failure %d", i+1)
		if i == 0 {
			first = time.Now()
		}
	}
	rec := fromAddr(t, b.echo, guesser, "", "wrong-guess-10")
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "the 11th: %s", rec.Body.String())
	requireRetryAfter(t, rec, window)
	require.Contains(t, rec.Header().Get(echo.HeaderContentType), "application/problem+json")

	rec = fromAddr(t, b.echo, guesser, "", opsTok)
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "a right token from a limited address is refused too")
	requireRetryAfter(t, rec, window)
	require.Equal(t, http.StatusOK, fromAddr(t, b.echo, bystander, "", opsTok).Code, "another address is unaffected")
	require.Equal(t, http.StatusUnauthorized, fromAddr(t, b.echo, bystander, "", "wrong").Code)

	// Another instance over the same database refuses the address too.
	other, _ := newAPI(t, api.Config{Pool: b.pool, OpsTokens: []string{opsTok}, AuthFailureWindow: window})
	require.Equal(t, http.StatusTooManyRequests, fromAddr(t, other, guesser, "", opsTok).Code, "shared through the database")

	require.Equal(t, 11.0, counterValue(t, b, "paygate_auth_failures_total"), "10 + the bystander's one")
	require.Equal(t, 2.0, counterValue(t, b, "paygate_auth_limited_total"))
	require.Contains(t, log.String(), "authentication failures limited")
	require.NotContains(t, log.String(), "wrong-guess", "the log never holds a token")

	require.Less(t, time.Since(first), window, "the test outran its window")
	time.Sleep(time.Until(first.Add(window + 50*time.Millisecond)))
	require.Equal(t, http.StatusOK, fromAddr(t, b.echo, guesser, "", opsTok).Code, "after the window")
	require.Equal(t, http.StatusOK, fromAddr(t, other, guesser, "", opsTok).Code, "after the window, everywhere")
}

func requireRetryAfter(t *testing.T, rec *httptest.ResponseRecorder, window time.Duration) {
	t.Helper()
	s, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	require.NoError(t, err, "Retry-After is whole seconds: %q", rec.Header().Get("Retry-After"))
	require.GreaterOrEqual(t, s, 1)
	require.LessOrEqual(t, s, int(window/time.Second))
}

// counterValue reads a counter's sum over its labels from the bundle's
// registry.
func counterValue(t *testing.T, b *opsBundle, name string) float64 {
	t.Helper()
	families, err := b.registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			var sum float64
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestForwardedForOnlyFromTrustedProxies(t *testing.T) {
	t.Parallel()
	proxies, err := api.ParseTrustedProxies([]string{"10.0.0.0/8", "192.0.2.1"})
	require.NoError(t, err)
	b := setupOps(t, func(c *api.Config) {
		c.TrustedProxies = proxies
		c.AuthFailureWindow = time.Minute
	})
	// Through trusted proxies: the rightmost untrusted forwarded address is
	// the client, whatever it wrote further left.
	for i := range 10 {
		rec := fromAddr(t, b.echo, "10.1.2.3", "1.1.1."+strconv.Itoa(i)+", 198.51.100.9, 192.0.2.1", "wrong")
		require.Equal(t, http.StatusUnauthorized, rec.Code)
	}
	require.Equal(t, http.StatusTooManyRequests, fromAddr(t, b.echo, "10.1.2.3", "198.51.100.9", opsTok).Code,
		"198.51.100.9 is limited, seen through a trusted proxy")
	require.Equal(t, http.StatusOK, fromAddr(t, b.echo, "10.1.2.3", "198.51.100.10", opsTok).Code)
	require.Equal(t, http.StatusOK, fromAddr(t, b.echo, "10.1.2.3", "", opsTok).Code, "the proxy itself is not limited")

	// An untrusted peer's X-Forwarded-For is ignored: its own address is
	// counted, and it cannot pass for the limited address nor escape it.
	require.Equal(t, http.StatusOK, fromAddr(t, b.echo, "203.0.113.50", "198.51.100.9", opsTok).Code,
		"an untrusted peer cannot be taken for the limited address")
	for i := range 10 {
		require.Equal(t, http.StatusUnauthorized, fromAddr(t, b.echo, "203.0.113.50", "198.51.100."+strconv.Itoa(100+i), "wrong").Code)
	}
	require.Equal(t, http.StatusTooManyRequests, fromAddr(t, b.echo, "203.0.113.50", "198.51.100.200", opsTok).Code,
		"a new X-Forwarded-For per guess does not escape the limit")

	_, err = api.ParseTrustedProxies([]string{"not-an-address"})
	require.Error(t, err)
	p, err := api.ParseTrustedProxies([]string{"2001:db8::1"})
	require.NoError(t, err)
	require.Equal(t, []netip.Prefix{netip.MustParsePrefix("2001:db8::1/128")}, p)
}
