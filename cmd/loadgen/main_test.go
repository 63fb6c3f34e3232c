package main

import (
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

// TestRequestsAreSignedStripeDeliveries: what the load generator sends over
// its raw connections is a valid HTTP request whose body paygate's own
// verifier accepts and decodes, every event of the mix is sent and some
// twice, in both the closed and the open loop.
func TestRequestsAreSignedStripeDeliveries(t *testing.T) {
	t.Parallel()
	const secret = "whsec_loadgen_test"
	var (
		mu  sync.Mutex
		got []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = stripe.VerifySignature(body, r.Header.Get("Stripe-Signature"), []string{secret}, time.Now(), webhook.DefaultTolerance)
		}
		var e webhook.Event
		if err == nil {
			e, err = stripe.DecodeEvent(body)
		}
		if err != nil || r.URL.Path != "/webhooks/stripe" {
			http.Error(w, "refused", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, e.ID)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"received":true,"duplicate":false}`)
	}))
	t.Cleanup(srv.Close)
	target, err := url.Parse(srv.URL + "/webhooks/stripe")
	require.NoError(t, err)

	rng := mrand.New(mrand.NewPCG(1, 2))
	sim := stripesim.New(stripesim.Config{Seed: 3, WebhookSecret: secret})
	events := generate(sim, rng, 40, 0.5)
	sends := withCopies(events, rng, 0.5)
	require.Greater(t, len(sends), len(events))
	seen := map[string]int{}
	for _, d := range sends {
		seen[d.id]++
	}
	require.Len(t, seen, len(events), "every event is sent")
	for id, n := range seen {
		require.LessOrEqual(t, n, 2, id)
	}

	snd := newSender(target)
	t.Cleanup(snd.close)
	res := closedLoop(snd, sign(sends, secret, target), 4)
	require.Zero(t, res.non2xx+res.errors, res.firstBad)
	require.Len(t, got, len(sends))
	lat := openLoop(snd, sign(events[:20], secret, target), 200)
	require.Zero(t, lat.non2xx+lat.errors, lat.firstBad)
	require.Len(t, lat.latencies, 20)
}
