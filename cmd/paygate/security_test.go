package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/reliability"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
)

// Security checks against the real binary: slow clients are cut off, the
// body limit and the signature's time window hold on the wire, every route
// that is not public refuses missing and wrong credentials, filters treat
// hostile strings as data, and nothing of it reaches the logs.

// requireCleanLogs fails when srv logged a secret, a token, a signature or
// payload data.
func requireCleanLogs(t *testing.T, srv *server) {
	t.Helper()
	leaks := reliability.ScanLogs(srv.logs.String(), testSecret, "whsec_old_rotated_out", testOps, testFinance)
	require.Empty(t, leaks, "logs must not contain secrets, tokens, signatures or payloads")
}

// TestServerTimeoutsAreSet: serve's http.Server sets every timeout that
// protects it from slow or idle clients (a zero one means "never"). The
// idle and write timeouts are too long to wait for in a test; this reads
// them from the source, where removing one cannot go unnoticed.
func TestServerTimeoutsAreSet(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "serve.go", nil, 0)
	require.NoError(t, err)
	found := 0
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		sel, ok := lit.Type.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Server" || fmt.Sprint(sel.X) != "http" {
			return true
		}
		found++
		fields := map[string]ast.Expr{}
		for _, el := range lit.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				fields[fmt.Sprint(kv.Key)] = kv.Value
			}
		}
		for _, name := range []string{"ReadHeaderTimeout", "ReadTimeout", "WriteTimeout", "IdleTimeout"} {
			v, ok := fields[name]
			require.True(t, ok, "http.Server at %s does not set %s", fset.Position(lit.Pos()), name)
			if b, ok := v.(*ast.BasicLit); ok {
				require.NotEqual(t, "0", b.Value, "%s is zero (no timeout)", name)
			}
		}
		return true
	})
	require.Equal(t, 1, found, "serve.go builds one http.Server")
}

// slowConn opens a raw connection to addr and reports, on the returned
// channel, how long after opening it the server closed it (bounded by
// limit: a hang is reported as limit).
func slowConn(t *testing.T, addr string, limit time.Duration, write func(net.Conn)) time.Duration {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	closed := make(chan time.Duration, 1)
	go func() {
		_ = conn.SetReadDeadline(time.Now().Add(limit))
		_, _ = io.Copy(io.Discard, conn) // returns when the server closes (or the deadline passes)
		closed <- time.Since(start)
	}()
	done := make(chan struct{})
	defer close(done)
	go func() {
		defer func() { _ = recover() }()
		select {
		case <-done:
		default:
			write(conn)
		}
	}()
	return <-closed
}

// TestSlowClientsAreCutOff: a client that trickles its headers, and one
// that connects and says nothing, are disconnected by ReadHeaderTimeout (5s)
// rather than holding a connection forever. In the long suite a client
// that trickles its body is cut off by ReadTimeout (30s) too.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	srv := startServer(t, dbURL)
	const limit = 15 * time.Second

	trickle := func(prefix string, every time.Duration) func(net.Conn) {
		return func(c net.Conn) {
			if _, err := io.WriteString(c, prefix); err != nil {
				return
			}
			for range int(limit / every) {
				time.Sleep(every)
				if _, err := c.Write([]byte("a")); err != nil {
					return
				}
			}
		}
	}
	cases := map[string]func(net.Conn){
		"headers one byte at a time": trickle("POST /webhooks/stripe HTTP/1.1\r\nHost: paygate\r\nX-Slow: ", 300*time.Millisecond),
		"silent after connecting":    func(net.Conn) {},
	}
	for name, write := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			took := slowConn(t, srv.addr, limit, write)
			require.Less(t, took, 10*time.Second, "the server must cut a slow client off (ReadHeaderTimeout)")
			require.Greater(t, took, 4*time.Second, "cut off by the timeout, not refused at once")
		})
	}
	if os.Getenv("PAYGATE_RELIABILITY") == "long" {
		t.Run("body one byte a second", func(t *testing.T) {
			t.Parallel()
			headers := "POST /webhooks/stripe HTTP/1.1\r\nHost: paygate\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
			took := slowConn(t, srv.addr, 45*time.Second, trickle(headers, time.Second))
			require.Less(t, took, 40*time.Second, "the server must cut a slow body off (ReadTimeout)")
		})
	}
	requireCleanLogs(t, srv)
}

// signedPost sends body to the real binary's webhook endpoint with a
// signature made at signedAt; chunked hides the length.
func signedPost(t *testing.T, srv *server, body []byte, signedAt time.Time, chunked bool) (int, string) {
	t.Helper()
	var r io.Reader = bytes.NewReader(body)
	if chunked {
		r = io.MultiReader(bytes.NewReader(body)) // no Len(): sent chunked
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+srv.addr+"/webhooks/stripe", r)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(stripesim.SignatureHeader, stripesim.SignedRequest(body, testSecret, signedAt))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func inboxCount(t *testing.T, dbURL string) int {
	t.Helper()
	out, err := runPsqlCount(dbURL)
	require.NoError(t, err)
	return out
}

func runPsqlCount(dbURL string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := openPool(ctx, config{DatabaseURL: dbURL}, 1)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	var n int
	err = pool.QueryRow(ctx, `SELECT count(*) FROM inbox_events`).Scan(&n)
	return n, err
}

// TestWebhookLimitsOnTheWire: through the real binary, a body of exactly
// PAYGATE_MAX_BODY_BYTES is accepted and one byte more is 413, whether or
// not the request declares its length; a signature more than the
// tolerance (300s) in the past or in the future is 400; nothing refused is
// stored.
func TestWebhookLimitsOnTheWire(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	srv := startServer(t, dbURL, "PAYGATE_MAX_BODY_BYTES=8192")
	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	sim.Pay(stripesim.PayOpts{Amount: 1000, Currency: "usd"})
	events := sim.Events()
	now := time.Now()

	pad := func(payload []byte, size int) []byte { // trailing spaces keep it the same JSON
		return append(append([]byte(nil), payload...), bytes.Repeat([]byte(" "), size-len(payload))...)
	}
	exact := pad(events[0].Payload, 8192)
	for _, chunked := range []bool{false, true} {
		status, body := signedPost(t, srv, pad(events[1].Payload, 8193), now, chunked)
		require.Equal(t, http.StatusRequestEntityTooLarge, status, "chunked=%t: %s", chunked, body)
	}
	status, body := signedPost(t, srv, exact, now, true)
	require.Equal(t, http.StatusOK, status, "a body of exactly the limit is accepted: %s", body)

	for name, at := range map[string]time.Time{
		"stale by 400s":  now.Add(-400 * time.Second),
		"future by 400s": now.Add(400 * time.Second),
	} {
		status, body := signedPost(t, srv, events[1].Payload, at, false)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", name, body)
	}
	require.Equal(t, 1, inboxCount(t, dbURL), "only the accepted event is stored")
	for name, at := range map[string]time.Time{
		"250s old":   now.Add(-250 * time.Second),
		"250s ahead": now.Add(250 * time.Second),
	} {
		status, body := signedPost(t, srv, events[1].Payload, at, false)
		require.Equal(t, http.StatusOK, status, "%s is within the tolerance: %s", name, body)
	}
	requireCleanLogs(t, srv)
}

// publicRoutes answer without credentials by design.
var publicRoutes = map[string]bool{
	"/healthz": true, "/readyz": true, "/metrics": true, "/openapi.json": true, "/webhooks/stripe": true,
}

var routeParam = regexp.MustCompile(`:[A-Za-z_]+`)

// protectedRoutes lists every route serve's Echo registers, minus the public
// ones, with its parameters filled in: the same api.NewEcho serve calls.
func protectedRoutes(t *testing.T) [][2]string {
	t.Helper()
	pool := testdb.New(t)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)
	e, _ := api.NewEcho(api.Config{Pool: pool, Jobs: jc, OpsTokens: []string{testOps}, FinanceTokens: []string{testFinance}, RiverUI: true})
	var out [][2]string
	seen := map[string]bool{}
	for _, r := range e.Routes() {
		if publicRoutes[r.Path] || !regexp.MustCompile(`^[A-Z]+$`).MatchString(r.Method) {
			continue
		}
		p := routeParam.ReplaceAllString(r.Path, "probe_1")
		p = strings.ReplaceAll(p, "*", "probe")
		if strings.HasPrefix(p, "/debug/pprof/") {
			p += "?seconds=1" // a valid token must not start a 30s profile
		}
		key := r.Method + " " + p
		if !seen[key] {
			seen[key] = true
			out = append(out, [2]string{r.Method, p})
		}
	}
	return out
}

// TestEveryProtectedRouteRefusesBadCredentials walks every route of the
// Echo serve builds (the /v1 API, /riverui, /debug/pprof, and whatever is
// added later) against the real binary: no credentials, a wrong bearer
// token, a wrong basic password, a token with a suffix, the other scheme's
// syntax — all 401. With the right role the same route answers something
// else than 401 and 403, so the refusal was the authentication's.
func TestEveryProtectedRouteRefusesBadCredentials(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	// The walk sends hundreds of bad credentials: each from an address of
	// its own, through a trusted proxy, so the per-address limit on failed
	// authentications (429) stays out of the way of what is checked here.
	srv := startServer(t, dbURL, "PAYGATE_TRUSTED_PROXIES=127.0.0.1")
	routes := protectedRoutes(t)
	var v1, riverUI, pprof bool
	for _, r := range routes {
		v1 = v1 || strings.HasPrefix(r[1], "/v1/")
		riverUI = riverUI || strings.HasPrefix(r[1], "/riverui")
		pprof = pprof || strings.HasPrefix(r[1], "/debug/pprof")
	}
	require.True(t, v1 && riverUI && pprof, "the walk covers /v1, /riverui and /debug/pprof: %v", routes)

	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	bad := map[string]string{
		"none":                "",
		"wrong bearer":        "Bearer wrong-token-value",
		"empty bearer":        "Bearer ",
		"token suffix":        "Bearer " + testOps + "x",
		"token prefix":        "Bearer " + testOps[:len(testOps)-1],
		"wrong basic":         basic("ops", "wrong-token-value"),
		"bare token":          testOps,
		"token as basic user": basic(testOps, ""),
	}
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	sent := 0
	do := func(method, path, auth string) int {
		req, err := http.NewRequest(method, "http://"+srv.addr+path, strings.NewReader(`{}`))
		require.NoError(t, err)
		sent++
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", sent>>16&255, sent>>8&255, sent&255))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "security-walk")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		require.NoError(t, err, "%s %s", method, path)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, r := range routes {
		method, path := r[0], r[1]
		for name, auth := range bad {
			require.Equal(t, http.StatusUnauthorized, do(method, path, auth), "%s %s with %s credentials", method, path, name)
		}
		okStatus := do(method, path, "Bearer "+testOps)
		if okStatus == http.StatusForbidden {
			okStatus = do(method, path, "Bearer "+testFinance)
		}
		require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, okStatus,
			"%s %s refuses every token: is it reachable at all?", method, path)
	}
	// Finance may not operate. Double charges are money finance watches:
	// it reads them (the contract), and only ops dismiss one.
	for _, r := range routes {
		if r[0] == http.MethodGet && strings.HasPrefix(r[1], "/v1/ops/double-charges") {
			require.Equal(t, http.StatusOK, do(r[0], r[1], "Bearer "+testFinance), "%s %s with the finance token", r[0], r[1])
			continue
		}
		if strings.HasPrefix(r[1], "/v1/ops/") || strings.HasPrefix(r[1], "/riverui") || strings.HasPrefix(r[1], "/debug/pprof") {
			require.Equal(t, http.StatusForbidden, do(r[0], r[1], "Bearer "+testFinance), "%s %s with the finance token", r[0], r[1])
		}
	}
	requireCleanLogs(t, srv)
}

// TestHostileFilterStrings: the poison queue's filters, the audit filter,
// the bulk replay's filter and the path parameters are bound as data.
// Quotes, comments, LIKE wildcards and statement separators match nothing
// (no event has them), change nothing, and break nothing.
func TestHostileFilterStrings(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	srv := startServer(t, dbURL)
	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	p := sim.Pay(stripesim.PayOpts{Amount: 1000, Currency: "usd"})
	sim.Emit("charge.succeeded", map[string]any{"id": "ch_hostile_1", "object": "charge", "amount": 100, "captured": true, "currency": "zzz"})
	sim.Emit("refund.updated", map[string]any{"id": "re_hostile_2", "object": "refund", "amount": -5, "currency": "usd", "status": "succeeded", "payment_intent": p.ID})
	_, err := sim.Deliver(context.Background(), "http://"+srv.addr+"/webhooks/stripe", sim.Events(), nil)
	require.NoError(t, err)

	type page struct {
		Events []struct {
			EventID string `json:"event_id"`
		} `json:"events"`
	}
	list := func(query string) page {
		var pg page
		code := getJSON(t, "http://"+srv.addr+"/v1/ops/poison"+query, testOps, &pg)
		require.Equal(t, http.StatusOK, code, query)
		return pg
	}
	// A hostile filter is either data that matches nothing (200) or text
	// the database cannot hold, refused as the client's error (400); never
	// a 500.
	hostileList := func(query string) page {
		var pg page
		code := getJSON(t, "http://"+srv.addr+"/v1/ops/poison"+query, testOps, &pg)
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest}, code, query)
		return pg
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(list("").Events) < 2 {
		require.False(t, time.Now().After(deadline), "the two poison events never reached the queue\n%s", srv.logs.String())
		time.Sleep(50 * time.Millisecond)
	}
	require.Len(t, list("?type=charge.succeeded").Events, 1, "the type filter works")
	require.Len(t, list("?error=currency").Events, 1, "the error filter works")

	hostile := []string{`' OR 1=1 --`, `' OR '1'='1`, `%`, `_`, `%%`, `\`, `"; DROP TABLE inbox_events; --`, `') OR true; --`, "\x00", `*`, `.*`}
	for _, h := range hostile {
		for _, param := range []string{"type", "error"} {
			require.Empty(t, hostileList("?"+param+"="+url.QueryEscape(h)).Events, "%s=%q matches nothing", param, h)
		}
		var audit struct {
			Entries []json.RawMessage `json:"entries"`
		}
		code := getJSON(t, "http://"+srv.addr+"/v1/ops/audit?event_id="+url.QueryEscape(h), testOps, &audit)
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest}, code, "audit filter %q", h)
		require.Empty(t, audit.Entries)
		for _, path := range []string{"/v1/events/stripe/", "/v1/payments/"} {
			code := getJSON(t, "http://"+srv.addr+path+url.PathEscape(h), testOps, nil)
			require.Contains(t, []int{http.StatusNotFound, http.StatusBadRequest}, code, "%s%q", path, h)
		}
		body, _ := json.Marshal(map[string]any{"type": h, "error": h, "dry_run": true})
		req, err := http.NewRequest(http.MethodPost, "http://"+srv.addr+"/v1/ops/replay", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testOps)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("hostile-%x", h))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var replay struct {
			Matched int `json:"matched"`
		}
		dec := json.NewDecoder(bufio.NewReader(resp.Body))
		_ = dec.Decode(&replay)
		resp.Body.Close()
		require.Contains(t, []int{http.StatusOK, http.StatusBadRequest}, resp.StatusCode, "bulk replay filter %q", h)
		require.Zero(t, replay.Matched, "bulk replay filter %q matches nothing", h)
	}
	require.Len(t, list("").Events, 2, "the poison queue is intact")
	var stats struct {
		Events map[string]int `json:"events"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+srv.addr+"/v1/ops/stats", testOps, &stats))
	require.Equal(t, 2, stats.Events["poison"])
	require.Equal(t, 2, stats.Events["processed"])
	requireCleanLogs(t, srv)
}

// opsPost sends a POST under /v1 to the real binary with the ops token and
// an Idempotency-Key, and returns the status, the Idempotent-Replayed header
// and the body.
func opsPost(t *testing.T, srv *server, path, key, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+srv.addr+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testOps)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
}

// TestHostileSignedPayloads probes the real binary as a sender holding the
// secret would: bodies that are signed but not sane. Each must get a clear
// 400 and leave nothing behind (never a 503 the provider retries for days,
// never an event filed under an id other readers do not see, never two
// events merged into one); the event view's answer stays the size of the
// payload whatever its nesting; a bulk replay needs a filter; and two
// replay bodies that mean different things never share an Idempotency-Key
// answer.
func TestHostileSignedPayloads(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	srv := startServer(t, dbURL)
	now := time.Now()
	event := func(id, created, extra string) []byte {
		if created != "" {
			created = `"created":` + created + `,`
		}
		return []byte(`{"id":` + id + `,"object":"event","api_version":"2024-06-20",` + created + extra +
			`"livemode":false,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_wire","object":"payment_intent","amount":1000,"currency":"usd"}}}`)
	}
	created := fmt.Sprint(now.Unix())
	for name, body := range map[string][]byte{
		"created int64 max (was 503 for ever)": event(`"evt_w1"`, "9223372036854775807", ""),
		"created absent (booked at 1970)":      event(`"evt_w2"`, "", ""),
		"created negative (booked in 1811)":    event(`"evt_w3"`, "-5000000000", ""),
		"created in 2100":                      event(`"evt_w4"`, "4102444800", ""),
		"id and ID":                            event(`"evt_w5"`, created, `"ID":"evt_w5_other",`),
		"type and TYPE":                        event(`"evt_w6"`, created, `"TYPE":"charge.refunded",`),
		"id twice":                             event(`"evt_w7"`, created, `"id":"evt_w7_other",`),
		"Data":                                 []byte(strings.Replace(string(event(`"evt_w8"`, created, "")), `"data"`, `"Data"`, 1)),
		"invalid UTF-8 id":                     event("\"evt_w9_\xff\"", created, ""),
		"other invalid UTF-8 id":               event("\"evt_w9_\xfe\"", created, ""),
		"lone surrogate id":                    event(`"evt_w9_\ud800"`, created, ""),
		"nesting 4000 deep":                    event(`"evt_w10"`, created, `"x":`+strings.Repeat("[", 4000)+strings.Repeat("]", 4000)+`,`),
	} {
		status, answer := signedPost(t, srv, body, now, false)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", name, answer)
	}
	require.Zero(t, inboxCount(t, dbURL), "no hostile body is stored")

	// Nesting the decoder accepts: the event view answers the payload as
	// stored, not re-indented (which grew with the square of the depth).
	deep := event(`"evt_w_deep"`, created, `"x":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`,`)
	status, answer := signedPost(t, srv, deep, now, false)
	require.Equal(t, http.StatusOK, status, answer)
	req, err := http.NewRequest(http.MethodGet, "http://"+srv.addr+"/v1/events/stripe/evt_w_deep", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testOps)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	view, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(view))
	require.LessOrEqual(t, len(view), len(deep)+1024, "the view is the payload plus the event's fields")
	require.Contains(t, string(view), string(deep), "the payload as stored")

	// A bulk replay needs a filter.
	for i, body := range []string{"", `{}`, `{"dry_run":true}`, `{"reason":"all of it"}`} {
		status, _, answer := opsPost(t, srv, "/v1/ops/replay", fmt.Sprintf("wire-nofilter-%d", i), body)
		require.Equal(t, http.StatusBadRequest, status, "body %q: %s", body, answer)
	}
	// One body read as a dry run, the other as a real replay: the second
	// must not get the first one's answer.
	_, _, _ = opsPost(t, srv, "/v1/ops/replay", "wire-fp", `{"status":"poison","dry_run":false,"DRY_RUN":true}`)
	status, replayed, answer := opsPost(t, srv, "/v1/ops/replay", "wire-fp", `{"status":"poison","DRY_RUN":true,"dry_run":false}`)
	require.Empty(t, replayed, "another request got a stored answer: %d %s", status, answer)
	require.Equal(t, http.StatusBadRequest, status, answer)
	requireCleanLogs(t, srv)
}
