package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider/stripe"
)

const testSecret = "whsec_loadgen_test"

// readRequests reads a request file as scripts/bench.lua does.
func readRequests(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out [][]byte
	for len(b) > 0 {
		require.GreaterOrEqual(t, len(b), 8)
		n, err := strconv.Atoi(string(b[:8]))
		require.NoError(t, err)
		out = append(out, b[8:8+n])
		b = b[8+n:]
	}
	return out
}

// recorder is a floor server that also records the event ids it accepted.
type recorder struct {
	mu   sync.Mutex
	seen map[string]int
	fail map[string]bool // ids answered 500
}

func (rec *recorder) handler() http.Handler {
	floor := floorServer(stripe.NewReceiver([]string{testSecret}, 0), 1<<20)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if ev, err := stripe.DecodeEvent(body); err == nil {
			rec.mu.Lock()
			rec.seen[ev.ID]++
			fail := rec.fail[ev.ID]
			rec.mu.Unlock()
			if fail {
				http.Error(w, "refused for the test", http.StatusInternalServerError)
				return
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		floor.ServeHTTP(w, r)
	})
}

func newRecorder(t *testing.T) (*recorder, *url.URL) {
	rec := &recorder{seen: map[string]int{}, fail: map[string]bool{}}
	srv := httptest.NewServer(rec.handler())
	t.Cleanup(srv.Close)
	target, err := url.Parse(srv.URL + "/webhooks/stripe")
	require.NoError(t, err)
	return rec, target
}

// TestWrittenRequestsAreSignedStripeDeliveries: each thread's file holds
// its share of the events, every record is an HTTP/1.1 request that the
// floor server (paygate's own verifier and decoder) answers 200, and a
// tampered body is refused, so the floor does check signatures.
func TestWrittenRequestsAreSignedStripeDeliveries(t *testing.T) {
	t.Parallel()
	_, target := newRecorder(t)
	ds := distinctEvents(61, 0.5)
	require.Len(t, ds, 61)
	ids := map[string]bool{}
	for _, d := range ds {
		ids[d.id] = true
	}
	require.Len(t, ids, 61, "distinct events")

	prefix := filepath.Join(t.TempDir(), "requests")
	require.NoError(t, writeRequests(prefix, ds, 2, testSecret, target))
	first, second := readRequests(t, prefix+".0"), readRequests(t, prefix+".1")
	require.Len(t, first, 31)
	require.Len(t, second, 30)

	send := func(raw []byte) int {
		c, err := net.Dial("tcp", target.Host)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write(raw)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK {
			require.JSONEq(t, `{"received":true,"duplicate":false}`, string(body))
		}
		return resp.StatusCode
	}
	for _, raw := range append(first, second...) {
		require.Equal(t, http.StatusOK, send(raw))
	}
	tampered := bytes.Replace(first[0], []byte(`"evt_`), []byte(`"evX_`), 1)
	require.False(t, bytes.Equal(first[0], tampered), "the body was changed")
	require.Equal(t, http.StatusBadRequest, send(tampered))
}

func wrkOrSkip(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("wrk is not installed (scripts/wrk.sh installs it)")
	}
	return bin
}

// TestWrkSendsEveryEventOnce: with scripts/bench.lua, wrk sends every
// event of every thread's file exactly once (the request wrk builds to
// check the script is not sent), stops when all are answered, and reports
// the non-2xx answers it got; paced, it sends them all too.
func TestWrkSendsEveryEventOnce(t *testing.T) {
	t.Parallel()
	bin := wrkOrSkip(t)
	rec, target := newRecorder(t)
	ds := distinctEvents(400, 0.1)
	for _, d := range ds[:3] {
		rec.fail[d.id] = true
	}
	dir := t.TempDir()
	prefix := filepath.Join(dir, "requests")
	require.NoError(t, writeRequests(prefix, ds, 2, testSecret, target))
	w := wrkRun{bin: bin, script: "../../scripts/bench.lua", url: target.String(), threads: 2, connections: 8,
		duration: 120 * time.Second, timeout: 10 * time.Second, prefix: prefix, output: filepath.Join(dir, "wrk.txt")}
	r, err := w.run(context.Background())
	require.NoError(t, err)
	for _, d := range ds {
		require.Equal(t, 1, rec.seen[d.id], d.id)
	}
	require.Len(t, rec.seen, len(ds))
	require.EqualValues(t, len(ds), r.Requests)
	require.EqualValues(t, len(ds), r.Answered)
	require.EqualValues(t, len(ds), r.Loaded)
	require.EqualValues(t, 3, r.Non2xx)
	require.EqualValues(t, 3, r.Status, "wrk's own Non-2xx or 3xx count")
	require.True(t, strings.HasPrefix(r.FirstBad, "500 "), r.FirstBad)
	require.Positive(t, r.RequestsPerS)
	require.Positive(t, r.FirstSend)
	require.GreaterOrEqual(t, r.LastAnswer, r.FirstSend)

	paced := distinctEvents(60, 0.1)
	require.NoError(t, writeRequests(prefix, paced, 2, testSecret, target))
	w.rate = 200
	r, err = w.run(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, len(paced), r.Answered)
	for _, d := range paced {
		require.Equal(t, 1, rec.seen[d.id], d.id)
	}
}

func TestParseWrk(t *testing.T) {
	t.Parallel()
	out := `Running 1m test @ http://127.0.0.1:18080/webhooks/stripe
  2 threads and 64 connections
  Latency Distribution
     50%    8.01ms
  45000 requests in 10.00s, 6.31MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:   4499.95
Transfer/sec:    646.00KB
bench: duration_us=10000111 requests=45000 connect=0 read=2 write=0 status=4 timeout=1
bench: latency_us p50=8010 p90=15020 p99=40250 p999=80000 max=120500 mean=9000
bench: thread=0 requests=22500 sent=22500 answered=22499 non2xx=2 first_send_us=1700000000000100 last_answer_us=1700000010000000 first_bad="503 {\"title\":\"x\"}"
bench: thread=1 requests=22500 sent=22500 answered=22500 non2xx=3 first_send_us=1700000000000050 last_answer_us=1700000010000200 first_bad=""
`
	r, err := parseWrk(out)
	require.NoError(t, err)
	require.Equal(t, wrkResult{
		Requests: 45000, Seconds: 10.000111, RequestsPerS: 4499.95,
		P50: 8.01, P90: 15.02, P99: 40.25, P999: 80, Max: 120.5, Mean: 9,
		Read: 2, Timeout: 1, Status: 4, Non2xx: 5, FirstBad: `503 {"title":"x"}`,
		Sent: 45000, Answered: 44999, Loaded: 45000,
		FirstSend: 1700000000000050, LastAnswer: 1700000010000200,
	}, r)
	require.EqualValues(t, 3, r.socketErrors())

	_, err = parseWrk("Requests/sec: 10\n")
	require.Error(t, err, "output of a wrk run without bench.lua")
}

// TestProxyRoundRobin: the proxy spreads requests evenly over its backends
// and keeps the Host the sender used.
func TestProxyRoundRobin(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]int{}
	var targets []*url.URL
	for _, name := range []string{"a", "b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got[name+" "+r.Host]++
			mu.Unlock()
			_, _ = io.WriteString(w, name)
		}))
		t.Cleanup(srv.Close)
		u, err := url.Parse(srv.URL)
		require.NoError(t, err)
		targets = append(targets, u)
	}
	proxy := httptest.NewServer(newProxy(targets))
	t.Cleanup(proxy.Close)
	for range 10 {
		req, err := http.NewRequest(http.MethodPost, proxy.URL+"/webhooks/stripe", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Host = "gateway.example"
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	require.Equal(t, map[string]int{"a gateway.example": 5, "b gateway.example": 5}, got)
}

func TestExpected(t *testing.T) {
	t.Parallel()
	e, err := parseExpect("16=2000,64=4000,256=7000")
	require.NoError(t, err)
	require.InDelta(t, 2000, expected(e, 16), 1e-9)
	require.InDelta(t, 3000, expected(e, 32), 1e-9, "halfway between 16 and 64 on a log scale")
	require.InDelta(t, 2000, expected(e, 4), 1e-9)
	require.InDelta(t, 7000, expected(e, 1024), 1e-9)
	_, err = parseExpect("16:2000")
	require.Error(t, err)
}

// TestReportTargets: the verdicts follow the figures, and every non-2xx
// or socket error of a paygate run is counted.
func TestReportTargets(t *testing.T) {
	t.Parallel()
	lv := func(conns int, ingest, e2eSeconds float64, events int, non2xx int64) level {
		return level{Connections: conns, Events: events, E2ESeconds: e2eSeconds,
			Wrk: wrkResult{RequestsPerS: ingest, P99: 20, Non2xx: non2xx}}
	}
	cut := func(l level) level {
		l.Wrk.Loaded, l.Wrk.Answered, l.Wrk.Requests, l.Wrk.Seconds = 30000, 29000, 9000*40, 40
		return l
	}
	r := results{Series: []series{
		{Label: "floor", Floor: true, Levels: []level{lv(256, 40000, 0, 20000, 0)}},
		{Label: "paygate", Instances: 1, PeakRSS: []int64{150 << 20},
			Levels: []level{lv(64, 7500, 10, 20000, 0), cut(lv(256, 9000, 10, 30000, 1))},
			Paced:  &level{Connections: 64, Offered: 1000, Events: 10000, Wrk: wrkResult{RequestsPerS: 990, P99: 70}}},
		{Label: "peer-store", Peer: peerStore, Instances: 1, Levels: []level{lv(64, 2500, 8, 20000, 0)}},
		{Label: "peer-sync", Peer: peerSync, Instances: 1, Levels: []level{lv(64, 1600, 12.5, 20000, 0)}},
	}}
	var out bytes.Buffer
	bad := report(&out, r, anchors{pgbenchSingle: []float64{2900, 3100}, pgbenchBare: []float64{5000}, pgbenchBatch: 2000, batchSize: 32})
	require.EqualValues(t, 1, bad)
	text := out.String()
	line := func(prefix string) string {
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, prefix) {
				return l
			}
		}
		t.Fatalf("no line %q in:\n%s", prefix, text)
		return ""
	}
	met := func(l string) bool { return strings.HasSuffix(strings.TrimSpace(l), " met") }
	// 7,500/s ingested, 2,000/s applied end to end, against the store
	// peer's 2,500/s, the sync peer's 1,600/s and bare's 5,000/s.
	require.Contains(t, line("64 connections: ingest ≥ 3× the store peer"), "3.00×")
	require.True(t, met(line("64 connections: ingest ≥ 3× the store peer")))
	require.Contains(t, line("64 connections: ingest ≥ 1.5× bare"), "1.50×")
	require.True(t, met(line("64 connections: ingest ≥ 1.5× bare")))
	require.Contains(t, line("64 connections: end-to-end ≥ 1.5× the sync peer"), "1.25×")
	require.Contains(t, line("64 connections: end-to-end ≥ 1.5× the sync peer"), "NOT MET")
	require.Contains(t, line("64 connections: end-to-end against pgbench single, bare"), "0.67×, 0.40×")
	require.NotContains(t, line("64 connections: end-to-end against pgbench single, bare"), "met")
	require.Contains(t, line("256 connections"), "(floor, 40000/s)")
	require.Contains(t, line("256 connections"), "22.5 %")
	require.Contains(t, line("256 connections"), "NOT MET")
	require.Contains(t, line("p99"), "NOT MET")
	require.True(t, strings.HasSuffix(strings.TrimSpace(line("peak RSS ≤")), " met"))
	require.Contains(t, line("zero non-2xx"), "NOT MET")
	require.Contains(t, line("  -c256: wrk's -d bound"), "29000 of 30000 events answered")

	// Without the peers and the bare transaction (BENCH_PEERS=0, no
	// pgbench) their targets are not measured, neither met nor failed.
	r.Series = r.Series[:2]
	out.Reset()
	report(&out, r, anchors{})
	text = out.String()
	for _, target := range []string{"64 connections: ingest ≥ 3× the store peer", "64 connections: ingest ≥ 1.5× bare",
		"64 connections: end-to-end ≥ 1.5× the sync peer"} {
		require.Regexp(t, `\s-\s+not measured\s*$`, line(target))
	}
}

// TestReportBareOneTrip: the bare transaction in one round trip is shown
// among the anchors and compared at 64 connections, with no verdict: the
// targets stay against the bare transaction as paygate's clients send it.
func TestReportBareOneTrip(t *testing.T) {
	t.Parallel()
	r := results{Series: []series{{Label: "paygate", Instances: 1,
		Levels: []level{{Connections: 64, Events: 20000, E2ESeconds: 10, Wrk: wrkResult{RequestsPerS: 7500}}}}}}
	var out bytes.Buffer
	report(&out, r, anchors{pgbenchBare: []float64{2000}, pgbenchBareOneTrip: []float64{2900, 3100}})
	var anchor, compared string
	for _, l := range strings.Split(out.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "pgbench, bare in one round trip"):
			anchor = l
		case strings.HasPrefix(l, "64 connections: ingest, end-to-end against bare in one round trip"):
			compared = l
		}
	}
	require.Contains(t, anchor, "(tps 2900, 3100; mean): 1rt", out.String())
	require.True(t, strings.HasSuffix(strings.TrimSpace(anchor), "3000"), anchor)
	require.Contains(t, compared, "2.50×, 0.67×", out.String())
	require.NotContains(t, compared, "met")
}

// TestReportNATS: the run with publishing on is compared with the one
// without at the same connections, and publishing keeps up when the last
// message was published within a second of the last event's applying.
func TestReportNATS(t *testing.T) {
	t.Parallel()
	lv := func(ingest, e2eSeconds float64) level {
		return level{Connections: 64, Events: 20000, E2ESeconds: e2eSeconds, Wrk: wrkResult{RequestsPerS: ingest}}
	}
	on := lv(7000, 11)
	on.Published, on.PublishSeconds, on.PublishBacklog = 24000, 13, 900
	r := results{Series: []series{
		{Label: "paygate", Instances: 1, Levels: []level{lv(7500, 10)}},
		{Label: "paygate-nats", Instances: 1, NATS: true, Levels: []level{on}},
	}}
	var out bytes.Buffer
	require.Zero(t, report(&out, r, anchors{pgbenchSingle: []float64{3000}}))
	text := out.String()
	require.Contains(t, text, "-c64: 24000 messages published 13.0 s after the first send: 1846 messages published/s; 900 not yet published")
	require.Regexp(t, `64 connections, NATS on: ingest within 10 % of without\s+0\.93×\s+met`, text)
	require.Regexp(t, `64 connections, NATS on: end-to-end within 10 % of without\s+0\.91×\s+met`, text)
	require.Regexp(t, `64 connections, NATS on: publishing keeps up \(last published ≤ 1 s after the last applied\)\s+\+2\.0 s\s+NOT MET`, text)
}

// TestReportEndpointPairs: each run with an endpoint is set against its
// own partner without, the targets take the median over the pairs, the
// latest delivery of any pair decides whether delivery keeps up, and a
// non-2xx in either run of a pair counts.
func TestReportEndpointPairs(t *testing.T) {
	t.Parallel()
	lv := func(ingest, e2eSeconds, deliverySeconds float64) level {
		l := level{Connections: 64, Events: 20000, E2ESeconds: e2eSeconds, Wrk: wrkResult{RequestsPerS: ingest}}
		if deliverySeconds > 0 {
			l.Messages, l.DeliverySeconds = 9000, deliverySeconds
		}
		return l
	}
	run := func(label string, pair int, with bool, l level) series {
		return series{Label: label, Instances: 1, Pair: pair, Delivery: with, Levels: []level{l}}
	}
	budgeted := func(l level, cpu cpuCounters) level {
		l.Stored = 20000
		l.Budget = &budget{Statements: 10000, RoundTrips: 8000, Rows: 190000, WALBytes: 190e6, CPU: cpu}
		return l
	}
	failing := lv(7000, 10.5, 10.5)
	failing.Wrk.Non2xx = 2
	r := results{Series: []series{
		{Label: "paygate", Instances: 1, Levels: []level{lv(9000, 8, 0)}},
		run("with-1", 1, true, budgeted(lv(7000, 11, 11.5), cpuCounters{Paygate: 4, Postgres: 8, Receiver: 0.5})),
		run("without-1", 1, false, budgeted(lv(7500, 10, 0), cpuCounters{Paygate: 3, Postgres: 6})),
		run("without-2", 2, false, lv(7000, 10, 0)),
		run("with-2", 2, true, failing),
		run("with-3", 3, true, lv(6000, 12, 14)),
		run("without-3", 3, false, lv(7000, 10, 0)),
	}}
	var out bytes.Buffer
	require.EqualValues(t, 2, report(&out, r, anchors{pgbenchSingle: []float64{3000}, pgbenchBare: []float64{2000}}))
	text := out.String()
	require.Contains(t, text, "3 pairs of runs")
	require.Regexp(t, `(?m)^\s+1\s+64\s+with\s+7500\s+7000\s+0\.93×\s+2000\s+1818\s+0\.91×`, text)
	require.Regexp(t, `(?m)^\s+2\s+64\s+without\s+7000\s+7000\s+1\.00×\s+2000\s+1905\s+0\.95×.*\s2\s+0\s*$`, text)
	require.Contains(t, text, "-c64, median of 3 pairs: ingest 0.93×, end to end 0.91× of the run without")
	require.Contains(t, text, "pair 1 with, -c64 per event applied: 0.5 statements in 0.4 round trips, 9.5 rows written, 9500 bytes of WAL (the server's); "+
		"CPU 200 µs in paygate, 400 µs in PostgreSQL (the server's), 25 µs in the receiver\n")
	require.Contains(t, text, "pair 1 without, -c64 per event applied: 0.5 statements in 0.4 round trips, 9.5 rows written, 9500 bytes of WAL (the server's); "+
		"CPU 150 µs in paygate, 300 µs in PostgreSQL (the server's)\n")
	require.Regexp(t, `64 connections, one endpoint: ingest within 10 % of without \(median of 3 pairs\)\s+0\.93×\s+met`, text)
	require.Regexp(t, `64 connections, one endpoint: end-to-end within 10 % of without \(median of 3 pairs\)\s+0\.91×\s+met`, text)
	require.Regexp(t, `64 connections, one endpoint: end-to-end against bare \(median of 3 pairs; compared, no target\)\s+0\.91×\s*\n`, text)
	require.Regexp(t, `64 connections, one endpoint: delivery keeps up in every pair .*\s+\+2\.0 s\s+NOT MET`, text)
	require.NotContains(t, text, "paygate, 1 instance, one endpoint attached", "the pairs' runs are not the main series nor a lone endpoint run")
	require.Contains(t, text, "paygate, 1 instance, wrk -t2 straight to it")
}

// TestBudgetLineMachine: the budget line says how busy the machine's CPUs
// were in each phase of the level, from three readings of /proc/stat, and,
// when the processes' CPU was read with them, what acknowledging and
// applying each cost; a missing or empty reading says nothing rather than
// a wrong share.
func TestBudgetLineMachine(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	m := machineReadings{
		{busy: 10 * time.Second, total: 20 * time.Second, at: start},
		{busy: 20 * time.Second, total: 32 * time.Second, at: start.Add(6400 * time.Millisecond)},
		{busy: 27 * time.Second, total: 40 * time.Second, at: start.Add(10400 * time.Millisecond)},
	}
	phases := m.phases(0)
	require.NotNil(t, phases)
	l := level{Stored: 20000, Budget: &budget{Statements: 10000, RoundTrips: 8000, Rows: 190000, WALBytes: 190e6, Machine: phases}}
	require.Equal(t, "per event applied: 0.5 statements in 0.4 round trips, 9.5 rows written, 9500 bytes of WAL (the server's); "+
		"the machine's CPUs 83 % busy while acknowledging (6.4 s), 88 % after it until the last was applied (4.0 s)", l.budgetLine())

	// With paygate's and PostgreSQL's CPU read at each reading: each
	// phase's, per event acknowledged and per event applied after.
	m[0].cpu = cpuCounters{Paygate: 100, Postgres: 200}
	m[1].cpu = cpuCounters{Paygate: 103.6, Postgres: 204}   // 3.6 s and 4 s while acknowledging 20,000
	m[2].cpu = cpuCounters{Paygate: 105.6, Postgres: 209.6} // 2 s and 5.6 s applying the 16,000 left
	l.Budget.Machine = m.phases(4000)
	require.Equal(t, "per event applied: 0.5 statements in 0.4 round trips, 9.5 rows written, 9500 bytes of WAL (the server's); "+
		"the machine's CPUs 83 % busy while acknowledging (6.4 s), 88 % after it until the last was applied (4.0 s); "+
		"while acknowledging, 180 µs in paygate and 200 µs in PostgreSQL an event acknowledged (4000 applied meanwhile), "+
		"after it 125 µs and 350 µs an event applied", l.budgetLine())

	unread := machineReadings{{at: m[0].at}, {at: m[1].at}, {at: m[2].at}}
	noTick := machineReadings{m[0], {busy: m[1].busy, total: m[0].total, cpu: m[1].cpu, at: m[1].at}, m[2]}
	for _, broken := range []machineReadings{
		m[:2],  // a reading missing
		unread, // /proc/stat unread
		noTick, // no tick between two
	} {
		require.Nil(t, broken.phases(0))
	}
}

// TestReportDatabaseView: a level measured on a server with
// pg_stat_statements gets PostgreSQL's view of its statements per event
// applied, each on one line without its comments.
func TestReportDatabaseView(t *testing.T) {
	t.Parallel()
	l := level{Connections: 64, Events: 20000, Stored: 20000, E2ESeconds: 10, Wrk: wrkResult{RequestsPerS: 5000}}
	l.Budget = &budget{Statements: 10000, RoundTrips: 8000, Rows: 190000, WALBytes: 190e6, Database: &statementsView{
		TotalMS: 8000, Calls: 30000,
		Top: []statementTime{
			{Query: oneLine("-- name: JobGetAvailable :many\nWITH locked_jobs AS (\n\tSELECT id FROM river_job /* fetch */ FOR UPDATE SKIP LOCKED)\nSELECT * FROM locked_jobs"), Calls: 400, ExecMS: 1200, Rows: 20000},
			{Query: oneLine("UPDATE inbox_events SET status = $1 WHERE " + strings.Repeat("x = $2 AND ", 20) + "true"), Calls: 160, ExecMS: 1000, Rows: 20000},
		},
	}}
	var out bytes.Buffer
	report(&out, results{Series: []series{{Label: "paygate", Instances: 1, Levels: []level{l}}}}, anchors{pgbenchSingle: []float64{3000}, pgbenchBare: []float64{2000}})
	text := out.String()
	require.Contains(t, text, "-c64 PostgreSQL's view (pg_stat_statements), per event applied: 1.50 statements run (those of triggers and foreign-key checks too), 400 µs of execution in all (wall time, waits included); the 2 longest:\n")
	require.Contains(t, text, "-c64      60.0 µs  0.020 calls  1.00 rows  WITH locked_jobs AS ( SELECT id FROM river_job FOR UPDATE SKIP LOCKED) SELECT * FROM locked_jobs\n")
	require.Regexp(t, `(?m)^-c64      50\.0 µs  0\.008 calls  1\.00 rows  UPDATE inbox_events SET status = \$1 WHERE x = \$2 AND .{40,}…$`, text)
}

// TestReportFeaturePairs: pairs of each kind get a section of their own,
// with what "with" means, the feature's columns and the medians over its
// own pairs; a run with the sweep that listed nothing, or with tracing
// that exported no span, is said to measure nothing and left out of the
// medians; the endpoint's
// targets take no figure of the other kinds.
func TestReportFeaturePairs(t *testing.T) {
	t.Parallel()
	lv := func(ingest, e2eSeconds float64) level {
		return level{Connections: 64, Events: 20000, E2ESeconds: e2eSeconds, Wrk: wrkResult{RequestsPerS: ingest}}
	}
	run := func(kind string, pair int, with bool, l level) series {
		return series{Label: fmt.Sprintf("%s-%d-%t", kind, pair, with), Instances: 1, Pair: pair, PairOf: kind, With: with,
			Levels: []level{l}, PeakRSS: []int64{int64(100+pair) << 20}}
	}
	swept := func(l level, listed, own, pages int) level {
		l.SweepListed, l.SweepOwn, l.SweepPages = listed, own, pages
		return l
	}
	traced := func(l level, spans int64) level {
		l.Spans = spans
		return l
	}
	r := results{Series: []series{
		{Label: "paygate", Instances: 1, Levels: []level{lv(9000, 8)}},
		run("sweep", 1, true, swept(lv(7000, 10), 9500, 12000, 100)),
		run("sweep", 1, false, lv(7000, 10)),
		run("sweep", 2, false, lv(8000, 10)),
		run("sweep", 2, true, swept(lv(7200, 10), 0, 0, 0)),
		run("sweep", 3, true, swept(lv(6000, 11), 10100, 15000, 101)),
		run("sweep", 3, false, lv(7500, 10)),
		run("tracing", 1, false, lv(8000, 10)),
		run("tracing", 1, true, traced(lv(6000, 12.5), 130000)),
		{Label: "with-1", Instances: 1, Pair: 1, Delivery: true, Levels: []level{lv(7000, 11)}},
		{Label: "without-1", Instances: 1, Pair: 1, Levels: []level{lv(7500, 10)}},
	}}
	var out bytes.Buffer
	require.Zero(t, report(&out, r, anchors{pgbenchSingle: []float64{3000}, pgbenchBare: []float64{2000}}))
	text := out.String()
	sections := strings.Split(text, "\n\n")
	section := func(prefix string) string {
		for _, s := range sections {
			if strings.HasPrefix(s, prefix) {
				return s
			}
		}
		t.Fatalf("no section %q in:\n%s", prefix, text)
		return ""
	}
	endpoint := section("one endpoint attached")
	require.Contains(t, endpoint, "1 pairs of runs")
	require.Contains(t, endpoint, "-c64, median of 1 pairs: ingest 0.93×, end to end 0.91× of the run without")

	sweep := section("Stripe's missed-event sweep on")
	require.Contains(t, sweep, "3 pairs of runs made one after the other, each on an instance of its own")
	require.Regexp(t, `(?m)^\s+pair\s+conns\s+first\s+ingest/s without\s+with\s+vs\s+e2e/s without\s+with\s+vs\s+listed\s+new\s+own\s+list pages/s\s+non-2xx\s+sock err$`, sweep)
	require.Regexp(t, `(?m)^\s+1\s+64\s+with\s+7000\s+7000\s+1\.00×\s+2000\s+2000\s+1\.00×\s+9500\s+0\s+12000 of 20000\s+10\.0\s+0\s+0$`, sweep)
	require.Regexp(t, `(?m)^\s+3\s+64\s+with\s+7500\s+6000\s+0\.80×\s+2000\s+1818\s+0\.91×\s+10100\s+0\s+15000 of 20000\s+9\.2\s+0\s+0$`, sweep)
	require.Contains(t, sweep, "  pair 2 with: -c64: the sweep listed nothing while the run was measured: the pair measures nothing, and is left out of the median\n")
	require.NotContains(t, sweep, "pair 1 with: -c64: the sweep")
	require.Contains(t, sweep, "-c64, median of 2 pairs: ingest 0.90×, end to end 0.95× of the run without")
	require.Contains(t, sweep, "peak RSS (VmHWM), the highest of the instances: with 103 MiB, without 103 MiB")

	tracing := section("tracing on")
	require.Regexp(t, `(?m)^\s+1\s+64\s+without\s+8000\s+6000\s+0\.75×\s+2000\s+1600\s+0\.80×\s+130000\s+6\.5\s+0\s+0$`, tracing)
	require.Contains(t, tracing, "-c64, median of 1 pairs: ingest 0.75×, end to end 0.80× of the run without")
	require.NotContains(t, tracing, "measures nothing")

	require.Regexp(t, `64 connections, one endpoint: ingest within 10 % of without \(median of 1 pairs\)\s+0\.93×\s+met`, text)
	require.Less(t, strings.Index(text, "one endpoint attached"), strings.Index(text, "Stripe's missed-event sweep on"))
	require.Less(t, strings.Index(text, "Stripe's missed-event sweep on"), strings.Index(text, "tracing on"))
}

// TestRunRefusesAPairWithoutItsMeans: a run with a feature on is one of a
// pair, and is given what shows the feature at work; without it, it is
// refused before anything is sent.
func TestRunRefusesAPairWithoutItsMeans(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		o    runOptions
		want string
	}{
		"with, no pair":                      {runOptions{pairOf: "tracing", with: true, traces: "http://127.0.0.1:1"}, "need -pair"},
		"an unknown feature":                 {runOptions{pair: 1, pairOf: "cache"}, `-pair-of "cache"`},
		"an endpoint's -with":                {runOptions{pair: 1, pairOf: "endpoint", with: true}, "is -delivery"},
		"sweep, no Stripe API":               {runOptions{pair: 1, pairOf: "sweep", with: true}, "needs -stripe-api"},
		"tracing, no receiver":               {runOptions{pair: 1, pairOf: "tracing", with: true}, "needs -traces"},
		"a peer's endpoint pair, of paygate": {runOptions{pair: 1, pairOf: pairLimitEndpoint, with: true}, "of a -peer contract"},
		"a peer in another pair":             {runOptions{pair: 1, pairOf: "tracing", peer: peerContract, grouped: true}, "of a -peer contract"},
		"a sync peer's endpoint pair":        {runOptions{pair: 1, pairOf: pairLimitEndpoint, peer: peerSync}, "of a -peer contract"},
	} {
		c.o.url = "http://127.0.0.1:1/webhooks/stripe"
		_, err := run(t.Context(), c.o)
		require.ErrorContains(t, err, c.want, name)
	}
}
