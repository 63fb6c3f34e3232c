package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/reliability"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
)

// These tests hold invariant 11 against the real binary: a crash between
// commit and delivery, a crash between the endpoint's 2xx and its record,
// two instances on one database, and bad endpoints beside a good one all
// leave a consumer that dedupes on webhook-id applying each change once,
// in order, without slowing ingest or the good endpoint.

const downstreamConsumerToken = "downstream-consumer-token-value"

// downstreamBundle is one database, the binary, Stripe's simulator whose
// events go to the gateways, and the settings every gateway gets.
type downstreamBundle struct {
	t    *testing.T
	pool *pgxpool.Pool
	db   string
	bin  string
	env  []string
	sim  *stripesim.Sim
	sent int // sim's events already sent
}

func downstreamSetup(t *testing.T, env ...string) *downstreamBundle {
	t.Helper()
	pool, dbURL := testdb.NewWithURL(t)
	bin, err := reliability.Binary(t.Context())
	require.NoError(t, err)
	return &downstreamBundle{
		t: t, pool: pool, db: dbURL, bin: bin,
		env: append([]string{
			"PAYGATE_DELIVERY_ALLOW_PRIVATE=true",
			"PAYGATE_CONSUMER_TOKENS=" + downstreamConsumerToken,
		}, env...),
		sim: stripesim.New(stripesim.Config{WebhookSecret: reliability.WebhookSecret}),
	}
}

// gateway starts a `paygate serve` on a free address; it is killed at the
// end of the test (a SIGTERM would wait on hanging deliveries).
func (b *downstreamBundle) gateway() *reliability.Gateway {
	b.t.Helper()
	g, err := reliability.NewGateway(reliability.GatewayConfig{Binary: b.bin, DatabaseURL: b.db, Env: b.env})
	require.NoError(b.t, err)
	require.NoError(b.t, g.Start(context.Background()))
	b.t.Cleanup(func() {
		_ = g.Resume()
		_ = g.Kill()
	})
	return g
}

// pay makes n payments of the simulator, partially refunding every
// refundEvery-th twice (two more changes each), and returns their ids.
func (b *downstreamBundle) pay(n, refundEvery int) []string {
	ids := make([]string, 0, n)
	for i := range n {
		p := b.sim.Pay(stripesim.PayOpts{Amount: int64(1000 + 100*i), Currency: "usd"})
		if refundEvery > 0 && i%refundEvery == 0 {
			b.sim.Refund(p, 100)
			b.sim.Refund(p, 200)
		}
		ids = append(ids, p.ID)
	}
	return ids
}

// send delivers the simulator's new events to the gateways, in turns, as
// opts says (copies, shuffling, concurrency), and returns how long sending
// took.
func (b *downstreamBundle) send(opts *stripesim.DeliverOpts, gs ...*reliability.Gateway) time.Duration {
	b.t.Helper()
	events := b.sim.Events()[b.sent:]
	b.sent += len(events)
	parts := make([][]stripesim.Event, len(gs))
	for i, e := range events {
		parts[i%len(gs)] = append(parts[i%len(gs)], e)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(gs))
	for i, g := range gs {
		wg.Go(func() { _, errs[i] = b.sim.Deliver(context.Background(), g.WebhookURL(), parts[i], opts) })
	}
	wg.Wait()
	took := time.Since(start)
	require.NoError(b.t, errors.Join(errs...))
	return took
}

// awaitProcessed waits until every event sent is applied.
func (b *downstreamBundle) awaitProcessed(g *reliability.Gateway) {
	b.t.Helper()
	var stats struct {
		Events map[string]int `json:"events"`
	}
	waitUntil(b.t, "every event applied", 60*time.Second, func() bool {
		return getJSON(b.t, g.URL()+"/v1/ops/stats", reliability.OpsToken, &stats) == http.StatusOK &&
			stats.Events["processed"] == len(b.sim.Events())
	})
}

// feedMessage is one message of the feed, with its exact bytes.
type feedMessage struct {
	ID        string
	Sequence  int64
	PaymentID string
	CreatedAt time.Time
	Raw       []byte
}

func parseMessage(raw []byte) (feedMessage, error) {
	var m struct {
		ID        string    `json:"id"`
		Sequence  int64     `json:"sequence"`
		CreatedAt time.Time `json:"created_at"`
		Data      struct {
			Payment struct {
				ID string `json:"id"`
			} `json:"payment"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return feedMessage{}, err
	}
	return feedMessage{ID: m.ID, Sequence: m.Sequence, PaymentID: m.Data.Payment.ID, CreatedAt: m.CreatedAt,
		Raw: bytes.Clone(raw)}, nil
}

// feed reads the whole feed with the consumer token, once it holds every
// message written (a message is placed in the feed shortly after its
// commit), and checks that no two changes share an id.
func (b *downstreamBundle) feed(g *reliability.Gateway) []feedMessage {
	b.t.Helper()
	var (
		out     []feedMessage
		written int
	)
	waitUntil(b.t, "every message written in the feed", 30*time.Second, func() bool {
		require.NoError(b.t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM messages`).Scan(&written))
		out = b.readFeed(g)
		return len(out) == written
	})
	require.NotEmpty(b.t, out)
	seen := map[string]feedMessage{}
	for _, m := range out {
		prev, dup := seen[m.ID]
		if dup {
			b.dump(m.PaymentID)
		}
		require.False(b.t, dup, "two changes under one message id:\n%s\n%s", prev.Raw, m.Raw)
		seen[m.ID] = m
	}
	return out
}

func (b *downstreamBundle) readFeed(g *reliability.Gateway) []feedMessage {
	b.t.Helper()
	var out []feedMessage
	after := ""
	for {
		var page struct {
			Messages   []json.RawMessage `json:"messages"`
			NextCursor string            `json:"next_cursor"`
		}
		require.Equal(b.t, http.StatusOK, getJSON(b.t, g.URL()+"/v1/feed?limit=1000&after="+after, downstreamConsumerToken, &page))
		if len(page.Messages) == 0 {
			return out
		}
		for _, raw := range page.Messages {
			m, err := parseMessage(raw)
			require.NoError(b.t, err)
			out = append(out, m)
		}
		after = page.NextCursor
	}
}

// dump logs a payment's messages, history and row, to explain a failure.
func (b *downstreamBundle) dump(paymentID string) {
	for _, q := range []string{
		`SELECT id || ' seq ' || sequence || ' ' || type || ' at ' || created_at::text || ' n ' || n FROM messages WHERE aggregate_id = $1 ORDER BY n`,
		`SELECT coalesce(from_status, '-') || ' -> ' || to_status || ' by ' || event_id || ' at ' || at::text FROM payment_history WHERE payment_id = $1 ORDER BY id`,
		`SELECT status || ' seq ' || message_sequence || ' updated ' || updated_at::text FROM payments WHERE id = $1`,
	} {
		rows, err := b.pool.Query(context.Background(), q, paymentID)
		require.NoError(b.t, err)
		for rows.Next() {
			var s string
			require.NoError(b.t, rows.Scan(&s))
			b.t.Log(s)
		}
		rows.Close()
	}
}

// opsCall sends an ops request with a JSON body, requires the status want,
// and returns the answer's body.
func (b *downstreamBundle) opsCall(g *reliability.Gateway, method, path, body string, want int) []byte {
	b.t.Helper()
	req, err := http.NewRequest(method, g.URL()+path, strings.NewReader(body))
	require.NoError(b.t, err)
	req.Header.Set("Authorization", "Bearer "+reliability.OpsToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", rand.Text())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	require.Equal(b.t, want, resp.StatusCode, string(raw))
	return raw
}

// setStatus enables or disables an endpoint through the API.
func (b *downstreamBundle) setStatus(g *reliability.Gateway, id, status string) {
	b.t.Helper()
	b.opsCall(g, http.MethodPatch, "/v1/endpoints/"+id, fmt.Sprintf(`{"status":%q}`, status), http.StatusOK)
}

// register adds an endpoint for every type at c's URL and gives c its
// secret; it returns the endpoint's id.
func (b *downstreamBundle) register(g *reliability.Gateway, c *consumer) string {
	b.t.Helper()
	raw := b.opsCall(g, http.MethodPost, "/v1/endpoints",
		fmt.Sprintf(`{"url":%q,"event_types":["*"],"description":"downstream test"}`, c.URL()), http.StatusCreated)
	var ep struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	require.NoError(b.t, json.Unmarshal(raw, &ep))
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(ep.Secret, "whsec_"))
	require.NoError(b.t, err)
	c.mu.Lock()
	c.secret = key
	c.mu.Unlock()
	return ep.ID
}

// deliveryRow is what paygate recorded of one delivery.
type deliveryRow struct {
	Status   string
	Attempts int
	Recorded int // attempts recorded, as the API lists them (delivery.Attempts)
}

func (b *downstreamBundle) deliveries(endpointID string) map[string]deliveryRow {
	b.t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT d.message_id, d.status, d.attempts FROM delivery_queue d WHERE d.endpoint_id = $1`, endpointID)
	require.NoError(b.t, err)
	defer rows.Close()
	out := map[string]deliveryRow{}
	for rows.Next() {
		var (
			id string
			d  deliveryRow
		)
		require.NoError(b.t, rows.Scan(&id, &d.Status, &d.Attempts))
		out[id] = d
	}
	require.NoError(b.t, rows.Err())
	for id, d := range out {
		attempts, err := delivery.Attempts(context.Background(), b.pool, endpointID, id)
		require.NoError(b.t, err)
		d.Recorded = len(attempts)
		out[id] = d
	}
	return out
}

// consumer is a merchant's webhook endpoint: it verifies each request the
// Standard Webhooks way (independently of paygate's signer), answers what
// answer says, and applies a message at its first 2xx answer, deduplicating
// on webhook-id, as a consumer is told to.
type consumer struct {
	t    *testing.T
	addr string
	stop chan struct{}

	mu     sync.Mutex
	secret []byte
	// answer is the status for the attempt-th request of a message (from
	// 1); 0 holds the request until paygate gives up on it. Default 200.
	answer func(id string, attempt int) int
	// respond writes the answer; a test acts around it. Default
	// w.WriteHeader(status).
	respond  func(w http.ResponseWriter, id string, status int)
	requests map[string]int    // per webhook-id
	bodies   map[string][]byte // the first body of each webhook-id
	inflight map[string]int
	overlaps []string // webhook-ids sent again while a request of theirs was open
	problems []string
	total    int
	arrivals []time.Time          // of every verified request
	applied  map[string]time.Time // webhook-id → when applied
	order    map[string][]int64   // payment → sequences applied, in order
}

// newConsumer reserves an address; start listens on it. Until then a
// delivery's connection is refused.
func newConsumer(t *testing.T) *consumer {
	return &consumer{
		t: t, addr: freeport.Addr(t), stop: make(chan struct{}),
		requests: map[string]int{}, bodies: map[string][]byte{}, inflight: map[string]int{},
		applied: map[string]time.Time{}, order: map[string][]int64{},
	}
}

func (c *consumer) URL() string { return "http://" + c.addr + "/hooks" }

func (c *consumer) start() {
	c.t.Helper()
	ln, err := net.Listen("tcp", c.addr)
	require.NoError(c.t, err)
	srv := httptest.NewUnstartedServer(c)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	c.t.Cleanup(func() {
		close(c.stop)
		srv.Close()
	})
}

func (c *consumer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	at := time.Now()
	id := r.Header.Get("webhook-id")
	c.mu.Lock()
	if err == nil {
		err = verifyStandardWebhook(c.secret, r.Header, body, at)
	}
	msg, perr := parseMessage(body)
	switch {
	case err != nil:
	case perr != nil:
		err = perr
	case msg.ID != id:
		err = fmt.Errorf("body id %s under webhook-id %s", msg.ID, id)
	case c.bodies[id] != nil && !bytes.Equal(c.bodies[id], body):
		err = fmt.Errorf("webhook-id %s came with another body", id)
	}
	if err != nil {
		c.problems = append(c.problems, err.Error())
		c.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	c.total++
	c.arrivals = append(c.arrivals, at)
	c.requests[id]++
	attempt := c.requests[id]
	c.bodies[id] = body
	c.inflight[id]++
	if c.inflight[id] > 1 {
		c.overlaps = append(c.overlaps, id)
	}
	answer, respond := c.answer, c.respond
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.inflight[id]--
		c.mu.Unlock()
	}()

	status := http.StatusOK
	if answer != nil {
		status = answer(id, attempt)
	}
	if status == 0 {
		select {
		case <-r.Context().Done():
		case <-c.stop:
		}
		return
	}
	if status >= 200 && status < 300 {
		c.mu.Lock()
		if _, dup := c.applied[id]; !dup {
			c.applied[id] = at
			c.order[msg.PaymentID] = append(c.order[msg.PaymentID], msg.Sequence)
		}
		c.mu.Unlock()
	}
	if respond != nil {
		respond(w, id, status)
		return
	}
	w.WriteHeader(status)
}

// verifyStandardWebhook checks a request as the Standard Webhooks spec
// tells a receiver to: a v1 HMAC-SHA256 of "<id>.<timestamp>.<body>" under
// the secret, and a timestamp within five minutes.
func verifyStandardWebhook(key []byte, h http.Header, body []byte, now time.Time) error {
	if key == nil {
		return errors.New("a request before the endpoint was registered")
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || math.Abs(now.Sub(time.Unix(sec, 0)).Seconds()) > 300 {
		return fmt.Errorf("webhook-timestamp %q is not within 5 minutes", ts)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, s := range strings.Fields(h.Get("webhook-signature")) {
		if v, sig, ok := strings.Cut(s, ","); ok && v == "v1" && hmac.Equal([]byte(sig), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("webhook-id %s: no valid signature", id)
}

// hasApplied reports whether every message of want is applied.
func (c *consumer) hasApplied(want []feedMessage) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range want {
		if _, ok := c.applied[m.ID]; !ok {
			return false
		}
	}
	return true
}

func (c *consumer) awaitApplied(what string, d time.Duration, want []feedMessage) {
	c.t.Helper()
	waitUntil(c.t, what, d, func() bool { return c.hasApplied(want) })
}

// requireAppliedOnce: the consumer verified every request, applied exactly
// the messages of want, each payment's in sequence order from 1 without a
// gap, and every delivery of a message carried its feed bytes.
func (c *consumer) requireAppliedOnce(want []feedMessage) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(c.t, c.problems, "every request verified, under its message's id, with its message's bytes")
	ids := make([]string, 0, len(c.applied))
	for id := range c.applied {
		ids = append(ids, id)
	}
	wantIDs := make([]string, 0, len(want))
	perPayment := map[string]int64{}
	for _, m := range want {
		wantIDs = append(wantIDs, m.ID)
		perPayment[m.PaymentID]++
		require.Equal(c.t, string(m.Raw), string(c.bodies[m.ID]), "delivered as the feed has it, byte for byte")
	}
	slices.Sort(ids)
	slices.Sort(wantIDs)
	require.Equal(c.t, wantIDs, ids, "distinct webhook-ids applied are the messages")
	require.Len(c.t, c.order, len(perPayment))
	for p, n := range perPayment {
		seqs := make([]int64, n)
		for i := range seqs {
			seqs[i] = int64(i + 1)
		}
		require.Equal(c.t, seqs, c.order[p], "payment %s's changes applied once each, in order", p)
	}
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// schedule is a retry schedule of n waits of d.
func schedule(d string, n int) string {
	return "PAYGATE_DELIVERY_RETRY_SCHEDULE=" + strings.Repeat(d+",", n-1) + d
}

// TestDownstreamSIGKILLBeforeDelivery: changes committed while the
// endpoint is down; serve is SIGKILLed; the endpoint comes up and serve
// restarts. Every message arrives, under its own id each time, and a
// consumer deduping on it applies each once, every payment's in order.
func TestDownstreamSIGKILLBeforeDelivery(t *testing.T) {
	t.Parallel()
	b := downstreamSetup(t, "PAYGATE_DELIVERY_TIMEOUT=2s", schedule("1s", 90))
	g := b.gateway()
	c := newConsumer(t) // down: connections are refused
	endpoint := b.register(g, c)
	const payments = 8
	b.pay(payments, 2)
	b.send(&stripesim.DeliverOpts{Copies: 2, Shuffle: true, Concurrency: 4}, g)
	b.awaitProcessed(g)
	want := b.feed(g)
	waitUntil(t, "refused attempts at the endpoint while it is down", 30*time.Second, func() bool {
		ds, tried := b.deliveries(endpoint), 0
		for _, d := range ds {
			tried += d.Recorded
		}
		return len(ds) == len(want) && tried > 0
	})
	require.NoError(t, g.Kill())
	for id, d := range b.deliveries(endpoint) {
		require.Equal(t, "pending", d.Status, "%s: not delivered before the kill", id)
	}

	c.start()
	restarted := time.Now()
	require.NoError(t, g.Start(context.Background()))
	c.awaitApplied("every message after the restart", 120*time.Second, want)
	t.Logf("%d messages of %d payments delivered %s after the restart", len(want), payments, time.Since(restarted).Round(time.Millisecond))
	time.Sleep(time.Second) // a second delivery, were there one, would have come by now
	c.requireAppliedOnce(want)
	for id, d := range b.deliveries(endpoint) {
		require.Equal(t, "succeeded", d.Status, id)
		require.Equal(t, d.Attempts, d.Recorded, "%s: every attempt recorded", id)
	}
}

// TestDownstreamSIGKILLAfterThe2xx: the consumer applies a message and
// answers 200, and serve dies as the answer leaves (stopped before the
// answer is written, so it cannot record it; killed after). Restarted, it
// sends the message again under the same webhook-id, and the consumer
// applies it once.
func TestDownstreamSIGKILLAfterThe2xx(t *testing.T) {
	t.Parallel()
	b := downstreamSetup(t, "PAYGATE_DELIVERY_TIMEOUT=1s", schedule("500ms", 60))
	g := b.gateway()
	c := newConsumer(t)
	var (
		once    sync.Once
		crashed = make(chan string, 1)
	)
	c.respond = func(w http.ResponseWriter, id string, status int) {
		first := false
		once.Do(func() { first = true })
		if !first {
			w.WriteHeader(status)
			return
		}
		// SIGSTOP first: no thread of serve can read the 200 and commit
		// its record between the write and the SIGKILL.
		if err := g.Pause(); err != nil {
			t.Errorf("pause serve: %v", err)
		}
		w.WriteHeader(status)
		w.(http.Flusher).Flush()
		if err := g.Kill(); err != nil {
			t.Errorf("kill serve: %v", err)
		}
		crashed <- id
	}
	endpoint := b.register(g, c)
	b.pay(3, 1)
	b.send(&stripesim.DeliverOpts{Concurrency: 2}, g)
	b.awaitProcessed(g)
	want := b.feed(g)
	c.start() // only now: serve is not killed while it takes events
	var first string
	select {
	case first = <-crashed:
	case <-time.After(60 * time.Second):
		t.Fatal("no delivery came")
	}
	d := b.deliveries(endpoint)[first]
	require.Equal(t, "pending", d.Status, "the 2xx was never recorded: the scenario happened")
	require.Equal(t, d.Attempts, d.Recorded)

	restarted := time.Now()
	require.NoError(t, g.Start(context.Background()))
	waitUntil(t, "the message sent again", 150*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.requests[first] >= 2
	})
	c.mu.Lock()
	next := time.Now()
	for _, at := range c.arrivals {
		if at.After(restarted) && at.Before(next) {
			next = at
		}
	}
	t.Logf("after the restart: the first request %s later, the unrecorded message again %s later",
		next.Sub(restarted).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	c.mu.Unlock()
	c.awaitApplied("every message", 60*time.Second, want)
	time.Sleep(time.Second)
	c.requireAppliedOnce(want)
	for id, d := range b.deliveries(endpoint) {
		require.Equal(t, "succeeded", d.Status, id)
	}
}

// TestDownstreamTwoInstances: two serve processes on one database, their
// events and their dispatchers interleaved, and one endpoint that always
// answers 200: every message delivered exactly once, never two requests of
// one message at a time, and one recorded attempt per request.
func TestDownstreamTwoInstances(t *testing.T) {
	t.Parallel()
	b := downstreamSetup(t, "PAYGATE_DELIVERY_TIMEOUT=5s")
	g1, g2 := b.gateway(), b.gateway()
	c := newConsumer(t)
	c.answer = func(string, int) int {
		time.Sleep(time.Duration(mrand.IntN(10)) * time.Millisecond) // requests overlap
		return http.StatusOK
	}
	c.start()
	endpoint := b.register(g1, c)
	const payments = 40
	b.pay(payments, 4)
	b.send(&stripesim.DeliverOpts{Copies: 2, Shuffle: true, Concurrency: 4}, g1, g2)
	b.awaitProcessed(g2)
	want := b.feed(g1)
	c.awaitApplied("every message", 60*time.Second, want)
	time.Sleep(2 * time.Second) // a second delivery, were there one, would have come by now
	c.requireAppliedOnce(want)

	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.overlaps, "never two requests of one message at once")
	require.Equal(t, len(want), c.total, "one request per message")
	recorded := 0
	for id, d := range b.deliveries(endpoint) {
		require.Equal(t, deliveryRow{Status: "succeeded", Attempts: 1, Recorded: 1}, d, id)
		recorded += d.Recorded
	}
	require.Equal(t, c.total, recorded, "one recorded attempt per request")
	var clients int
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT count(DISTINCT attempted_by[array_upper(attempted_by, 1)]) FROM river_job WHERE kind = 'deliver_endpoint'`).Scan(&clients))
	t.Logf("%d messages of %d payments, each delivered once; dispatchers ran on %d of 2 instances", len(want), payments, clients)
}

// isolation is what one phase of TestDownstreamIsolation measured.
type isolation struct {
	rates     []float64 // events acknowledged per second, per burst
	latencies []time.Duration
}

func (m isolation) rate() float64 { return slices.Max(m.rates) }

func (m isolation) p50() time.Duration {
	l := slices.Clone(m.latencies)
	slices.Sort(l)
	return l[len(l)/2]
}

// measure sends five bursts of 200 events over 8 connections, timing how
// fast serve acknowledges them (a burst lasts a fraction of a second: the
// best of five is the one least disturbed by the machine's noise), waits
// until healthy has them all, then trickles 15 payments and takes the time
// from each of their messages' commit to its arrival at healthy.
//
// While the best rate is below floor it sends more bursts, up to twenty: in
// a full make test other packages' suites load the machine for tens of
// seconds at a time, and once held every burst of a phase at a fifth of the
// other's. Endpoints that held ingest up would hold every burst back.
func (b *downstreamBundle) measure(g *reliability.Gateway, healthy *consumer, floor float64) isolation {
	b.t.Helper()
	var m isolation
	for len(m.rates) < 5 || (m.rate() < floor && len(m.rates) < 20) {
		b.pay(100, 0)
		sent := b.sent
		took := b.send(&stripesim.DeliverOpts{Concurrency: 8}, g)
		m.rates = append(m.rates, float64(b.sent-sent)/took.Seconds())
		b.awaitProcessed(g)
	}
	healthy.awaitApplied("the bursts' messages", 60*time.Second, b.feed(g))
	var trickled []string
	for range 15 {
		trickled = append(trickled, b.pay(1, 0)...)
		b.send(nil, g)
		time.Sleep(100 * time.Millisecond)
	}
	b.awaitProcessed(g)
	var want []feedMessage
	for _, msg := range b.feed(g) {
		if slices.Contains(trickled, msg.PaymentID) {
			want = append(want, msg)
		}
	}
	healthy.awaitApplied("the trickle's messages", 60*time.Second, want)
	healthy.mu.Lock()
	defer healthy.mu.Unlock()
	for _, msg := range want {
		m.latencies = append(m.latencies, healthy.applied[msg.ID].Sub(msg.CreatedAt))
	}
	return m
}

// TestDownstreamIsolation: a refused endpoint, one that hangs past the
// timeout and one that answers 500 before 200 slow neither ingest nor a
// healthy endpoint beside them; the 500-then-200 one gets all its messages.
// Not parallel: it compares rates measured seconds apart, which other
// tests' load on the machine would make meaningless.
func TestDownstreamIsolation(t *testing.T) {
	b := downstreamSetup(t, "PAYGATE_DELIVERY_TIMEOUT=2s", "PAYGATE_DELIVERY_RETRY_SCHEDULE=200ms,200ms,200ms")
	g := b.gateway()
	healthy := newConsumer(t)
	healthy.start()
	b.register(g, healthy)
	base := b.measure(g, healthy, 0)

	dead := newConsumer(t) // never listens
	hanging := newConsumer(t)
	hanging.answer = func(string, int) int { return 0 }
	hanging.start()
	flaky := newConsumer(t)
	flaky.answer = func(_ string, attempt int) int {
		if attempt == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	}
	flaky.start()
	deadID, hangingID, flakyID := b.register(g, dead), b.register(g, hanging), b.register(g, flaky)
	bad := b.measure(g, healthy, 0.5*base.rate())

	t.Logf("ingest, events/s, best of %d and of %d bursts: %.0f alone, %.0f beside the bad endpoints (%.2f×)",
		len(base.rates), len(bad.rates), base.rate(), bad.rate(), bad.rate()/base.rate())
	alone := base.rate()
	for round := 1; bad.rate() < 0.5*alone && round <= 2; round++ {
		// Other packages' suites may have loaded the machine since the
		// first measure (in one full make test, all twenty bursts beside
		// the bad endpoints ran at a third of five alone before them).
		// Measure alone again, the bad endpoints disabled and their last
		// attempts over (a hanging one ends at its 2 s timeout), and hold
		// the bursts beside them to the lower of the two: endpoints that
		// held ingest up would leave this measure as fast as the first.
		// Then, if need be, beside them again: each round sets the two
		// side by side in time, so the machine's drift weighs on both,
		// while endpoints holding ingest up fail every round.
		for _, id := range []string{deadID, hangingID, flakyID} {
			b.setStatus(g, id, "disabled")
		}
		time.Sleep(2500 * time.Millisecond)
		again := b.measure(g, healthy, 0)
		t.Logf("round %d: ingest alone again, the bad endpoints disabled: %.0f events/s, best of %d bursts",
			round, again.rate(), len(again.rates))
		alone = min(alone, again.rate())
		for _, id := range []string{deadID, hangingID, flakyID} {
			b.setStatus(g, id, "enabled") // their messages are sent from here
		}
		if bad.rate() < 0.5*alone {
			bad = b.measure(g, healthy, 0.5*alone)
			t.Logf("round %d: ingest beside the bad endpoints again: %.0f events/s, best of %d bursts",
				round, bad.rate(), len(bad.rates))
		}
	}
	t.Logf("healthy endpoint, commit to arrival, p50 of %d: %s alone, %s beside the bad endpoints",
		len(bad.latencies), base.p50().Round(time.Millisecond), bad.p50().Round(time.Millisecond))
	// The absolute floor stays under the hanging endpoint's 2 s timeout: a
	// healthy message held behind a hanging one cannot hide beneath it.
	limit := max(3*base.p50(), base.p50()+time.Second)
	require.LessOrEqual(t, bad.p50(), limit, "the healthy endpoint's latency beside the bad ones")
	require.GreaterOrEqual(t, bad.rate(), 0.5*alone, "ingest beside the bad endpoints")

	// The bad endpoints were being tried meanwhile.
	hanging.mu.Lock()
	hung := hanging.total
	hanging.mu.Unlock()
	require.Positive(t, hung, "the hanging endpoint was sent to")
	var refused int
	for _, d := range b.deliveries(deadID) {
		refused += d.Recorded
	}
	require.Positive(t, refused, "the dead endpoint was tried")
	t.Logf("meanwhile: %d requests held by the hanging endpoint (%d deliveries), %d refused attempts at the dead one",
		hung, len(b.deliveries(hangingID)), refused)

	var flakyWants []feedMessage
	all := b.feed(g)
	flakyDeliveries := b.deliveries(flakyID)
	for _, msg := range all {
		if _, ok := flakyDeliveries[msg.ID]; ok {
			flakyWants = append(flakyWants, msg)
		}
	}
	require.Len(t, flakyWants, len(flakyDeliveries))
	require.NotEmpty(t, flakyWants)
	flaky.awaitApplied("the 500-then-200 endpoint's messages", 90*time.Second, flakyWants)
	flaky.mu.Lock()
	defer flaky.mu.Unlock()
	require.Empty(t, flaky.problems)
	for _, msg := range flakyWants {
		require.GreaterOrEqual(t, flaky.requests[msg.ID], 2, "%s: retried after its 500", msg.ID)
	}
}
