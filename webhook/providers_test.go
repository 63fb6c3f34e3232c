package webhook_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/provider/stdwebhooks"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

var (
	adyenKey      = bytes.Repeat([]byte{0x5a}, adyen.KeyLength)
	adyenOldKey   = bytes.Repeat([]byte{0x17}, adyen.KeyLength)
	adyenAuth     = "adyen-webhooks:s3cret"
	standardKey   = "whsec_" + base64.StdEncoding.EncodeToString([]byte("polar test secret, 32 bytes long"))
	standardOther = "whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret for another sender"))
)

// providersSetup serves every provider's route as `paygate serve` does:
// Stripe, Adyen (two keys: a rotation, and Basic auth) and one Standard
// Webhooks source, "polar", over a real inbox.
func providersSetup(t *testing.T, ingester newIngester, sources ...stdwebhooks.Source) (*echo.Echo, *pgxpool.Pool) {
	t.Helper()
	pool := testdb.New(t)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)
	ad, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{adyenKey, adyenOldKey}, BasicAuth: adyenAuth})
	require.NoError(t, err)
	var srcs []provider.Receiver
	for _, s := range sources {
		r, err := stdwebhooks.NewReceiver(s)
		require.NoError(t, err)
		srcs = append(srcs, r)
	}
	e, _ := api.NewEcho(api.Config{Pool: pool})
	webhook.NewHandler(webhook.Config{
		Ingester:  ingester(t, pool, jc),
		Receivers: []provider.Receiver{stripe.NewReceiver([]string{secretA}, 0), ad},
		Sources:   srcs,
	}).Register(e)
	return e, pool
}

// adyenItem is one signed NotificationRequestItem, as Adyen sends it.
func adyenItem(t testing.TB, key []byte, code, psp, original string, value int64) map[string]any {
	t.Helper()
	raw, err := json.Marshal(map[string]any{
		"amount": map[string]any{"value": value, "currency": "EUR"}, "eventCode": code,
		"eventDate": time.Now().UTC().Format(time.RFC3339), "merchantAccountCode": "PaygateTest",
		"merchantReference": "order-" + psp, "originalReference": original, "pspReference": psp,
		"paymentMethod": "visa", "reason": "", "success": "true",
	})
	require.NoError(t, err)
	it, err := adyen.DecodeItem(raw)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	m["additionalData"] = map[string]any{"hmacSignature": adyen.Sign(it, key)}
	return m
}

func adyenBatch(t testing.TB, items ...map[string]any) []byte {
	t.Helper()
	wrapped := make([]map[string]any, len(items))
	for i, it := range items {
		wrapped[i] = map[string]any{"NotificationRequestItem": it}
	}
	body, err := json.Marshal(map[string]any{"live": "false", "notificationItems": wrapped})
	require.NoError(t, err)
	return body
}

func postAdyen(e *echo.Echo, body []byte, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/webhooks/adyen", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(auth)))
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func countRows(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// TestAdyenBatchCommitsEachItemOnce: twenty copies of one three-item batch
// racing, with either ingester, are each answered [accepted], and the inbox
// holds each item once, under its contract id, with one job each; every
// stored payload is the item's bytes.
func TestAdyenBatchCommitsEachItemOnce(t *testing.T) {
	t.Parallel()
	for name, ingester := range ingesters() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, pool := providersSetup(t, ingester)
			body := adyenBatch(t,
				adyenItem(t, adyenKey, "AUTHORISATION", "PSP0000000000001", "", 36000),
				adyenItem(t, adyenOldKey, "CAPTURE", "PSP0000000000002", "PSP0000000000001", 36000), // signed with the previous key
				adyenItem(t, adyenKey, "REFUND", "PSP0000000000003", "PSP0000000000001", 6000),
			)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					rec := postAdyen(e, body, adyenAuth)
					if rec.Code != http.StatusOK || rec.Body.String() != "[accepted]" {
						t.Errorf("answer %d %q", rec.Code, rec.Body.String())
					}
				}()
			}
			close(start)
			wg.Wait()
			require.Equal(t, 3, countRows(t, pool, `SELECT count(*) FROM inbox_events WHERE provider = 'adyen'`))
			require.Equal(t, 3, countRows(t, pool, `SELECT count(*) FROM (`+jobs.EventJobsSQL+`) j`))
			for _, id := range []string{"PSP0000000000001:AUTHORISATION:true", "PSP0000000000002:CAPTURE:true", "PSP0000000000003:REFUND:true"} {
				var payload []byte
				require.NoError(t, pool.QueryRow(context.Background(),
					`SELECT payload FROM inbox_events WHERE provider = 'adyen' AND event_id = $1`, id).Scan(&payload), id)
				require.Contains(t, string(body), string(payload), "%s is stored as the item's own bytes", id)
			}
		})
	}
}

// TestAdyenRefusalsStoreNothing: one item of a batch whose HMAC fails, a
// wrong or missing Basic auth, a body that is not a batch: refused, and
// nothing of the batch is stored, its good items included.
func TestAdyenRefusalsStoreNothing(t *testing.T) {
	t.Parallel()
	e, pool := providersSetup(t, ingesters()["batch"])
	good := adyenItem(t, adyenKey, "AUTHORISATION", "PSP0000000000010", "", 1000)
	tampered := adyenItem(t, adyenKey, "CAPTURE", "PSP0000000000011", "PSP0000000000010", 1000)
	tampered["amount"] = map[string]any{"value": 100000, "currency": "EUR"}
	for name, tc := range map[string]struct {
		body   []byte
		auth   string
		status int
	}{
		"one item tampered":    {adyenBatch(t, good, tampered), adyenAuth, http.StatusUnauthorized},
		"one item another key": {adyenBatch(t, good, adyenItem(t, []byte("not the key"), "REFUND", "PSP0000000000012", "PSP0000000000010", 1)), adyenAuth, http.StatusUnauthorized},
		"wrong basic auth":     {adyenBatch(t, good), "adyen-webhooks:guess", http.StatusUnauthorized},
		"no basic auth":        {adyenBatch(t, good), "", http.StatusUnauthorized},
		"not a batch":          {[]byte(`{"live":"false","notificationItems":[]}`), adyenAuth, http.StatusBadRequest},
		"not JSON":             {[]byte(`[accepted]`), adyenAuth, http.StatusBadRequest},
	} {
		rec := postAdyen(e, tc.body, tc.auth)
		require.Equal(t, tc.status, rec.Code, "%s: %s", name, rec.Body.String())
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), name)
		require.NotContains(t, rec.Body.String(), adyen.Sign(mustItem(t, good), adyenKey), "%s: no signature in the answer", name)
	}
	require.Zero(t, countRows(t, pool, `SELECT count(*) FROM inbox_events`))
	require.Zero(t, countRows(t, pool, `SELECT count(*) FROM river_job`))
}

func mustItem(t testing.TB, m map[string]any) adyen.Item {
	t.Helper()
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	it, err := adyen.DecodeItem(raw)
	require.NoError(t, err)
	return it
}

// TestUnconfiguredProvidersAnswer503: without keys Adyen answers 503 (so
// that it retries once an operator configured them), and so does the
// Standard Webhooks route with no source at all; with sources, an unknown
// one is 404.
func TestUnconfiguredProvidersAnswer503(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)
	ad, err := adyen.NewReceiver(adyen.Config{})
	require.NoError(t, err)
	e, _ := api.NewEcho(api.Config{Pool: pool})
	webhook.NewHandler(webhook.Config{
		Ingester:  &webhook.TxIngester{Pool: pool, Enqueue: jc},
		Receivers: []provider.Receiver{stripe.NewReceiver(nil, 0), ad},
	}).Register(e)

	rec := postAdyen(e, adyenBatch(t, adyenItem(t, adyenKey, "AUTHORISATION", "PSP0000000000020", "", 1000)), "")
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	rec = postStandard(e, "polar", "msg_1", time.Now(), []byte(`{"type":"order.paid"}`), standardKey)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())

	e2, pool2 := providersSetup(t, ingesters()["tx"], stdwebhooks.Source{Name: "polar", Secrets: []string{standardKey}})
	rec = postStandard(e2, "dodo", "msg_1", time.Now(), []byte(`{"type":"order.paid"}`), standardKey)
	require.Equal(t, http.StatusNotFound, rec.Code, rec.Body.String())
	require.Zero(t, countRows(t, pool, `SELECT count(*) FROM inbox_events`))
	require.Zero(t, countRows(t, pool2, `SELECT count(*) FROM inbox_events`))
}

func postStandard(e *echo.Echo, source, id string, at time.Time, body []byte, secret string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/webhooks/standard/"+source, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	sig, err := stdwebhooks.Sign(id, at, body, secret)
	if err != nil {
		panic(err)
	}
	req.Header.Set(stdwebhooks.HeaderID, id)
	req.Header.Set(stdwebhooks.HeaderTimestamp, fmt.Sprint(at.Unix()))
	req.Header.Set(stdwebhooks.HeaderSignature, sig)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

// TestStandardWebhooksStoredUnderTheSource: a source's event is stored under
// the source's name with its webhook-id, once however often it is
// delivered, a rotated secret is accepted, and a wrong one, a stale
// timestamp or a tampered body are refused with nothing stored.
func TestStandardWebhooksStoredUnderTheSource(t *testing.T) {
	t.Parallel()
	e, pool := providersSetup(t, ingesters()["batch"],
		stdwebhooks.Source{Name: "polar", Secrets: []string{standardKey, standardOther}})
	body := []byte(`{"type":"order.paid","timestamp":"2026-11-03T10:15:30Z","data":{"id":"ord_1","amount":2500}}`)

	for i, secret := range []string{standardKey, standardOther, standardKey} {
		rec := postStandard(e, "polar", "msg_2Lk", time.Now(), body, secret)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		require.JSONEq(t, fmt.Sprintf(`{"received":true,"duplicate":%t}`, i > 0), rec.Body.String())
	}
	var typ string
	var payload []byte
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT type, payload FROM inbox_events WHERE provider = 'polar' AND event_id = 'msg_2Lk'`).Scan(&typ, &payload))
	require.Equal(t, "order.paid", typ)
	require.Equal(t, body, payload)

	for name, rec := range map[string]*httptest.ResponseRecorder{
		"wrong secret":  postStandard(e, "polar", "msg_x", time.Now(), body, "whsec_"+base64.StdEncoding.EncodeToString([]byte("a guess"))),
		"stale":         postStandard(e, "polar", "msg_x", time.Now().Add(-6*time.Minute), body, standardKey),
		"future":        postStandard(e, "polar", "msg_x", time.Now().Add(6*time.Minute), body, standardKey),
		"not an object": postStandard(e, "polar", "msg_x", time.Now(), []byte(`[1]`), standardKey),
	} {
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", name, rec.Body.String())
	}
	require.Equal(t, 1, countRows(t, pool, `SELECT count(*) FROM inbox_events`))
}

// TestBatchKeepsARequestWhole: a request's events share a transaction
// whatever batch they land in. One the database refuses (a NUL in an id)
// fails its whole request, its good neighbour included, and nothing of it
// is stored; another request in the same batch commits as if it had been
// alone.
func TestBatchKeepsARequestWhole(t *testing.T) {
	t.Parallel()
	b := batchSetup(t)
	in := newBatch(t, webhook.BatchConfig{Pool: b.pool, Enqueue: b.jobs, MaxEvents: 8, MaxWait: 50 * time.Millisecond, Flushers: 1})
	bad := event(t, "evt_req_bad")
	bad.ID = "evt_\x00req_bad"
	requests := [][]webhook.Event{
		{event(t, "evt_req_a1"), bad},
		{event(t, "evt_req_b1"), event(t, "evt_req_b2")},
	}
	errs := make([]error, len(requests))
	dups := make([][]bool, len(requests))
	var wg sync.WaitGroup
	for i, r := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dups[i], errs[i] = in.IngestAll(context.Background(), r)
		}()
	}
	wg.Wait()
	require.ErrorIs(t, errs[0], webhook.ErrUnavailable)
	require.NoError(t, errs[1])
	require.Equal(t, []bool{false, false}, dups[1])
	require.Zero(t, b.count(t, `SELECT count(*) FROM inbox_events WHERE event_id = 'evt_req_a1'`), "the bad event's neighbour is not stored alone")
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM inbox_events`))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM (`+jobs.EventJobsSQL+`) j`))
}
