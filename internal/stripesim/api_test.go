package stripesim_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/paygate/paygate/internal/stripesim"
)

// stripeClient is stripe-go's real client pointed at url, without retries
// or logging.
func stripeClient(key, url string) *client.API {
	cfg := &stripe.BackendConfig{
		URL:               stripe.String(url),
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	}
	return client.New(key, &stripe.Backends{
		API:     stripe.GetBackendWithConfig(stripe.APIBackend, cfg),
		Connect: stripe.GetBackendWithConfig(stripe.ConnectBackend, cfg),
		Uploads: stripe.GetBackendWithConfig(stripe.UploadsBackend, cfg),
	})
}

// threeDays scripts activity on 2025-03-13, 14 and 15 (UTC), several
// records per second so pages split ties on created.
func threeDays(t *testing.T) (*stripesim.Sim, map[string]bool) {
	t.Helper()
	sim := stripesim.New(stripesim.Config{APIKey: "sk_test_recon", Seed: 3})
	onDay14 := map[string]bool{}
	for d := 13; d <= 15; d++ {
		sim.SetNow(time.Date(2025, 3, d, 0, 0, 0, 0, time.UTC))
		for i := range 6 {
			p := sim.Pay(stripesim.PayOpts{Amount: int64(1000 + i), Currency: "usd"})
			if i%2 == 0 {
				sim.Refund(p, 100)
			} else {
				sim.Advance(time.Hour)
			}
		}
		sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Amount: -75})
		sim.SetNow(time.Date(2025, 3, d, 23, 59, 59, 0, time.UTC))
		sim.Payout(500, "usd")
		if d == 14 {
			for _, bt := range sim.BalanceTransactions() {
				if time.Unix(bt.Created, 0).UTC().Day() == 14 {
					onDay14[bt.ID] = true
				}
			}
		}
	}
	return sim, onDay14
}

func countRequests(h http.Handler, n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	})
}

func TestListBalanceTransactionsWithStripeGo(t *testing.T) {
	t.Parallel()
	sim, want := threeDays(t)
	require.Len(t, want, 11, "6 charges, 3 refunds, a fee and a payout")
	var requests atomic.Int64
	srv := httptest.NewServer(countRequests(sim.Handler(), &requests))
	t.Cleanup(srv.Close)
	sc := stripeClient(sim.APIKey(), srv.URL)

	params := &stripe.BalanceTransactionListParams{CreatedRange: &stripe.RangeQueryParams{
		GreaterThanOrEqual: time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC).Unix(),
		LesserThan:         time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC).Unix(),
	}}
	params.Limit = stripe.Int64(3)
	it := sc.BalanceTransactions.List(params)
	seen := map[string]int{}
	var last int64 = 1 << 62
	for it.Next() {
		bt := it.BalanceTransaction()
		seen[bt.ID]++
		require.LessOrEqual(t, bt.Created, last, "newest first")
		last = bt.Created
		require.Equal(t, "balance_transaction", bt.Object)
		local, ok := sim.BalanceTransaction(bt.ID)
		require.True(t, ok)
		require.Equal(t, local.Amount, bt.Amount)
		require.Equal(t, local.Fee, bt.Fee)
		require.Equal(t, local.Net, bt.Net)
		require.Equal(t, local.Source, func() string {
			if bt.Source == nil {
				return ""
			}
			return bt.Source.ID
		}())
	}
	require.NoError(t, it.Err())
	require.Len(t, seen, len(want))
	for id, n := range seen {
		require.True(t, want[id], "%s is outside the range", id)
		require.Equal(t, 1, n, "%s came back %d times", id, n)
	}
	require.Equal(t, int64(4), requests.Load(), "11 items in pages of 3")

	// Every page size, so every way the last page can fall.
	for limit := int64(1); limit <= 12; limit++ {
		params.Limit = stripe.Int64(limit)
		it := sc.BalanceTransactions.List(params)
		got := map[string]int{}
		for it.Next() {
			got[it.BalanceTransaction().ID]++
		}
		require.NoError(t, it.Err())
		require.Len(t, got, len(want), "limit %d", limit)
		for id, n := range got {
			require.True(t, want[id] && n == 1, "limit %d: %s came back %d times", limit, id, n)
		}
	}

	// Every transaction, default page size, exactly once.
	all := map[string]int{}
	it = sc.BalanceTransactions.List(&stripe.BalanceTransactionListParams{})
	for it.Next() {
		all[it.BalanceTransaction().ID]++
	}
	require.NoError(t, it.Err())
	require.Len(t, all, len(sim.BalanceTransactions()))
	for id, n := range all {
		require.Equal(t, 1, n, id)
	}
}

func TestListBackwardsWithEndingBefore(t *testing.T) {
	t.Parallel()
	sim, _ := threeDays(t)
	srv := sim.Start(t)
	sc := stripeClient(sim.APIKey(), srv.URL)
	txns := sim.BalanceTransactions()
	oldest := txns[0]

	want := make([]string, 0, len(txns)-1)
	for _, bt := range txns[1:] {
		want = append(want, bt.ID)
	}
	for limit := int64(1); limit <= 9; limit++ {
		params := &stripe.BalanceTransactionListParams{}
		params.EndingBefore = stripe.String(oldest.ID)
		params.Limit = stripe.Int64(limit)
		it := sc.BalanceTransactions.List(params)
		var got []string
		for it.Next() {
			got = append(got, it.BalanceTransaction().ID)
		}
		require.NoError(t, it.Err())
		require.Equal(t, want, got, "limit %d: walking up from the oldest yields every newer one once, oldest first", limit)
	}
}

func TestListFiltersByPayout(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{Seed: 9})
	p1 := sim.Pay(stripesim.PayOpts{Amount: 1000})
	eur := sim.Pay(stripesim.PayOpts{Amount: 1000, Currency: "eur"})
	po1 := sim.Payout(900, "usd")
	p2 := sim.Pay(stripesim.PayOpts{Amount: 2000})
	po2 := sim.Payout(1900, "usd")
	sc := stripeClient(sim.APIKey(), sim.Start(t).URL)

	list := func(po string) []string {
		var ids []string
		it := sc.BalanceTransactions.List(&stripe.BalanceTransactionListParams{Payout: stripe.String(po)})
		for it.Next() {
			ids = append(ids, it.BalanceTransaction().ID)
		}
		require.NoError(t, it.Err())
		return ids
	}
	require.Equal(t, []string{po1.BalanceTransactionID, p1.BalanceTransactionID}, list(po1.ID))
	require.Equal(t, []string{po2.BalanceTransactionID, p2.BalanceTransactionID}, list(po2.ID))
	require.NotContains(t, append(list(po1.ID), list(po2.ID)...), eur.BalanceTransactionID)
}

func TestListEventsWithStripeGo(t *testing.T) {
	t.Parallel()
	sim, _ := threeDays(t)
	skipped := sim.Events()[4]
	sim.SkipEvent(skipped.ID)
	sc := stripeClient(sim.APIKey(), sim.Start(t).URL)

	params := &stripe.EventListParams{}
	params.Limit = stripe.Int64(7)
	it := sc.Events.List(params)
	seen := map[string]int{}
	for it.Next() {
		ev := it.Event()
		seen[ev.ID]++
		local, ok := sim.Event(ev.ID)
		require.True(t, ok)
		require.Equal(t, string(local.Type), string(ev.Type))
		require.Equal(t, local.Created.Unix(), ev.Created)
		require.Equal(t, "2024-06-20", ev.APIVersion)
	}
	require.NoError(t, it.Err())
	require.Len(t, seen, len(sim.Events()))
	require.Equal(t, 1, seen[skipped.ID], "a skipped event is still listed")
	for id, n := range seen {
		require.Equal(t, 1, n, id)
	}

	params = &stripe.EventListParams{Type: stripe.String("refund.*")}
	params.Limit = stripe.Int64(2)
	params.CreatedRange = &stripe.RangeQueryParams{GreaterThan: time.Date(2025, 3, 13, 23, 0, 0, 0, time.UTC).Unix()}
	it = sc.Events.List(params)
	n := 0
	for it.Next() {
		n++
		require.Contains(t, []stripe.EventType{"refund.created", "refund.updated"}, it.Event().Type)
	}
	require.NoError(t, it.Err())
	require.Equal(t, 2*2*3, n, "two days of 3 refunds, created and updated")

	got, err := sc.Events.Get(skipped.ID, nil)
	require.NoError(t, err)
	require.Equal(t, skipped.ID, got.ID)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(got.Data.Raw, &obj))
	require.Equal(t, skipped.ObjectID, obj["id"])
}

func TestAPIAuthAndErrors(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{APIKey: "sk_test_right_key_1234", Seed: 5})
	sim.Pay(stripesim.PayOpts{Amount: 100})
	srv := sim.Start(t)

	_, err := stripeClient("sk_test_wrong_key_9999", srv.URL).Events.Get(sim.Events()[0].ID, nil)
	var serr *stripe.Error
	require.True(t, errors.As(err, &serr), "%v", err)
	require.Equal(t, http.StatusUnauthorized, serr.HTTPStatusCode)
	require.Equal(t, stripe.ErrorTypeInvalidRequest, serr.Type)
	require.NotContains(t, serr.Msg, "wrong_key", "the key is redacted")

	_, err = stripeClient(sim.APIKey(), srv.URL).Events.Get("evt_missing", nil)
	require.True(t, errors.As(err, &serr))
	require.Equal(t, http.StatusNotFound, serr.HTTPStatusCode)
	require.Equal(t, stripe.ErrorCodeResourceMissing, serr.Code)

	get := func(path string, auth func(*http.Request)) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if auth != nil {
			auth(req)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
		return res.StatusCode, body
	}
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+sim.APIKey()) }
	basic := func(r *http.Request) { r.SetBasicAuth(sim.APIKey(), "") }

	code, body := get("/v1/balance_transactions", nil)
	require.Equal(t, http.StatusUnauthorized, code)
	require.Equal(t, "invalid_request_error", body["error"].(map[string]any)["type"])
	require.NotEmpty(t, body["error"].(map[string]any)["message"])

	code, body = get("/v1/balance_transactions", basic)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "list", body["object"])
	require.Equal(t, "/v1/balance_transactions", body["url"])
	require.Equal(t, false, body["has_more"])
	require.Len(t, body["data"], 1)

	for _, bad := range []string{
		"/v1/events?limit=0",
		"/v1/events?limit=101",
		"/v1/events?limit=ten",
		"/v1/events?created[gte]=yesterday",
		"/v1/events?starting_after=evt_nope",
		"/v1/events?starting_after=a&ending_before=b",
		"/v1/balance_transactions?payout=po_nope",
		"/v1/balance_transactions?colour=blue",
	} {
		code, body = get(bad, bearer)
		require.Equal(t, http.StatusBadRequest, code, bad)
		require.Equal(t, "invalid_request_error", body["error"].(map[string]any)["type"], bad)
	}
	code, _ = get("/v1/charges", bearer)
	require.Equal(t, http.StatusNotFound, code)
}

func TestListOrdersByCreatedWhenTheClockGoesBack(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{Seed: 12, Now: day})
	late := sim.Pay(stripesim.PayOpts{Amount: 100})
	sim.SetNow(day.Add(-time.Hour))
	early := sim.Pay(stripesim.PayOpts{Amount: 200})
	sc := stripeClient(sim.APIKey(), sim.Start(t).URL)

	var got []string
	it := sc.BalanceTransactions.List(&stripe.BalanceTransactionListParams{})
	for it.Next() {
		got = append(got, it.BalanceTransaction().ID)
	}
	require.NoError(t, it.Err())
	require.Equal(t, []string{late.BalanceTransactionID, early.BalanceTransactionID}, got, "newest created first, not newest inserted")
}
