package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/delivery/natsjs"
	"github.com/paygate/paygate/internal/reliability"
	"github.com/paygate/paygate/internal/stripesim"
)

// These tests hold ARCHITECTURE.md's NATS paragraph ("Downstream") against the real
// binary and a real JetStream: whatever kills paygate or NATS, the stream
// ends up holding every message of the outbox once under its id, byte for
// byte, each payment's in sequence order, and ingest never waits for NATS.

// jetStream is an embedded nats-server with JetStream storing in a
// directory of the test's, so that it can be stopped and a new one started
// on the same port with what the first stored.
type jetStream struct {
	t    *testing.T
	dir  string
	port int
	srv  *natsserver.Server
}

func startJetStream(t *testing.T) *jetStream {
	t.Helper()
	n := &jetStream{t: t, dir: t.TempDir(), port: -1}
	n.start()
	t.Cleanup(n.stop)
	return n
}

func (n *jetStream) start() {
	n.t.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: n.port, JetStream: true, StoreDir: n.dir,
		NoLog: true, NoSigs: true, ServerName: "paygate-e2e",
		SyncAlways: true, // as docs/downstream.md asks of a single server
	})
	require.NoError(n.t, err)
	go srv.Start()
	require.True(n.t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	n.srv, n.port = srv, srv.Addr().(*net.TCPAddr).Port
}

func (n *jetStream) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

func (n *jetStream) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// stored is how many messages the stream holds (0 before paygate created
// it).
func (n *jetStream) stored() int {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nc, err := nats.Connect(n.url())
	require.NoError(n.t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(n.t, err)
	s, err := js.Stream(ctx, natsjs.DefaultStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0
	}
	require.NoError(n.t, err)
	info, err := s.Info(ctx)
	require.NoError(n.t, err)
	return int(info.State.Msgs)
}

// natsProgress is where publishing stands: rows of the outbox, those the
// nats relay marked published, and the messages the stream holds.
type natsProgress struct{ rows, published, stored int }

func (p natsProgress) String() string {
	return fmt.Sprintf("%d messages in the table, %d marked published, %d in the stream", p.rows, p.published, p.stored)
}

func (b *downstreamBundle) natsProgress(n *jetStream) natsProgress {
	b.t.Helper()
	var p natsProgress
	require.NoError(b.t, b.pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM messages),
			(SELECT count(*) FROM messages WHERE position <= coalesce((SELECT position FROM message_relays WHERE name = $1), 0))`,
		natsjs.RelayName).Scan(&p.rows, &p.published))
	p.stored = n.stored()
	return p
}

// awaitStream waits until the stream holds as many messages as the table,
// once every event sent is applied.
func (b *downstreamBundle) awaitStream(g *reliability.Gateway, n *jetStream, timeout time.Duration) natsProgress {
	b.t.Helper()
	b.awaitProcessed(g)
	var p natsProgress
	waitUntil(b.t, "every message in the stream", timeout, func() bool {
		p = b.natsProgress(n)
		return p.rows > 0 && p.stored >= p.rows && p.published == p.rows
	})
	return p
}

// requireStreamIsTheOutbox reads the stream with an ordered consumer and
// fails unless it holds each message of the table exactly once, under its
// id as Nats-Msg-Id, on paygate.<type>, with the table's bytes, and each
// payment's messages in sequence order.
func (b *downstreamBundle) requireStreamIsTheOutbox(n *jetStream) {
	b.t.Helper()
	t := b.t
	type row struct {
		typ, payment string
		sequence     int64
		body         []byte
	}
	want := map[string]row{}
	rows, err := b.pool.Query(context.Background(), `SELECT id, type, aggregate_type, aggregate_id, sequence, body FROM messages`)
	require.NoError(t, err)
	for rows.Next() {
		var (
			id, aggType string
			r           row
		)
		require.NoError(t, rows.Scan(&id, &r.typ, &aggType, &r.payment, &r.sequence, &r.body))
		require.Equal(t, "payment", aggType)
		want[id] = r
	}
	require.NoError(t, rows.Err())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := nats.Connect(n.url())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, natsjs.DefaultStream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(want), info.State.Msgs, "stream messages == messages table rows")
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	require.NoError(t, err)
	seen := map[string]bool{}
	last := map[string]int64{}
	for len(seen) < len(want) {
		batch, err := cons.Fetch(len(want)-len(seen), jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		got := 0
		for m := range batch.Messages() {
			got++
			id := m.Headers().Get(jetstream.MsgIDHeader)
			w, ok := want[id]
			require.True(t, ok, "the stream holds %q, not a message of the table", id)
			require.False(t, seen[id], "the stream holds %s twice", id)
			seen[id] = true
			require.Equal(t, "paygate."+w.typ, m.Subject())
			require.Equal(t, string(w.body), string(m.Data()), "the bytes of %s", id)
			require.Greater(t, w.sequence, last[w.payment], "%s: sequence %d after %d", w.payment, w.sequence, last[w.payment])
			require.Equal(t, last[w.payment]+1, w.sequence, "%s: sequence %d right after %d", w.payment, w.sequence, last[w.payment])
			last[w.payment] = w.sequence
		}
		require.NoError(t, batch.Error())
		require.NotZero(t, got, "the consumer stopped after %d of %d messages", len(seen), len(want))
	}
	require.Len(t, seen, len(want), "distinct ids in the stream == messages table rows")
}

// natsDuplicates is the restarted process's count of messages JetStream
// acknowledged as already held.
func natsDuplicates(t *testing.T, g *reliability.Gateway) int {
	t.Helper()
	resp, err := http.Get(g.URL() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	require.NoError(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, `paygate_nats_published_messages_total{result="duplicate"} `); ok {
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return int(n)
		}
	}
	t.Fatalf("no duplicate counter in /metrics")
	return 0
}

// TestNATSSIGKILLBetweenPublishAndCommit: serve is frozen, then SIGKILLed,
// at a moment when JetStream holds messages the relay has not marked
// published (a batch acknowledged, its transaction not committed).
// Restarted, it publishes them again under the same Nats-Msg-Id, JetStream
// keeps each once, and the stream ends up the outbox: every message once,
// byte for byte, each payment's in order.
//
// It takes a minute and a half: the killed process's publish_nats job
// stays `running` (one at a time, unique) until River rescues it, once its
// Timeout (natsjs: budget + acknowledgements, 60 s) elapsed and at the
// rescuer's next pass (every 30 s).
func TestNATSSIGKILLBetweenPublishAndCommit(t *testing.T) {
	t.Parallel()
	js := startJetStream(t)
	b := downstreamSetup(t, "PAYGATE_NATS_URL="+js.url())
	g := b.gateway()

	// Workloads of tens of payments, until one is caught mid-batch: the
	// process is frozen (SIGSTOP) when the stream is ahead of the relay,
	// and killed only if it still is once frozen, so the kill cannot land
	// after the batch's commit.
	var at natsProgress
	caught := false
	for round := 0; round < 8 && !caught; round++ {
		b.pay(40, 3)
		b.send(&stripesim.DeliverOpts{Shuffle: true, Concurrency: 8}, g)
		deadline := time.Now().Add(20 * time.Second)
		for !caught && time.Now().Before(deadline) {
			p := b.natsProgress(js)
			if p.stored > p.published {
				require.NoError(t, g.Pause())
				time.Sleep(200 * time.Millisecond) // a commit already sent lands
				if at = b.natsProgress(js); at.stored > at.published {
					require.NoError(t, g.Kill())
					caught = true
					break
				}
				require.NoError(t, g.Resume())
			}
			if p.rows > 0 && p.published == p.rows && p.stored == p.rows {
				var processed int
				require.NoError(t, b.pool.QueryRow(context.Background(),
					`SELECT count(*) FROM inbox_events WHERE status = 'processed'`).Scan(&processed))
				if processed == len(b.sim.Events()) {
					break // caught up: another workload
				}
			}
		}
	}
	require.True(t, caught, "never caught serve between a batch's acknowledgements and its commit")
	at = b.natsProgress(js) // the process is gone: nothing moves now
	t.Logf("killed with %s", at)
	require.Greater(t, at.stored, at.published, "JetStream held messages the relay had not marked published")
	require.Less(t, at.published, at.rows, "the relay had not caught up at the kill")

	// More events while serve is down would be refused; they come after.
	restarted := time.Now()
	require.NoError(t, g.Start(context.Background()))
	b.pay(20, 4)
	b.send(&stripesim.DeliverOpts{Concurrency: 4}, g)
	final := b.awaitStream(g, js, 150*time.Second)
	t.Logf("after the restart: %s, %s later", final, time.Since(restarted).Round(time.Millisecond))
	b.requireStreamIsTheOutbox(js)
	require.GreaterOrEqual(t, natsDuplicates(t, g), at.stored-at.published,
		"what JetStream held unmarked was published again and acknowledged as duplicate")
}

// TestNATSOutage: the NATS server is stopped while messages are being
// published; events keep coming and are answered 2xx and applied, /readyz
// stays 200, and messages wait in the outbox. A new server on the same
// port and store gets every one of them.
func TestNATSOutage(t *testing.T) {
	t.Parallel()
	js := startJetStream(t)
	b := downstreamSetup(t, "PAYGATE_NATS_URL="+js.url())
	g := b.gateway()

	stopped := false
	for round := 0; round < 8 && !stopped; round++ {
		b.pay(40, 3)
		b.send(&stripesim.DeliverOpts{Shuffle: true, Concurrency: 8}, g)
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			p := b.natsProgress(js)
			if p.stored > 0 && p.published < p.rows {
				js.stop()
				stopped = true
				t.Logf("NATS stopped with %s", p)
				break
			}
			if p.rows > 0 && p.published == p.rows {
				break // caught up before the stop: another workload
			}
		}
	}
	require.True(t, stopped, "never stopped NATS while publishing was under way")

	b.pay(30, 3)
	results, err := b.sim.Deliver(context.Background(), g.WebhookURL(), b.sim.Events()[b.sent:], &stripesim.DeliverOpts{Concurrency: 4, MaxAttempts: 1})
	require.NoError(t, err)
	b.sent = len(b.sim.Events())
	for _, r := range results {
		require.Equal(t, http.StatusOK, r.Status, "ingest answers while NATS is down")
	}
	b.awaitProcessed(g)
	resp, err := http.Get(g.URL() + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "/readyz does not depend on NATS")
	var rows, published int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM messages),
		(SELECT count(*) FROM messages WHERE position <= coalesce((SELECT position FROM message_relays WHERE name = $1), 0))`,
		natsjs.RelayName).Scan(&rows, &published))
	require.Less(t, published, rows, "messages wait while NATS is down")
	waitUntil(t, "the publisher's failure recorded", 20*time.Second, func() bool {
		var failing bool
		require.NoError(t, b.pool.QueryRow(context.Background(),
			`SELECT failing_since IS NOT NULL FROM message_relays WHERE name = $1`, natsjs.RelayName).Scan(&failing))
		return failing
	})

	js.start()
	back := time.Now()
	final := b.awaitStream(g, js, 60*time.Second)
	t.Logf("NATS back: %s, %s later", final, time.Since(back).Round(time.Millisecond))
	b.requireStreamIsTheOutbox(js)
	var failing bool
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT failing_since IS NOT NULL FROM message_relays WHERE name = $1`, natsjs.RelayName).Scan(&failing))
	require.False(t, failing, "a success ends the outage")
}
