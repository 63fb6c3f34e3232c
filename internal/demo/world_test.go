package demo

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/stripesim"
)

// gateway stands in for paygate's webhook endpoints: it acknowledges
// everything, as paygate does once committed, and keeps what it got.
type gateway struct {
	mu     sync.Mutex
	stripe []string // event ids
	adyen  []string // eventCode:pspReference
}

func (g *gateway) start(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		g.mu.Lock()
		defer g.mu.Unlock()
		switch r.URL.Path {
		case "/webhooks/stripe":
			var ev struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(body, &ev); err != nil {
				t.Errorf("a Stripe webhook that is not an event: %v", err)
			}
			g.stripe = append(g.stripe, ev.ID)
			_, _ = io.WriteString(w, `{"received":true,"duplicate":false}`)
		case "/webhooks/adyen":
			var batch struct {
				NotificationItems []struct {
					NotificationRequestItem adyensim.Item
				} `json:"notificationItems"`
			}
			if err := json.Unmarshal(body, &batch); err != nil {
				t.Errorf("an Adyen webhook that is not a batch: %v", err)
			}
			for _, it := range batch.NotificationItems {
				g.adyen = append(g.adyen, it.NotificationRequestItem.EventCode+":"+it.NotificationRequestItem.PspReference)
			}
			_, _ = io.WriteString(w, "[accepted]")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func (g *gateway) adyenCodes() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.adyen...)
}

func testConfig(gatewayURL, journal string) Config {
	return Config{
		GatewayURL: gatewayURL, BaseURL: "http://127.0.0.1:12111", StripeAPIKey: "sk_test_demoworld",
		StripeWebhookSecret: "whsec_demo_world_test", AdyenAPIKey: "AQE_demo_world_test",
		AdyenMerchantAccount: "PaygateDev", AdyenHMACKey: []byte("0123456789abcdef0123456789abcdef"),
		JournalPath: journal,
	}
}

// TestJournalRestoresTheShop: a world started again from its journal holds
// the same objects as the one that wrote it, ids included: the day's
// payments, a refund Stripe's API made (whose idempotency key answers the
// same again), an Adyen refund and its outcome, and the endpoint's secret.
// Without it, a restarted make run would list none of the balance
// transactions paygate booked, and refuse refunds of its payments.
func TestJournalRestoresTheShop(t *testing.T) {
	t.Parallel()
	gw := &gateway{}
	gwSrv := gw.start(t)
	journal := filepath.Join(t.TempDir(), "world.jsonl")
	first, err := Open(testConfig(gwSrv.URL, journal))
	require.NoError(t, err)
	worldSrv := httptest.NewServer(first.Handler())
	defer worldSrv.Close()

	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	rep, err := first.PlayDay(t.Context(), day)
	require.NoError(t, err)
	require.Empty(t, rep.Stripe.Failed)
	require.Empty(t, rep.Adyen.Failed)
	require.Equal(t, rep.Stripe.Events, rep.Stripe.Accepted)
	require.Equal(t, rep.Adyen.Events, rep.Adyen.Accepted)
	require.Len(t, rep.Refunds, 3)

	// The refunds paygate's saga would submit: Stripe's form, Adyen's JSON.
	stripeRefund, adyenRefund := rep.Refunds[0], rep.Refunds[2]
	require.Equal(t, "stripe", stripeRefund.Provider)
	require.Equal(t, "adyen", adyenRefund.Provider)
	form := url.Values{"payment_intent": {stripeRefund.PaymentID}, "amount": {"1500"}, "metadata[paygate_refund_request]": {"rr_test"}}
	post := func(path, contentType, body string, header ...string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, worldSrv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", contentType)
		for i := 0; i < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	res, stripeAnswer := post("/v1/refunds", "application/x-www-form-urlencoded", form.Encode(),
		"Authorization", "Bearer sk_test_demoworld", "Idempotency-Key", "paygate-refund-rr_test")
	require.Equal(t, http.StatusOK, res.StatusCode, stripeAnswer)
	require.Eventually(t, func() bool {
		gw.mu.Lock()
		defer gw.mu.Unlock()
		return len(gw.stripe) == rep.Stripe.Events+4
	}, 10*time.Second, 20*time.Millisecond, "the refund's four events follow Stripe's answer")
	res, body := post(adyensim.CheckoutPath+"/payments/"+adyenRefund.PaymentID+"/refunds", "application/json",
		`{"merchantAccount":"PaygateDev","amount":{"currency":"GBP","value":2000},"reference":"rr_adyen"}`,
		"X-API-Key", "AQE_demo_world_test", "Idempotency-Key", "paygate-rr_adyen")
	require.Equal(t, http.StatusCreated, res.StatusCode, body)
	require.Eventually(t, func() bool {
		return len(gw.adyenCodes()) > 0 && strings.HasPrefix(gw.adyenCodes()[len(gw.adyenCodes())-1], "REFUND:")
	}, 10*time.Second, 20*time.Millisecond, "the REFUND follows the Checkout answer")
	res, body = post("/demo/receiver/secrets", "application/json", `{"secret":"whsec_cGF5Z2F0ZSBkZW1vIHJlY2VpdmVy"}`,
		"Authorization", "Bearer sk_test_demoworld")
	require.Equal(t, http.StatusNoContent, res.StatusCode, body)

	stripeTxns, stripeEvents := first.stripe.BalanceTransactions(), eventIDs(first.stripe.Events())
	adyenRefunds := first.adyen.CheckoutRefunds()
	require.Len(t, adyenRefunds, 1)
	require.True(t, adyenRefunds[0].Settled)
	require.NoError(t, first.Close())

	again, err := Open(testConfig(gwSrv.URL, journal))
	require.NoError(t, err)
	defer again.Close()
	require.Equal(t, stripeTxns, again.stripe.BalanceTransactions())
	require.Equal(t, stripeEvents, eventIDs(again.stripe.Events()))
	require.Equal(t, adyenRefunds, again.adyen.CheckoutRefunds())
	require.True(t, again.Receiver().Stats().Ready, "the endpoint's secret is kept")
	worldSrv.Config.Handler = again.Handler()
	res, replayed := post("/v1/refunds", "application/x-www-form-urlencoded", form.Encode(),
		"Authorization", "Bearer sk_test_demoworld", "Idempotency-Key", "paygate-refund-rr_test")
	require.Equal(t, http.StatusOK, res.StatusCode, replayed)
	require.Equal(t, "true", res.Header.Get("Idempotent-Replayed"), "the key is remembered: a retry makes no second refund")
	require.JSONEq(t, stripeAnswer, replayed)
}

func eventIDs(events []stripesim.Event) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = ev.ID
	}
	return out
}

// TestReceiverVerifiesPaygatesSignature: the shop's endpoint takes a
// message signed by paygate's signer with the endpoint's secret (or the
// secret it rotated from), once per id, and refuses another secret, a
// stale timestamp, or anything before it has a secret.
func TestReceiverVerifiesPaygatesSignature(t *testing.T) {
	t.Parallel()
	now := time.Now()
	rc := newReceiver(func() time.Time { return now })
	send := func(secret, id string, at time.Time) int {
		body := fmt.Sprintf(`{"id":%q,"type":"payment.succeeded","sequence":1,"data":{}}`, id)
		sig, err := delivery.Sign([]string{secret}, id, at, []byte(body))
		require.NoError(t, err)
		req := httptest.NewRequest(http.MethodPost, ReceiverPath, strings.NewReader(body))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", fmt.Sprint(at.Unix()))
		req.Header.Set("webhook-signature", sig)
		rec := httptest.NewRecorder()
		rc.ServeHTTP(rec, req)
		return rec.Code
	}
	const current, previous, other = "whsec_cGF5Z2F0ZSBkZW1vIHJlY2VpdmVyIHNlY3JldCAwMDE=", "whsec_b2xkIHNlY3JldCBvZiB0aGUgZW5kcG9pbnQgMDAwMDI=", "whsec_YW5vdGhlciBlbmRwb2ludCBzZWNyZXQgMDAwMDAwMDAz"

	require.Equal(t, http.StatusServiceUnavailable, send(current, "msg_1", now), "no secret yet: paygate retries")
	for _, s := range []string{previous, current} {
		added, err := rc.AddSecret(s)
		require.NoError(t, err)
		require.True(t, added)
	}
	added, err := rc.AddSecret(current)
	require.NoError(t, err)
	require.False(t, added, "a secret given twice is kept once")
	_, err = rc.AddSecret("sk_test_not_a_secret")
	require.ErrorIs(t, err, errSecret)

	require.Equal(t, http.StatusNoContent, send(current, "msg_1", now))
	require.Equal(t, http.StatusNoContent, send(previous, "msg_1", now), "a redelivery, under the rotated-out secret")
	require.Equal(t, http.StatusUnauthorized, send(other, "msg_2", now))
	require.Equal(t, http.StatusUnauthorized, send(current, "msg_3", now.Add(-10*time.Minute)))
	st := rc.Stats()
	require.Equal(t, 1, st.Messages)
	require.Equal(t, map[string]int{"payment.succeeded": 1}, st.ByType)
	require.Equal(t, 2, st.Deliveries)
	require.Equal(t, 2, st.Rejected)
}

// TestControlNeedsTheKey: the routes that play days and set secrets take
// the Stripe API key; the provider APIs keep their own checks.
func TestControlNeedsTheKey(t *testing.T) {
	t.Parallel()
	w, err := Open(testConfig("http://127.0.0.1:9", ""))
	require.NoError(t, err)
	defer w.Close()
	h := w.Handler()
	for _, tc := range []struct{ method, path, auth string }{
		{http.MethodGet, "/demo", ""},
		{http.MethodPost, "/demo/days", "Bearer sk_test_other"},
		{http.MethodPost, "/demo/receiver/secrets", ""},
		{http.MethodGet, "/demo/receiver", "Basic c2tfdGVzdF9kZW1vd29ybGQ6"},
		{http.MethodGet, "/v1/balance_transactions", ""},
	} {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(`{"date":"2020-01-01"}`))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusUnauthorized, rec.Code, "%s %s", tc.method, tc.path)
	}
	req := httptest.NewRequest(http.MethodGet, "/demo", nil)
	req.Header.Set("Authorization", "Bearer sk_test_demoworld")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	var info Info
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &info))
	require.Equal(t, WorldName, info.World)
	require.Equal(t, "http://127.0.0.1:12111"+ReceiverPath, info.ReceiverURL)
}

// TestDaysSpeakTheShopsReferences: every payment of a day names its order
// and its shopper; the orders are the shop's, numbered on from one day to
// the next, each paid once except the one the day charges twice, whose
// extra payment is among the refunds. What the providers send carries the
// same words: Stripe's objects the order_id, the Customer and the
// description, Adyen's AUTHORISATION the merchantReference, the
// shopperReference and the cart. A shopper keeps one Stripe Customer
// across days.
func TestDaysSpeakTheShopsReferences(t *testing.T) {
	t.Parallel()
	gw := &gateway{}
	w, err := Open(testConfig(gw.start(t).URL, ""))
	require.NoError(t, err)
	defer w.Close()
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)

	type stripeObject struct {
		ID          string            `json:"id"`
		Object      string            `json:"object"`
		Customer    *string           `json:"customer"`
		Description *string           `json:"description"`
		Metadata    map[string]string `json:"metadata"`
	}
	customers := map[string]string{} // a Stripe Customer → the order of its first payment
	var orders []string
	for d := range 2 {
		before := len(w.stripe.Events())
		rep, err := w.PlayDay(t.Context(), day)
		require.NoError(t, err)
		require.Len(t, rep.Payments, 19)

		paid := map[string][]string{}
		for _, p := range rep.Payments {
			require.Regexp(t, `^ord-1\d{3}$`, p.Reference, p.ID)
			require.NotEmpty(t, p.Customer, p.ID)
			if p.Provider == "stripe" {
				require.Regexp(t, `^cus_`, p.Customer)
			} else {
				require.Regexp(t, `^cust-[a-z]+$`, p.Customer)
			}
			paid[p.Reference] = append(paid[p.Reference], p.ID)
		}
		require.Len(t, paid, ordersPerDay, "every order of the day numbered once")
		for n := 1; n <= ordersPerDay; n++ {
			ref := fmt.Sprintf("ord-%d", 1000+d*ordersPerDay+n)
			require.Contains(t, paid, ref, "day %d numbers on from the day before", d+1)
			orders = append(orders, ref)
		}
		require.Len(t, rep.DoubleCharges, 1)
		twice := rep.DoubleCharges[0]
		require.Equal(t, paid[twice.Reference], twice.Payments, "the order charged twice")
		require.Len(t, twice.Payments, 2)
		require.Equal(t, twice.Payments[1], twice.Extra)
		for ref, ids := range paid {
			if ref != twice.Reference {
				require.Len(t, ids, 1, "%s is paid once", ref)
			}
		}
		var extra *Refund
		for i, r := range rep.Refunds {
			require.Equal(t, paymentOf(t, rep, r.PaymentID).Reference, r.Reference)
			if r.PaymentID == twice.Extra {
				extra = &rep.Refunds[i]
			}
		}
		require.NotNil(t, extra, "the extra payment is refunded")
		require.Empty(t, extra.Amount, "in full")
		require.Equal(t, "duplicate", extra.Reason)
		require.Contains(t, extra.Note, twice.Reference)

		created := 0
		for _, ev := range w.stripe.Events()[before:] {
			var env struct {
				Data struct {
					Object stripeObject `json:"object"`
				} `json:"data"`
			}
			require.NoError(t, json.Unmarshal(ev.Payload, &env))
			obj := env.Data.Object
			switch obj.Object {
			case "customer":
				created++
			case "payment_intent", "charge":
				p := paymentOf(t, rep, ev.PaymentIntentID)
				require.Equal(t, p.Reference, obj.Metadata["order_id"], "%s %s", ev.Type, obj.ID)
				require.Equal(t, "cart-"+strings.TrimPrefix(p.Reference, "ord-"), obj.Metadata["cart_id"])
				require.NotNil(t, obj.Customer, "%s %s", ev.Type, obj.ID)
				require.Equal(t, p.Customer, *obj.Customer)
				require.NotNil(t, obj.Description)
				require.Regexp(t, `^Order `+p.Reference+`: \S`, *obj.Description)
				if _, ok := customers[p.Customer]; !ok {
					customers[p.Customer] = p.Reference
				}
			}
		}
		if d == 0 {
			require.Equal(t, 13, created, "a Customer per Stripe shopper, at their first payment")
		} else {
			require.Zero(t, created, "the shoppers are known: their Customers are kept")
		}
	}
	require.Len(t, customers, 13)
	require.Len(t, orders, 2*ordersPerDay)

	// Adyen's AUTHORISATIONs name their order, shopper and cart.
	items, payments, _ := adyenDay(adyensim.New(adyensim.Config{Seed: 7}), newShop(), day)
	auths := 0
	for _, it := range items {
		if it.EventCode != adyensim.EventAuthorisation {
			require.NotContains(t, it.AdditionalData, "shopperReference", it.EventCode)
			continue
		}
		p := payments[auths]
		auths++
		require.Equal(t, p.ID, it.PspReference)
		require.Equal(t, p.Reference, it.MerchantReference)
		require.Equal(t, p.Customer, it.AdditionalData["shopperReference"])
		require.Equal(t, "cart-"+strings.TrimPrefix(p.Reference, "ord-"), it.AdditionalData["metadata.cart_id"])
	}
	require.Equal(t, 5, auths)
}

func paymentOf(t *testing.T, rep DayReport, id string) Payment {
	t.Helper()
	for _, p := range rep.Payments {
		if p.ID == id {
			return p
		}
	}
	t.Fatalf("no payment %s in the day's report", id)
	return Payment{}
}

// TestInfoCountsTheShopsOrders: GET /demo says how many orders the shop
// has numbered, the same after a restart from its journal, so that a
// client can tell whether paygate's database holds this shop's orders.
func TestInfoCountsTheShopsOrders(t *testing.T) {
	t.Parallel()
	gw := &gateway{}
	gwSrv := gw.start(t)
	journal := filepath.Join(t.TempDir(), "world.jsonl")
	orders := func(w *World) int {
		srv := httptest.NewServer(w.Handler())
		defer srv.Close()
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/demo", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk_test_demoworld")
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		var info Info
		require.NoError(t, json.NewDecoder(res.Body).Decode(&info))
		return info.Orders
	}
	w, err := Open(testConfig(gwSrv.URL, journal))
	require.NoError(t, err)
	require.Zero(t, orders(w))
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	rep, err := w.PlayDay(t.Context(), day)
	require.NoError(t, err)
	last := OrderReference(orders(w))
	require.Equal(t, "ord-1018", last)
	require.Equal(t, last, rep.DoubleCharges[0].Reference, "the day's last order is its double charge: always paid")
	require.NoError(t, w.Close())

	restored, err := Open(testConfig(gwSrv.URL, journal))
	require.NoError(t, err)
	defer restored.Close()
	require.Equal(t, ordersPerDay, orders(restored))
}
