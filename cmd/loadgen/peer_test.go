package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
)

// startPeer serves a peer of mode on a fresh database and returns its base
// URL and a pool on its schema; grouped, it is loadgen peer -group.
func startPeer(t *testing.T, mode string, grouped ...bool) (string, *pgxpool.Pool) {
	t.Helper()
	_, url := testdb.NewWithURL(t)
	p, err := newPeer(context.Background(), mode, url, "peer", testSecret)
	require.NoError(t, err)
	t.Cleanup(p.db.Close)
	if len(grouped) > 0 && grouped[0] {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		p.startGroupers(ctx)
	}
	srv := httptest.NewServer(p.handler())
	t.Cleanup(srv.Close)
	return srv.URL, p.db
}

// postEvent sends payload as Stripe would, signed with secret, and returns
// the status answered.
func postEvent(t *testing.T, base string, payload []byte, secret string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/webhooks/stripe", bytes.NewReader(payload))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(stripesim.SignatureHeader, stripesim.SignedRequest(payload, secret, time.Now()))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func countRows(t *testing.T, db *pgxpool.Pool, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// TestPeersStoreASignedEventOnce: both peers answer a signed event 200 and
// store it, refuse a bad signature and a tampered body, and answer the
// event again 200 without storing it twice (the store peer's job too).
func TestPeersStoreASignedEventOnce(t *testing.T) {
	t.Parallel()
	for _, peer := range []struct {
		mode    string
		grouped bool
	}{{peerStore, false}, {peerSync, false}, {peerStore, true}, {peerSync, true}} {
		mode := peer.mode
		t.Run(fmt.Sprintf("%s/grouped=%t", mode, peer.grouped), func(t *testing.T) {
			t.Parallel()
			base, db := startPeer(t, mode, peer.grouped)
			ev := stripesim.PaymentPairs(2)[1]
			require.Equal(t, http.StatusOK, postEvent(t, base, ev.Payload, testSecret))
			require.Equal(t, http.StatusBadRequest, postEvent(t, base, ev.Payload, "whsec_someone_else"))
			signed := stripesim.SignedRequest(ev.Payload, testSecret, time.Now())
			tampered := bytes.Replace(ev.Payload, []byte(`"evt_`), []byte(`"evX_`), 1)
			req, err := http.NewRequest(http.MethodPost, base+"/webhooks/stripe", bytes.NewReader(tampered))
			require.NoError(t, err)
			req.Header.Set(stripesim.SignatureHeader, signed)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			require.Equal(t, http.StatusOK, postEvent(t, base, ev.Payload, testSecret), "a duplicate")

			events := "events"
			if peer.grouped {
				events = "grouped_events" // the payload as bytes
			}
			require.Equal(t, 1, countRows(t, db, "SELECT count(*) FROM "+events+" WHERE id = $1", ev.ID))
			n, err := readCount(base + "/count")
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			if mode == peerStore {
				require.Equal(t, 1, countRows(t, db, "SELECT count(*) FROM jobs WHERE event_id = $1", ev.ID))
				require.Zero(t, countRows(t, db, "SELECT count(*) FROM payments"), "store applies nothing")
			} else {
				require.Equal(t, 1, countRows(t, db, "SELECT count(*) FROM ledger_transactions"))
			}
		})
	}
}

// TestSyncPeerPostsOneBalancedCapturePerPayment: a PayMix stream, shuffled
// and sent twice over concurrent connections, leaves every event stored
// once, every payment with one capture of two balanced entries of its
// amount, and the refunded payments refunded; grouped too.
func TestSyncPeerPostsOneBalancedCapturePerPayment(t *testing.T) {
	t.Parallel()
	for _, grouped := range []bool{false, true} {
		t.Run(fmt.Sprintf("grouped=%t", grouped), func(t *testing.T) {
			t.Parallel()
			syncPeerPostsOneBalancedCapturePerPayment(t, grouped)
		})
	}
}

func syncPeerPostsOneBalancedCapturePerPayment(t *testing.T, grouped bool) {
	base, db := startPeer(t, peerSync, grouped)
	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	rng := mrand.New(mrand.NewPCG(7, 11))
	events := sim.PayMix(rng, 40, 0.3)
	captured := map[string]int64{} // by payment, from its payment_intent.succeeded
	refunded := map[string]bool{}
	for _, e := range events {
		switch e.Type {
		case stripesim.EventPaymentIntentSucceeded:
			var env struct {
				Data struct {
					Object struct {
						AmountReceived int64 `json:"amount_received"`
					} `json:"object"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(e.Payload, &env))
			captured[e.PaymentIntentID] = env.Data.Object.AmountReceived
		case stripesim.EventChargeRefunded:
			refunded[e.PaymentIntentID] = true
		}
	}
	require.Len(t, captured, 40)
	require.NotEmpty(t, refunded)

	sendTwiceShuffled(t, base, rng, events)

	table := "events"
	if grouped {
		table = "grouped_events"
	}
	require.Equal(t, len(events), countRows(t, db, "SELECT count(*) FROM "+table))
	require.Equal(t, len(captured), countRows(t, db, "SELECT count(*) FROM ledger_transactions WHERE kind = 'capture'"))
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM (
		SELECT transaction_id FROM ledger_entries GROUP BY transaction_id
		HAVING count(*) <> 2 OR coalesce(sum(amount) FILTER (WHERE direction = 'debit'), 0)
			<> coalesce(sum(amount) FILTER (WHERE direction = 'credit'), 0)) unbalanced`))
	for payment, amount := range captured {
		require.Equal(t, 1, countRows(t, db, `SELECT count(*) FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
			WHERE t.payment_id = $1 AND e.direction = 'debit' AND e.amount = $2`, payment, amount), payment)
		status := "succeeded"
		if refunded[payment] {
			status = "refunded"
		}
		require.Equal(t, 1, countRows(t, db, "SELECT count(*) FROM payments WHERE id = $1 AND status = $2 AND amount_captured = $3",
			payment, status, amount), payment)
	}
}

// sendTwiceShuffled sends events twice, shuffled, over 32 concurrent
// connections, and requires every answer to be 200.
func sendTwiceShuffled(t *testing.T, base string, rng *mrand.Rand, events []stripesim.Event) {
	t.Helper()
	sends := append(append([]stripesim.Event(nil), events...), events...)
	rng.Shuffle(len(sends), func(i, j int) { sends[i], sends[j] = sends[j], sends[i] })
	work := make(chan stripesim.Event)
	var wg sync.WaitGroup
	statuses := make(chan int, len(sends))
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				statuses <- postEvent(t, base, e.Payload, testSecret)
			}
		}()
	}
	for _, e := range sends {
		work <- e
	}
	close(work)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		require.Equal(t, http.StatusOK, s)
	}
}

// startPaygatesPeer serves a grouped peer of mode (contract or inbox) on
// a database paygate migrated, delivering to endpoint when it is not "".
func startPaygatesPeer(t *testing.T, mode, endpoint string) (*peer, *httptest.Server) {
	t.Helper()
	_, url := testdb.NewWithURL(t)
	p, err := newPeer(context.Background(), mode, url, "public", testSecret)
	require.NoError(t, err)
	t.Cleanup(p.db.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if endpoint != "" {
		require.NoError(t, p.startEndpoint(ctx, endpoint))
	}
	p.startGroupers(ctx)
	srv := httptest.NewServer(p.handler())
	t.Cleanup(srv.Close)
	return p, srv
}

// TestContractPeerWritesPaygatesRows: the least work for paygate's rows
// does not silently do less than paygate. A PayMix stream, shuffled and
// sent twice over concurrent connections, leaves in paygate's own tables
// every event in the inbox once and processed; each payment with its
// final status, one fact for each of its events, a message for each of
// its changes, placed in the feed; one balanced capture and one receipt
// email for each captured payment, one refund transaction and one
// confirmation for each refunded one, the emails marked. A database
// paygate did not migrate is refused.
func TestContractPeerWritesPaygatesRows(t *testing.T) {
	t.Parallel()
	p, srv := startPaygatesPeer(t, peerContract, "")
	db := p.db

	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	rng := mrand.New(mrand.NewPCG(3, 5))
	events := sim.PayMix(rng, 40, 0.3)
	refunded := map[string]bool{}
	for _, e := range events {
		if e.Type == stripesim.EventChargeRefunded {
			refunded[e.PaymentIntentID] = true
		}
	}
	require.NotEmpty(t, refunded)
	sendTwiceShuffled(t, srv.URL, rng, events)

	require.Equal(t, len(events), countRows(t, db, "SELECT count(*) FROM inbox_events WHERE status = 'processed'"))
	require.Equal(t, len(events), countRows(t, db, "SELECT count(*) FROM inbox_event_keys"))
	n, err := readCount(srv.URL + "/count")
	require.NoError(t, err)
	require.EqualValues(t, len(events), n)
	require.Equal(t, 40, countRows(t, db, "SELECT count(*) FROM payments"))
	for payment := range refunded {
		require.Equal(t, 1, countRows(t, db, "SELECT count(*) FROM payments WHERE id = $1 AND status = 'refunded'", payment), payment)
	}
	require.Equal(t, 40-len(refunded), countRows(t, db, "SELECT count(*) FROM payments WHERE status = 'succeeded'"), "no status goes back")
	require.Equal(t, 40, countRows(t, db, "SELECT count(*) FROM ledger_transactions WHERE kind = 'capture'"))
	require.Equal(t, len(refunded), countRows(t, db, "SELECT count(*) FROM ledger_transactions WHERE kind = 'refund'"))
	require.Zero(t, countRows(t, db, "SELECT count(*) FROM payments WHERE amount_refunded <> CASE WHEN status = 'refunded' THEN amount_captured ELSE 0 END"))
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM (
		SELECT transaction_id FROM ledger_entries GROUP BY transaction_id
		HAVING count(*) <> 2 OR sum(debit) <> sum(credit)) unbalanced`))
	// Every event of a payment is one of its facts: the events of the mix
	// are all of payment_intents and their charges.
	require.Equal(t, len(events), countRows(t, db, "SELECT count(*) FROM payment_facts"))
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM payments p
		WHERE p.message_sequence <> (SELECT count(*) FROM messages m WHERE m.aggregate_id = p.id)`), "a message for each change")
	require.Zero(t, countRows(t, db, "SELECT count(*) FROM messages WHERE position IS NULL"))
	require.Equal(t, countRows(t, db, "SELECT count(*) FROM messages"), countRows(t, db, "SELECT count(DISTINCT position) FROM messages"))
	require.Positive(t, countRows(t, db, "SELECT count(*) FROM payment_history"))
	require.Equal(t, 40, countRows(t, db, "SELECT count(*) FROM email_outbox WHERE kind = 'payment_receipt'"))
	require.Equal(t, len(refunded), countRows(t, db, "SELECT count(*) FROM email_outbox WHERE kind = 'refund_confirmation'"))
	require.Eventually(t, func() bool {
		return countRows(t, db, "SELECT count(*) FROM email_outbox WHERE status = 'pending'") == 0
	}, 10*time.Second, 20*time.Millisecond, "the receipts marked")

	_, other := startPeer(t, peerSync) // a database with the peers' tables only
	_, err = newPeer(context.Background(), peerContract, other.Config().ConnString(), "peer", testSecret)
	require.ErrorContains(t, err, "paygate migrate")
}

// TestContractPeerDeliversEachMessageOnce: a contract peer with an
// endpoint POSTs each message its groups commit once, with its body and
// the Standard Webhooks headers, a payment's messages in their order, and
// counts them: the limit for paygate's endpoint pairs does no less than
// deliver.
func TestContractPeerDeliversEachMessageOnce(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		received = map[string]int{}
		order    = map[string][]int64{} // a payment's sequences, as they came
	)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID       string `json:"id"`
			Sequence int64  `json:"sequence"`
			Data     struct {
				Payment struct {
					ID string `json:"id"`
				} `json:"payment"`
			} `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil || r.Header.Get("webhook-id") != m.ID ||
			r.Header.Get("webhook-timestamp") == "" || !strings.HasPrefix(r.Header.Get("webhook-signature"), "v1,") {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		received[m.ID]++
		order[m.Data.Payment.ID] = append(order[m.Data.Payment.ID], m.Sequence)
		mu.Unlock()
	}))
	t.Cleanup(endpoint.Close)

	p, srv := startPaygatesPeer(t, peerContract, endpoint.URL)

	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	rng := mrand.New(mrand.NewPCG(13, 17))
	sendTwiceShuffled(t, srv.URL, rng, sim.PayMix(rng, 30, 0.3))

	require.Eventually(t, func() bool {
		n, err := readCount(srv.URL + "/pending")
		return err == nil && n == 0
	}, 10*time.Second, 20*time.Millisecond)
	rows, err := p.db.Query(context.Background(), "SELECT id FROM messages")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, ids)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, received, len(ids), "every message, and only those")
	for _, id := range ids {
		require.Equal(t, 1, received[id], id)
	}
	for payment, seqs := range order {
		require.True(t, slices.IsSorted(seqs), "%s's messages in their order: %v", payment, seqs)
	}
	delivered, err := readCount(srv.URL + "/delivered")
	require.NoError(t, err)
	require.EqualValues(t, len(ids), delivered)
	undelivered, err := readCount(srv.URL + "/undelivered")
	require.NoError(t, err)
	require.Zero(t, undelivered)
	last, err := readCount(srv.URL + "/last-delivered")
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), time.UnixMicro(last), 10*time.Second)

	plain := httptest.NewServer((&peer{mode: peerContract}).handler())
	t.Cleanup(plain.Close)
	_, err = readCount(plain.URL + "/delivered")
	require.ErrorContains(t, err, "404", "no endpoint, no count")
}

// TestInboxPeerWritesPaygatesIngestRows: an inbox peer stores each event
// of a shuffled mix sent twice once, received and byte for byte, with its
// dedupe key, and names each in exactly one apply_events job, as
// paygate's ingest does; a database paygate did not migrate is refused.
func TestInboxPeerWritesPaygatesIngestRows(t *testing.T) {
	t.Parallel()
	p, srv := startPaygatesPeer(t, peerInbox, "")
	db := p.db

	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	rng := mrand.New(mrand.NewPCG(7, 11))
	events := sim.PayMix(rng, 30, 0.3)
	sendTwiceShuffled(t, srv.URL, rng, events)

	require.Equal(t, len(events), countRows(t, db, "SELECT count(*) FROM inbox_events WHERE status = 'received'"))
	require.Equal(t, len(events), countRows(t, db, "SELECT count(*) FROM inbox_event_keys"))
	for _, e := range events {
		var payload []byte
		require.NoError(t, db.QueryRow(context.Background(),
			"SELECT payload FROM inbox_events WHERE provider = 'stripe' AND event_id = $1", e.ID).Scan(&payload))
		require.Equal(t, string(e.Payload), string(payload), e.ID)
	}
	n, err := readCount(srv.URL + "/count")
	require.NoError(t, err)
	require.EqualValues(t, len(events), n)
	require.Equal(t, len(events), countRows(t, db, "SELECT count(DISTINCT event_id) FROM ("+jobs.EventJobsSQL+") j WHERE kind = 'apply_events'"))
	require.Equal(t, len(events), countRows(t, db, "SELECT count(*) FROM ("+jobs.EventJobsSQL+") j"), "each event in one job")
	require.Zero(t, countRows(t, db, "SELECT count(*) FROM payments"), "nothing applied")

	_, other := startPeer(t, peerSync)
	_, err = newPeer(context.Background(), peerInbox, other.Config().ConnString(), "peer", testSecret)
	require.ErrorContains(t, err, "paygate migrate")
}

// TestRunMeasuresAPeer: loadgen run -peer sends the level through wrk and
// finds every answered event in the peer's database, end to end being
// its ingest.
func TestRunMeasuresAPeer(t *testing.T) {
	t.Parallel()
	bin := wrkOrSkip(t)
	base, _ := startPeer(t, peerSync)
	// An event stored before the level, which the level does not count.
	require.Equal(t, http.StatusOK, postEvent(t, base, stripesim.PaymentPairs(1)[0].Payload, testSecret))
	dir := t.TempDir()
	s, err := run(context.Background(), runOptions{url: base + "/webhooks/stripe", secret: testSecret, levels: "8",
		seconds: 1, expect: "8=300", threads: 2, wrk: bin, script: "../../scripts/bench.lua", out: dir, label: "peer-sync",
		peer: peerSync, refundShare: 0.1, pairOf: "endpoint", settle: time.Minute, save: filepath.Join(dir, "results.json")})
	require.NoError(t, err)
	require.Equal(t, peerSync, s.Peer)
	require.Len(t, s.Levels, 1)
	lv := s.Levels[0]
	require.Equal(t, 300, lv.Events)
	require.Zero(t, lv.Wrk.Non2xx)
	require.Equal(t, lv.Events, lv.Stored)
	require.InDelta(t, lv.ingest(), lv.e2e(), 1e-9*lv.ingest())
}

// TestReportPeers: the peers are shown in tables of their own, paygate's
// ingest is set against the store peer's and its end to end against the
// sync peer's at each connection count, and a peer's failed requests are
// not counted with paygate's; the limits beside them, when measured.
func TestReportPeers(t *testing.T) {
	t.Parallel()
	lv := func(conns int, ingest, e2eSeconds float64, non2xx int64) level {
		return level{Connections: conns, Events: 20000, Stored: 20000, E2ESeconds: e2eSeconds,
			Wrk: wrkResult{RequestsPerS: ingest, Non2xx: non2xx}}
	}
	r := results{Series: []series{
		{Label: "paygate", Instances: 1, Levels: []level{lv(16, 3000, 8, 0), lv(64, 7500, 5, 0)}},
		{Label: "peer-store", Peer: peerStore, Instances: 1, Levels: []level{lv(16, 2000, 10, 0), lv(64, 2500, 8, 3)}},
		{Label: "peer-sync", Peer: peerSync, Instances: 1, Levels: []level{lv(64, 1600, 12.5, 0)}},
	}}
	var out bytes.Buffer
	require.Zero(t, report(&out, r, anchors{}), "the store peer's non-2xx are not paygate's")
	text := out.String()
	require.Contains(t, text, "\npeer, store: the gateway a team would write instead")
	require.Contains(t, text, "\npeer, sync: the gateway a team would write instead")
	require.Regexp(t, `(?m)^\s+16\s+3000\s+2000\s+1\.50×\s+2500\s+-\s+-\s*$`, text)
	require.Regexp(t, `(?m)^\s+64\s+7500\s+2500\s+3\.00×\s+4000\s+1600\s+2\.50×\s*$`, text)
	require.Regexp(t, `(?m)^paygate, 1 instance, wrk`, text, "paygate stays the main series")
	require.NotContains(t, text, "the least work", "no grouped peer, no limit")

	// The grouped peers: their own tables, and how far beyond the peers
	// they get; the peers' comparison with paygate stays the peers'.
	r.Series = append(r.Series,
		series{Label: "limit-store", Peer: peerStore, Grouped: true, Instances: 1, Levels: []level{lv(64, 10000, 2, 0)}},
		series{Label: "limit-sync", Peer: peerSync, Grouped: true, Instances: 1, Levels: []level{lv(64, 4000, 5, 0)}})
	out.Reset()
	require.Zero(t, report(&out, r, anchors{}))
	text = out.String()
	require.Regexp(t, `(?m)^\s+64\s+7500\s+2500\s+3\.00×\s+4000\s+1600\s+2\.50×\s*$`, text)
	require.Contains(t, text, "\nthe least work, store:")
	require.Contains(t, text, "\nthe least work, sync:")
	require.Regexp(t, `(?m)^\s+64\s+2500\s+10000\s+4\.00×\s+1600\s+4000\s+2\.50×\s*$`, text)
	require.NotContains(t, text, "paygate's rows", "no contract peer, no such limit")

	// The contract peer: its table, its end to end against the sync
	// peer's, and paygate's against it.
	r.Series = append(r.Series,
		series{Label: "limit-contract", Peer: peerContract, Grouped: true, Instances: 1, Levels: []level{lv(64, 3200, 6.25, 0)}})
	out.Reset()
	require.Zero(t, report(&out, r, anchors{}))
	text = out.String()
	require.Contains(t, text, "\nthe least work, paygate's rows:")
	require.Regexp(t, `(?m)^\s+64\s+1600\s+3200\s+2\.00×\s+4000\s+1\.25×\s*$`, text)
	require.NotContains(t, text, "paygate's ingest rows", "no inbox peer, no such limit")

	// The inbox peer: its table, its ingest against the store peer's and
	// the bare transaction's, and paygate's against it.
	r.Series = append(r.Series,
		series{Label: "limit-inbox", Peer: peerInbox, Grouped: true, Instances: 1, Levels: []level{lv(64, 9375, 2, 0)}})
	out.Reset()
	require.Zero(t, report(&out, r, anchors{pgbenchBare: []float64{6000, 6500}}))
	text = out.String()
	require.Contains(t, text, "\nthe least work, paygate's ingest rows:")
	require.Regexp(t, `(?m)^\s+64\s+2500\s+9375\s+3\.75×\s+1\.50×\s+7500\s+0\.80×\s*$`, text)
	require.NotContains(t, text, "one endpoint")

	// The contract peer's endpoint pairs: their section, and their median
	// beside paygate's endpoint target; a peer's failures are not
	// paygate's.
	pair := func(n int, with bool, e2eSeconds float64, non2xx int64) series {
		l := lv(64, 3000, e2eSeconds, non2xx)
		if with {
			l.Messages, l.DeliverySeconds = 10000, e2eSeconds+0.5
		}
		return series{Label: fmt.Sprintf("limit-endpoint-%d-%v", n, with), Peer: peerContract, Grouped: true, Instances: 1,
			Pair: n, PairOf: pairLimitEndpoint, With: with, Levels: []level{l}}
	}
	r.Series = append(r.Series,
		series{Label: "paygate-endpoint-1", Instances: 1, Pair: 1, Delivery: true, With: true, Levels: []level{lv(64, 7000, 5.5, 0)}},
		series{Label: "paygate-plain-1", Instances: 1, Pair: 1, Levels: []level{lv(64, 7000, 5, 0)}},
		pair(1, true, 8, 0), pair(1, false, 6.4, 0), pair(2, false, 6.4, 5), pair(2, true, 7.5, 0), pair(3, true, 8, 0), pair(3, false, 8, 0))
	out.Reset()
	require.Zero(t, report(&out, r, anchors{pgbenchBare: []float64{6000, 6500}}))
	text = out.String()
	require.Contains(t, text, "\nthe least work with paygate's rows, one endpoint attached")
	require.Contains(t, text, "-c64, median of 3 pairs: ingest 1.00×, end to end 0.85× of the run without")
	require.Regexp(t, `64 connections, one endpoint: end-to-end within 10 % of without \(median of 1 pairs\)\s+0\.91×\s+met`, text)
	require.Regexp(t, `64 connections, one endpoint: the least work with paygate's rows, end-to-end of its run without \(median of 3 pairs; [^)]*\)\s+0\.85×\s*\n`, text)
}
