package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

type testBundle struct {
	pool *pgxpool.Pool
	echo *echo.Echo
}

func setup(t *testing.T, ingester func(pool *pgxpool.Pool, jc *jobs.Client) webhook.Ingester, opts ...func(*webhook.Config)) *testBundle {
	t.Helper()
	pool := testdb.New(t)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)
	if ingester == nil {
		ingester = func(pool *pgxpool.Pool, jc *jobs.Client) webhook.Ingester {
			return &webhook.TxIngester{Pool: pool, Enqueue: jc}
		}
	}
	e, _ := api.NewEcho(api.Config{Pool: pool})
	cfg := webhook.Config{Ingester: ingester(pool, jc), Receivers: []provider.Receiver{stripe.NewReceiver([]string{secretA, secretB}, 0)}, MaxBodyBytes: 4096}
	for _, o := range opts {
		o(&cfg)
	}
	webhook.NewHandler(cfg).Register(e)
	return &testBundle{pool: pool, echo: e}
}

func eventBody(id string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2024-06-20","created":%d,"livemode":false,"type":"payment_intent.succeeded","data":{"object":{"id":"pi_%s","object":"payment_intent","amount":1000,"currency":"usd"}}}`,
		id, time.Now().Unix(), id))
}

func (b *testBundle) post(t testing.TB, body []byte, header string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set("Stripe-Signature", header)
	}
	rec := httptest.NewRecorder()
	b.echo.ServeHTTP(rec, req)
	return rec
}

func (b *testBundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func decode(t testing.TB, rec *httptest.ResponseRecorder) stripe.Acknowledgement {
	t.Helper()
	var r stripe.Acknowledgement
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r), rec.Body.String())
	return r
}

func TestStripeWebhookStoresRawEventAndJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	body := eventBody("evt_store")

	rec := b.post(t, body, sign(t, body, secretA, time.Now()))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Equal(t, stripe.Acknowledgement{Received: true, Duplicate: false}, decode(t, rec))

	var stored []byte
	var typ, status, apiVersion string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT payload, type, status, api_version FROM inbox_events WHERE provider = 'stripe' AND event_id = 'evt_store'`).
		Scan(&stored, &typ, &status, &apiVersion))
	require.Equal(t, body, stored, "the payload is stored byte for byte")
	require.Equal(t, "payment_intent.succeeded", typ)
	require.Equal(t, "received", status)
	require.Equal(t, "2024-06-20", apiVersion)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM (`+jobs.EventJobsSQL+`) j WHERE event_id = 'evt_store'`))

	rec = b.post(t, body, sign(t, body, secretB, time.Now()))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, stripe.Acknowledgement{Received: true, Duplicate: true}, decode(t, rec))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM inbox_events`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job`), "a duplicate enqueues nothing")
}

func TestStripeWebhookRejectionsStoreNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	body := eventBody("evt_reject")
	now := time.Now()
	for name, tc := range map[string]struct {
		body   []byte
		header string
		status int
	}{
		"wrong secret":  {body, sign(t, body, "whsec_wrong", now), 400},
		"tampered":      {bytes.Replace(body, []byte("1000"), []byte("9000"), 1), sign(t, body, secretA, now), 400},
		"stale":         {body, sign(t, body, secretA, now.Add(-10*time.Minute)), 400},
		"future":        {body, sign(t, body, secretA, now.Add(10*time.Minute)), 400},
		"missing":       {body, "", 400},
		"malformed":     {body, "t=x", 400},
		"not an event":  {[]byte(`{"id":"ch_1","object":"charge"}`), sign(t, []byte(`{"id":"ch_1","object":"charge"}`), secretA, now), 400},
		"not JSON":      {[]byte(`hello`), sign(t, []byte(`hello`), secretA, now), 400},
		"too large":     {bytes.Repeat([]byte("x"), 5000), sign(t, bytes.Repeat([]byte("x"), 5000), secretA, now), 413},
		"empty body":    {nil, sign(t, nil, secretA, now), 400},
		"no id or type": {[]byte(`{"object":"event","data":{"object":{}}}`), sign(t, []byte(`{"object":"event","data":{"object":{}}}`), secretA, now), 400},
	} {
		rec := b.post(t, tc.body, tc.header)
		require.Equal(t, tc.status, rec.Code, "%s: %s", name, rec.Body.String())
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), name)
		var p api.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), name)
		require.Equal(t, tc.status, p.Status, name)
		require.NotEmpty(t, p.Title, name)
		require.NotEmpty(t, p.Type, name)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM inbox_events`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job`))
}

func TestStripeWebhookMethodNotAllowed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rec := httptest.NewRecorder()
	b.echo.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/webhooks/stripe", nil))
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

func TestStripeWebhookWithoutSecretsAnswers503(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, func(c *webhook.Config) { c.Receivers = []provider.Receiver{stripe.NewReceiver(nil, 0)} })
	body := eventBody("evt_nosecret")
	rec := b.post(t, body, sign(t, body, secretA, time.Now()))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Zero(t, b.count(t, `SELECT count(*) FROM inbox_events`))
}

// TestConcurrentCopiesMakeOneEffect: twenty copies of one event racing in
// the same instant make one inbox row, one job and one duplicate:false, with
// either ingester (the batching one puts most copies in one batch).
func TestConcurrentCopiesMakeOneEffect(t *testing.T) {
	t.Parallel()
	for name, ingester := range ingesters() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(pool *pgxpool.Pool, jc *jobs.Client) webhook.Ingester {
				return ingester(t, pool, jc)
			})
			body := eventBody("evt_race")
			header := sign(t, body, secretA, time.Now())

			const copies = 20
			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
				mu    sync.Mutex
				fresh int
			)
			for range copies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					rec := b.post(t, body, header)
					if rec.Code != http.StatusOK {
						t.Errorf("status %d: %s", rec.Code, rec.Body.String())
						return
					}
					if !decode(t, rec).Duplicate {
						mu.Lock()
						fresh++
						mu.Unlock()
					}
				}()
			}
			close(start)
			wg.Wait()
			require.Equal(t, 1, fresh, "exactly one copy is new")
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM inbox_events`))
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM (`+jobs.EventJobsSQL+`) j`))
		})
	}
}

// failingEnqueuer inserts nothing and fails, after the inbox row was written
// in the same transaction: the commit must not happen.
type failingEnqueuer struct{}

var errEnqueue = errors.New("enqueue failed")

func (failingEnqueuer) InsertApplyEventsTx(context.Context, pgx.Tx, string, []string) error {
	return errEnqueue
}

// TestDurableBeforeAcknowledged: when the transaction fails, the provider
// gets no 2xx and the inbox has no row, so its retry is not mistaken for a
// duplicate; with either ingester.
func TestDurableBeforeAcknowledged(t *testing.T) {
	t.Parallel()
	for name, ingester := range ingesters() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(pool *pgxpool.Pool, _ *jobs.Client) webhook.Ingester {
				return ingester(t, pool, failingEnqueuer{})
			})
			body := eventBody("evt_durable")
			rec := b.post(t, body, sign(t, body, secretA, time.Now()))
			require.Equal(t, http.StatusServiceUnavailable, rec.Code)
			require.NotEmpty(t, rec.Header().Get("Retry-After"))
			require.Zero(t, b.count(t, `SELECT count(*) FROM inbox_events`))
			require.Zero(t, b.count(t, `SELECT count(*) FROM river_job`))
		})
	}
}

func TestDatabaseDownAnswers503Quickly(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)
	e, _ := api.NewEcho(api.Config{Pool: pool})
	webhook.NewHandler(webhook.Config{
		Ingester:  &webhook.TxIngester{Pool: pool, Enqueue: jc},
		Receivers: []provider.Receiver{stripe.NewReceiver([]string{secretA}, 0)},
	}).Register(e)

	body := eventBody("evt_down")
	req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", bytes.NewReader(body))
	req.Header.Set("Stripe-Signature", sign(t, body, secretA, time.Now()))
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.NotContains(t, rec.Body.String(), "127.0.0.1", "the database address is not revealed")
	require.True(t, strings.Contains(rec.Body.String(), "retry"))
}
