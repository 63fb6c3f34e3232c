// Command loadgen drives a running paygate with realistic, signed Stripe
// webhooks and prints one table of what it measured; `make bench` runs it
// (scripts/bench.sh) after a pgbench baseline in the same run.
//
// The events come from the Stripe simulator (internal/stripesim), signed
// exactly as Stripe signs them: for distinct payments, charge.succeeded and
// payment_intent.succeeded, and for a share of them a refund (refund.created,
// charge.refunded, refund.updated, charge.refund.updated), shuffled, with a
// share sent twice as Stripe's at-least-once delivery does. Every event is
// signed before its phase starts, so the timed loops only send.
//
// Two phases:
//
//  1. throughput: -concurrency senders over keep-alive connections send the
//     events as fast as paygate answers (a closed loop). Ingest events/s is
//     requests answered per second; end-to-end events/s is distinct events
//     per second from the first send until no inbox row is left `received`
//     (every event applied to the ledger, or ignored, or poison), read from
//     the database.
//  2. latency: -rate events per second offered on a fixed schedule for
//     -rate-duration (an open loop: each request's latency counts from when
//     it was due, so a stall is not hidden by sending less).
//
// It is a benchmark tool, never part of paygate itself.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/internal/stripesim"
)

type options struct {
	url          string
	secret       string
	databaseURL  string
	payments     int
	warmup       int
	refundShare  float64
	dupShare     float64
	concurrency  int
	rate         int
	rateDuration time.Duration
	settle       time.Duration
	pgbenchTPS   string
	save         string
	load         string
	pid          int
	seed         uint64
	profileOut   string
	profileToken string
	profileSecs  int
	header       string
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "http://127.0.0.1:8080/webhooks/stripe", "paygate's Stripe webhook endpoint")
	flag.StringVar(&o.secret, "secret", stripesim.DefaultWebhookSecret, "webhook signing secret (one of PAYGATE_STRIPE_WEBHOOK_SECRETS)")
	flag.StringVar(&o.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "paygate's database, to wait for every event to be applied")
	flag.IntVar(&o.payments, "payments", 15000, "distinct payments in the throughput phase (2 events each, plus refunds)")
	flag.IntVar(&o.warmup, "warmup", 2000, "payments applied and analyzed before measuring (needs -database-url)")
	flag.Float64Var(&o.refundShare, "refunds", 0.1, "share of payments refunded (4 more events each)")
	flag.Float64Var(&o.dupShare, "dups", 0.02, "share of events delivered twice")
	flag.IntVar(&o.concurrency, "concurrency", 128, "concurrent senders in the throughput phase")
	flag.IntVar(&o.rate, "rate", 1000, "events per second offered in the latency phase (0 skips it)")
	flag.DurationVar(&o.rateDuration, "rate-duration", 10*time.Second, "length of the latency phase")
	flag.DurationVar(&o.settle, "settle-timeout", 3*time.Minute, "longest wait for every event to be applied")
	flag.StringVar(&o.pgbenchTPS, "pgbench-tps", "", "the pgbench baselines of this run, comma-separated (before,after): the ratios use their mean")
	flag.StringVar(&o.save, "save", "", "write the measurements to this JSON file instead of printing the table")
	flag.StringVar(&o.load, "report", "", "print the table of measurements saved with -save (and -pgbench-tps)")
	flag.IntVar(&o.pid, "pid", 0, "paygate's process id, for its peak RSS")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the simulated account and the shuffles")
	flag.StringVar(&o.profileOut, "cpuprofile", "", "save paygate's CPU profile of the throughput phase here (needs -ops-token)")
	flag.StringVar(&o.profileToken, "ops-token", "", "an ops bearer token, for /debug/pprof/")
	flag.IntVar(&o.profileSecs, "cpuprofile-seconds", 20, "length of the CPU profile")
	flag.StringVar(&o.header, "title", "", "a line printed above the table")
	flag.Parse()
	if err := main1(o); err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: %v\n", err)
		os.Exit(1)
	}
}

func main1(o options) error {
	var m measurements
	if o.load != "" {
		b, err := os.ReadFile(o.load)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("read %s: %w", o.load, err)
		}
	} else {
		var err error
		if m, err = run(context.Background(), o); err != nil {
			return err
		}
	}
	if o.save != "" {
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(o.save, b, 0o644)
	}
	var baselines []float64
	for _, v := range strings.Split(o.pgbenchTPS, ",") {
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f > 0 {
			baselines = append(baselines, f)
		}
	}
	report(os.Stdout, m, baselines)
	if m.Non2xx > 0 {
		return fmt.Errorf("%d requests were not answered 2xx (first: %s)", m.Non2xx, m.FirstBad)
	}
	return nil
}

// measurements are what one run measured, in the units the table shows.
type measurements struct {
	Title          string  `json:"title"`
	Concurrency    int     `json:"concurrency"`
	Requests       int     `json:"requests"`
	IngestSeconds  float64 `json:"ingest_seconds"`
	P50, P95, P99  float64 // ms, throughput phase
	Events         int     `json:"events"`
	SettledSeconds float64 `json:"settled_seconds"` // 0: not measured
	Rate           int     `json:"rate"`
	RateRequests   int     `json:"rate_requests"`
	RateP50        float64 `json:"rate_p50_ms"`
	RateP95        float64 `json:"rate_p95_ms"`
	RateP99        float64 `json:"rate_p99_ms"`
	Non2xx         int     `json:"non_2xx"` // both phases, transport errors included
	FirstBad       string  `json:"first_bad,omitempty"`
	Poison         int     `json:"poison"`
	PeakRSS        int64   `json:"peak_rss_bytes"`
	Batches        float64 `json:"batches"`
	BatchEvents    float64 `json:"batch_events"`
	BatchSeconds   float64 `json:"batch_seconds"`
	Applies        float64 `json:"apply_batches"`
	ApplyEvents    float64 `json:"apply_batch_events"`
	ApplySeconds   float64 `json:"apply_batch_seconds"`
}

// delivery is one pre-signed request.
type delivery struct {
	id      string
	payload []byte
	request []byte // the whole HTTP/1.1 request, signed, as sent
}

type phaseResult struct {
	sent      int
	non2xx    int
	errors    int
	elapsed   time.Duration
	latencies []time.Duration
	firstBad  string
}

func run(ctx context.Context, o options) (measurements, error) {
	m := measurements{Title: o.header, Concurrency: o.concurrency, Rate: o.rate}
	client := &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
	target, err := url.Parse(o.url)
	if err != nil || target.Host == "" {
		return m, fmt.Errorf("-url %q: not an http URL", o.url)
	}
	snd := newSender(target)
	defer snd.close()
	sim := stripesim.New(stripesim.Config{Seed: int64(o.seed), WebhookSecret: o.secret})
	rng := mrand.New(mrand.NewPCG(o.seed, 0xbe5c4))

	var db *pgx.Conn
	if o.databaseURL != "" {
		var err error
		if db, err = pgx.Connect(ctx, o.databaseURL); err != nil {
			return m, fmt.Errorf("connect to the database: %w", err)
		}
		defer db.Close(ctx)
	}

	// Warm-up: a gateway in service has history, and PostgreSQL has
	// statistics of it. On empty tables the plans cached for the ledger's
	// commit-time checks and River's queries are sequential scans, until
	// autovacuum's first ANALYZE a minute or more later.
	if db != nil && o.warmup > 0 {
		warm := generate(sim, rng, o.warmup, o.refundShare)
		fmt.Fprintf(os.Stderr, "loadgen: warm-up: %d events\n", len(warm))
		res := closedLoop(snd, sign(warm, o.secret, target), o.concurrency)
		if res.non2xx+res.errors > 0 {
			return m, fmt.Errorf("warm-up: %d requests not answered 2xx (first: %s)", res.non2xx+res.errors, res.firstBad)
		}
		if _, _, err := settle(ctx, db, time.Now(), len(warm), o.settle); err != nil {
			return m, fmt.Errorf("warm-up: %w", err)
		}
		if _, err := db.Exec(ctx, "ANALYZE"); err != nil {
			return m, fmt.Errorf("warm-up: analyze: %w", err)
		}
	}
	stored := 0
	if db != nil {
		if err := db.QueryRow(ctx, `SELECT count(*) FROM inbox_events`).Scan(&stored); err != nil {
			return m, fmt.Errorf("count the inbox: %w", err)
		}
	}

	// Throughput.
	events := generate(sim, rng, o.payments, o.refundShare)
	sends := withCopies(events, rng, o.dupShare)
	fmt.Fprintf(os.Stderr, "loadgen: throughput phase: %d payments, %d events, %d requests, %d senders\n",
		o.payments, len(events), len(sends), o.concurrency)
	var profiled sync.WaitGroup
	if o.profileOut != "" {
		profiled.Add(1)
		go func() {
			defer profiled.Done()
			profile(client, o)
		}()
	}
	defer profiled.Wait()
	before := scrape(client, o.url)
	start := time.Now()
	tp := closedLoop(snd, sign(sends, o.secret, target), o.concurrency)
	ingested := scrape(client, o.url)
	var settled time.Duration
	var poison int
	if db != nil {
		var err error
		if settled, poison, err = settle(ctx, db, start, stored+len(events), o.settle); err != nil {
			return m, err
		}
	}
	applied := scrape(client, o.url)
	batches := ingested.stats("paygate_ingest_batch").minus(before.stats("paygate_ingest_batch"))
	applies := applied.stats("paygate_apply_batch").minus(before.stats("paygate_apply_batch"))

	// Latency at an offered rate, on an idle system: fresh payments.
	var lat phaseResult
	if o.rate > 0 {
		n := int(float64(o.rate) * o.rateDuration.Seconds())
		extra := generate(sim, rng, n/2, o.refundShare)
		if len(extra) > n {
			extra = extra[:n]
		}
		fmt.Fprintf(os.Stderr, "loadgen: latency phase: %d events at %d/s\n", len(extra), o.rate)
		lat = openLoop(snd, sign(extra, o.secret, target), o.rate)
		if db != nil {
			if _, p, err := settle(ctx, db, time.Now(), stored+len(events)+len(extra), o.settle); err != nil {
				return m, err
			} else {
				poison = p
			}
		}
	}
	m.Requests, m.IngestSeconds = tp.sent, tp.elapsed.Seconds()
	m.P50, m.P95, m.P99 = ms(tp.percentile(.50)), ms(tp.percentile(.95)), ms(tp.percentile(.99))
	m.Events, m.SettledSeconds = len(events), settled.Seconds()
	m.RateRequests = lat.sent
	m.RateP50, m.RateP95, m.RateP99 = ms(lat.percentile(.50)), ms(lat.percentile(.95)), ms(lat.percentile(.99))
	m.Non2xx = tp.non2xx + tp.errors + lat.non2xx + lat.errors
	m.FirstBad = cmpOr(tp.firstBad, lat.firstBad)
	m.Poison, m.PeakRSS = poison, peakRSS(o.pid)
	m.Batches, m.BatchEvents, m.BatchSeconds = batches.count, batches.events, batches.seconds
	m.Applies, m.ApplyEvents, m.ApplySeconds = applies.count, applies.events, applies.seconds
	return m, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// generate scripts payments on the simulator and returns their events,
// shuffled: Stripe promises no order, and interleaving spreads the
// payments' locks.
func generate(sim *stripesim.Sim, rng *mrand.Rand, payments int, refundShare float64) []delivery {
	before := len(sim.Events())
	currencies := []string{"usd", "usd", "usd", "eur", "gbp", "jpy"}
	for i := range payments {
		p := sim.Pay(stripesim.PayOpts{
			Amount:   int64(500 + rng.IntN(50000)),
			Currency: currencies[rng.IntN(len(currencies))],
			Email:    fmt.Sprintf("customer%d@example.com", i),
		})
		if rng.Float64() < refundShare {
			sim.Refund(p, 0)
		}
	}
	all := sim.Events()[before:]
	out := make([]delivery, len(all))
	for i, e := range all {
		out[i] = delivery{id: e.ID, payload: e.Payload}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// withCopies sends a share of the events a second time, up to a few
// thousand deliveries after the first, as a provider's retry would: most
// copies find their original committed, some race it in flight.
func withCopies(events []delivery, rng *mrand.Rand, share float64) []delivery {
	type later struct {
		at int
		d  delivery
	}
	out := make([]delivery, 0, len(events)+int(float64(len(events))*share)+1)
	var pending []later
	for i, e := range events {
		out = append(out, e)
		if rng.Float64() < share {
			pending = append(pending, later{at: i + 1 + rng.IntN(4000), d: e})
		}
		kept := pending[:0]
		for _, p := range pending {
			if p.at <= i {
				out = append(out, p.d)
			} else {
				kept = append(kept, p)
			}
		}
		pending = kept
	}
	for _, p := range pending {
		out = append(out, p.d)
	}
	return out
}

// sign signs every delivery now, with Stripe's scheme, and serializes its
// request.
func sign(ds []delivery, secret string, target *url.URL) []delivery {
	now := time.Now()
	out := make([]delivery, len(ds))
	for i, d := range ds {
		sig := stripesim.SignedRequest(d.payload, secret, now)
		var b bytes.Buffer
		fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nUser-Agent: Stripe/1.0 (+https://stripe.com/docs/webhooks)\r\n%s: %s\r\nContent-Length: %d\r\n\r\n",
			target.RequestURI(), target.Host, stripesim.SignatureHeader, sig, len(d.payload))
		b.Write(d.payload)
		d.request = b.Bytes()
		out[i] = d
	}
	return out
}

// sender posts serialized HTTP/1.1 requests over keep-alive connections it
// pools, one request at a time on each. net/http's client costs about as
// much CPU per request as paygate spends answering it (two goroutines and
// their hand-offs per connection); on a machine shared with the server,
// that cost would be measured as paygate's.
type sender struct {
	addr string
	idle chan *rawConn
}

type rawConn struct {
	conn net.Conn
	br   *bufio.Reader
}

func newSender(target *url.URL) *sender {
	return &sender{addr: target.Host, idle: make(chan *rawConn, 4096)}
}

// post sends one request and returns the answer's status code.
func (s *sender) post(d delivery) (int, error) {
	var rc *rawConn
	select {
	case rc = <-s.idle:
	default:
		c, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		if err != nil {
			return 0, err
		}
		rc = &rawConn{conn: c, br: bufio.NewReaderSize(c, 4096)}
	}
	_ = rc.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := rc.conn.Write(d.request); err != nil {
		rc.conn.Close()
		return 0, err
	}
	resp, err := http.ReadResponse(rc.br, nil)
	if err != nil {
		rc.conn.Close()
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		rc.conn.Close()
		return resp.StatusCode, nil
	}
	select {
	case s.idle <- rc:
	default:
		rc.conn.Close()
	}
	return resp.StatusCode, nil
}

func (s *sender) close() {
	for {
		select {
		case rc := <-s.idle:
			rc.conn.Close()
		default:
			return
		}
	}
}

// closedLoop sends every delivery with n senders, each sending its next as
// soon as its last is answered.
func closedLoop(s *sender, ds []delivery, n int) phaseResult {
	var (
		next atomic.Int64
		mu   sync.Mutex
		res  phaseResult
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var own phaseResult
			own.latencies = make([]time.Duration, 0, len(ds)/n+1)
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ds) {
					break
				}
				t := time.Now()
				code, err := s.post(ds[i])
				own.record(time.Since(t), code, err)
			}
			mu.Lock()
			res.merge(own)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// openLoop offers rate deliveries per second on a fixed schedule, each on
// its own goroutine, whatever the answers' speed.
func openLoop(s *sender, ds []delivery, rate int) phaseResult {
	var (
		mu  sync.Mutex
		res phaseResult
		wg  sync.WaitGroup
	)
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i, d := range ds {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, err := s.post(d)
			lat := time.Since(due)
			mu.Lock()
			res.record(lat, code, err)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

func (r *phaseResult) record(lat time.Duration, code int, err error) {
	r.sent++
	r.latencies = append(r.latencies, lat)
	switch {
	case err != nil:
		r.errors++
		if r.firstBad == "" {
			r.firstBad = err.Error()
		}
	case code < 200 || code > 299:
		r.non2xx++
		if r.firstBad == "" {
			r.firstBad = "HTTP " + strconv.Itoa(code)
		}
	}
}

func (r *phaseResult) merge(o phaseResult) {
	r.sent += o.sent
	r.non2xx += o.non2xx
	r.errors += o.errors
	r.latencies = append(r.latencies, o.latencies...)
	if r.firstBad == "" {
		r.firstBad = o.firstBad
	}
}

func (r phaseResult) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	s := slices.Clone(r.latencies)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(len(s)-1, i))]
}

// settle waits until no inbox row is left `received` (every answered
// event is stored: a 2xx means committed), checks that the inbox holds all
// events, and returns how long that took from start. The poll uses the
// status index, so it costs the database next to nothing.
func settle(ctx context.Context, db *pgx.Conn, start time.Time, events int, timeout time.Duration) (time.Duration, int, error) {
	deadline := time.Now().Add(timeout)
	for {
		var pending bool
		err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbox_events WHERE status = 'received')`).Scan(&pending)
		if err != nil {
			return 0, 0, fmt.Errorf("poll the inbox: %w", err)
		}
		if !pending {
			took := time.Since(start)
			var total, poison int
			if err := db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'poison') FROM inbox_events`).Scan(&total, &poison); err != nil {
				return 0, 0, fmt.Errorf("count the inbox: %w", err)
			}
			if total < events {
				return 0, 0, fmt.Errorf("the inbox holds %d events, %d were sent and answered 2xx", total, events)
			}
			return took, poison, nil
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("events still received after %s", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// peakRSS reads the process's high-water resident set (VmHWM) in bytes.
func peakRSS(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// profile saves paygate's CPU profile of the throughput phase.
func profile(client *http.Client, o options) {
	u := strings.Replace(o.url, "/webhooks/stripe", "", 1) + "/debug/pprof/profile?seconds=" + strconv.Itoa(o.profileSecs)
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Authorization", "Bearer "+o.profileToken)
	c := *client
	c.Timeout = time.Duration(o.profileSecs+10) * time.Second
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: cpu profile: %v\n", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "loadgen: cpu profile: HTTP %d\n", resp.StatusCode)
		return
	}
	f, err := os.Create(o.profileOut)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen: cpu profile: %v\n", err)
		return
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
	fmt.Fprintf(os.Stderr, "loadgen: cpu profile saved to %s\n", o.profileOut)
}

// batchStats are one of paygate's batching metrics (ingest group commit,
// or applying events): transactions, events in them, and time spent.
type batchStats struct{ count, events, seconds float64 }

func (a batchStats) minus(b batchStats) batchStats {
	return batchStats{count: a.count - b.count, events: a.events - b.events, seconds: a.seconds - b.seconds}
}

// metrics are the samples of paygate's /metrics, by name.
type metrics map[string]float64

// stats reads the batch histograms <prefix>_events and <prefix>_seconds.
func (m metrics) stats(prefix string) batchStats {
	return batchStats{count: m[prefix+"_events_count"], events: m[prefix+"_events_sum"], seconds: m[prefix+"_seconds_sum"]}
}

// scrape reads paygate's /metrics; empty when it cannot.
func scrape(client *http.Client, url string) metrics {
	m := metrics{}
	resp, err := client.Get(strings.Replace(url, "/webhooks/stripe", "", 1) + "/metrics")
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			m[name] = v
		}
	}
	return m
}

func report(out io.Writer, m measurements, baselines []float64) {
	var pgbench float64
	var shown []string
	for _, b := range baselines {
		pgbench += b / float64(len(baselines))
		shown = append(shown, strconv.FormatFloat(b, 'f', 0, 64))
	}
	ingest := float64(m.Requests) / m.IngestSeconds
	var e2e float64
	if m.SettledSeconds > 0 {
		e2e = float64(m.Events) / m.SettledSeconds
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	ratio := func(v float64) (string, float64) {
		if pgbench <= 0 {
			return "n/a", 0
		}
		r := v / pgbench
		return strconv.FormatFloat(r, 'f', 2, 64) + "×", r
	}
	if m.Title != "" {
		fmt.Fprintln(out, m.Title)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "metric\tvalue\ttarget\t")
	fmt.Fprintln(w, "------\t-----\t------\t")
	if len(baselines) > 1 {
		fmt.Fprintf(w, "pgbench tps, naive txn, 32 clients (%s; mean)\t%.0f\t\t\n", strings.Join(shown, " before, ")+" after", pgbench)
	} else {
		fmt.Fprintf(w, "pgbench tps, naive txn, 32 clients\t%.0f\t\t\n", pgbench)
	}
	fmt.Fprintf(w, "ingest events/s (%d requests, %d senders)\t%.0f\t\t\n", m.Requests, m.Concurrency, ingest)
	r, rv := ratio(ingest)
	fmt.Fprintf(w, "ingest / pgbench\t%s\t≥ 2.5× %s\t\n", r, verdict(rv >= 2.5))
	fmt.Fprintf(w, "ingest latency p50 / p95 / p99 (ms)\t%.1f / %.1f / %.1f\t\t\n", m.P50, m.P95, m.P99)
	if m.Batches > 0 {
		fmt.Fprintf(w, "ingest transactions: count, mean events, mean commit (ms)\t%.0f, %.1f, %.1f\t\t\n",
			m.Batches, m.BatchEvents/m.Batches, 1000*m.BatchSeconds/m.Batches)
	}
	if m.Applies > 0 {
		fmt.Fprintf(w, "apply transactions: count, mean events, mean time (ms)\t%.0f, %.1f, %.1f\t\t\n",
			m.Applies, m.ApplyEvents/m.Applies, 1000*m.ApplySeconds/m.Applies)
	}
	if e2e > 0 {
		fmt.Fprintf(w, "end-to-end events/s (%d events applied in %.1fs)\t%.0f\t\t\n", m.Events, m.SettledSeconds, e2e)
		r, rv = ratio(e2e)
		fmt.Fprintf(w, "end-to-end / pgbench\t%s\t≥ 1.0× %s\t\n", r, verdict(rv >= 1.0))
	}
	if m.RateRequests > 0 {
		fmt.Fprintf(w, "latency at %d events/s offered, p50 / p95 / p99 (ms)\t%.1f / %.1f / %.1f\t\t\n", m.Rate, m.RateP50, m.RateP95, m.RateP99)
		fmt.Fprintf(w, "p99 at %d events/s offered (ms)\t%.1f\t≤ 50 ms %s\t\n", m.Rate, m.RateP99, verdict(m.RateP99 <= 50))
	}
	if m.PeakRSS > 0 {
		fmt.Fprintf(w, "peak RSS of paygate (VmHWM, MiB)\t%.0f\t≤ 200 MiB %s\t\n", float64(m.PeakRSS)/(1<<20), verdict(m.PeakRSS <= 200<<20))
	}
	fmt.Fprintf(w, "non-2xx answers (incl. transport errors)\t%d\t0 %s\t\n", m.Non2xx, verdict(m.Non2xx == 0))
	fmt.Fprintf(w, "poison events (sanity: expected 0)\t%d\t\t\n", m.Poison)
	w.Flush()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
