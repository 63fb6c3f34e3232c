package adyensim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
)

const basicAuth = "adyen-webhooks:s3cret"

// endpoint is POST /webhooks/adyen served by paygate's Receiver, answering
// as the HTTP layer does (401 unauthenticated, 400 not an event).
type endpoint struct {
	mu     sync.Mutex
	events []provider.Event
	reqs   []*http.Request
}

func serve(t *testing.T, sim *adyensim.Sim) (*endpoint, string) {
	t.Helper()
	rc, err := adyen.NewReceiver(adyen.Config{HMACKeys: keys(t, sim), BasicAuth: basicAuth})
	require.NoError(t, err)
	ep := &endpoint{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ep.mu.Lock()
		ep.reqs = append(ep.reqs, r)
		ep.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/webhooks/adyen" {
			http.NotFound(w, r)
			return
		}
		events, err := rc.Receive(r.Header, body, time.Now())
		switch {
		case errors.Is(err, provider.ErrUnauthenticated):
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ep.mu.Lock()
		ep.events = append(ep.events, events...)
		ep.mu.Unlock()
		a := rc.Acknowledge(events, make([]bool, len(events)))
		w.Header().Set("Content-Type", a.ContentType)
		w.WriteHeader(a.Status)
		_, _ = w.Write(a.Body)
	}))
	t.Cleanup(srv.Close)
	return ep, srv.URL + "/webhooks/adyen"
}

// answer reads a Deliver's outcome: answer(t)(sim.Deliver(…)).
func answer(t *testing.T) func(*http.Response, error) (int, string) {
	return func(res *http.Response, err error) (int, string) {
		t.Helper()
		require.NoError(t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(b)
	}
}

func TestItemsRoundTripThroughTheReceiver(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	ep, url := serve(t, sim)
	s := runScript(t, sim)

	status, body := answer(t)(sim.Deliver(context.Background(), url, basicAuth, s.items...))
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "[accepted]", body)

	require.Len(t, ep.reqs, 1)
	req := ep.reqs[0]
	require.Equal(t, "application/json", req.Header.Get("Content-Type"))
	user, pass, ok := req.BasicAuth()
	require.True(t, ok)
	require.Equal(t, basicAuth, user+":"+pass)

	require.Len(t, ep.events, len(s.items), "one event per item, all or nothing")
	for i, ev := range ep.events {
		it := s.items[i]
		require.Equal(t, "adyen", ev.Provider)
		require.Equal(t, it.PspReference+":"+it.EventCode+":"+it.Success, ev.ID)
		require.Equal(t, it.EventCode, ev.Type)
		require.False(t, ev.Livemode)
		require.Equal(t, winter.Add(time.Duration(i)*time.Minute), ev.Created, "dated by the simulator's clock")
		require.JSONEq(t, string(mustJSON(t, it)), string(ev.Payload), "the payload is the item as sent")
		got, err := adyen.DecodeItem(ev.Payload)
		require.NoError(t, err)
		require.Equal(t, it.MerchantReference, got.MerchantReference)
		require.Equal(t, it.OriginalReference, got.OriginalReference)
		require.Equal(t, it.Amount.Value, *got.Amount.Value)
	}
}

func TestDeliverRefusals(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	ep, url := serve(t, sim)
	_, good := sim.Authorise(1000, "EUR", "order-1", true)
	tampered := good
	tampered.Amount.Value = 1

	for _, tc := range []struct {
		name   string
		auth   string
		items  []adyensim.Item
		status int
	}{
		{"wrong Basic auth", "adyen-webhooks:nope", []adyensim.Item{good}, http.StatusUnauthorized},
		{"no Basic auth", "", []adyensim.Item{good}, http.StatusUnauthorized},
		{"a tampered item in the batch", basicAuth, []adyensim.Item{good, tampered}, http.StatusUnauthorized},
		{"the tampered item re-signed", basicAuth, []adyensim.Item{sim.Sign(tampered)}, http.StatusOK},
		{"no items", basicAuth, nil, http.StatusBadRequest},
	} {
		status, body := answer(t)(sim.Deliver(context.Background(), url, tc.auth, tc.items...))
		require.Equal(t, tc.status, status, "%s: %s", tc.name, body)
	}
	require.Len(t, ep.events, 1, "only the re-signed item was taken")

	wrongKey := adyensim.New(adyensim.Config{Seed: 1, Start: winter, HMACKey: []byte("another account's 32-byte key!!!")})
	_, it := wrongKey.Authorise(1000, "EUR", "order-1", true)
	status, _ := answer(t)(wrongKey.Deliver(context.Background(), url, basicAuth, it))
	require.Equal(t, http.StatusUnauthorized, status, "signed with another account's key")
}

func TestDeliverLiveAndEscapedSlashes(t *testing.T) {
	t.Parallel()
	sim := adyensim.New(adyensim.Config{Seed: 42, Start: winter, Live: true, EscapeSlashes: true})
	ep, url := serve(t, sim)
	_, it := sim.Authorise(1000, "EUR", "order/1", true)

	batch := string(sim.Batch(true, it))
	require.Contains(t, batch, `"live":"true"`)
	require.Contains(t, batch, `:1111:03\/2030"`)
	require.NotRegexp(t, `[^\\]/`, batch, "every '/' escaped")

	status, body := answer(t)(sim.Deliver(context.Background(), url, basicAuth, it))
	require.Equal(t, http.StatusOK, status, body)
	require.Len(t, ep.events, 1)
	require.True(t, ep.events[0].Livemode)
	require.Contains(t, string(ep.events[0].Payload), `order\/1`, "the payload keeps Adyen's bytes")
	got, err := adyen.DecodeItem(ep.events[0].Payload)
	require.NoError(t, err)
	require.Equal(t, "order/1", got.MerchantReference)
	require.Equal(t, "03/2030", got.AdditionalData["expiryDate"])

	var generic map[string]any
	require.NoError(t, json.Unmarshal([]byte(batch), &generic))
	require.True(t, strings.HasPrefix(batch, `{"live":"true","notificationItems":[{"NotificationRequestItem":{`))
}
