package stripesim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/paygate/paygate/internal/stripesim"
)

// receiver stands in for paygate's webhook endpoint: it verifies the
// signature as stripe-go does, counts every copy it receives and answers
// {"received":true,"duplicate":bool}.
type receiver struct {
	mu      sync.Mutex
	secret  string
	copies  map[string]int
	failFor map[string]int // event id → attempts to answer 503 first
	srv     *httptest.Server
}

func newReceiver(t *testing.T, secret string) *receiver {
	t.Helper()
	rc := &receiver{secret: secret, copies: map[string]int{}, failFor: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ev, err := webhook.ConstructEventWithOptions(body, r.Header.Get("Stripe-Signature"), rc.secret,
		webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	if rc.failFor[ev.ID] > 0 {
		rc.failFor[ev.ID]--
		rc.mu.Unlock()
		http.Error(w, "database down", http.StatusServiceUnavailable)
		return
	}
	rc.copies[ev.ID]++
	dup := rc.copies[ev.ID] > 1
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]bool{"received": true, "duplicate": dup})
}

func (rc *receiver) count(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.copies[id]
}

func scenario(t *testing.T) *stripesim.Sim {
	t.Helper()
	sim := stripesim.New(stripesim.Config{Seed: 11, Now: day})
	p := sim.Pay(stripesim.PayOpts{Amount: 5000, FailFirst: 1})
	sim.Refund(p, 1000)
	sim.Dispute(p, 2000)
	sim.Ignored()
	return sim
}

func TestDeliverExactCopies(t *testing.T) {
	t.Parallel()
	sim := scenario(t)
	rc := newReceiver(t, sim.WebhookSecret())
	events := sim.Events()

	res, err := sim.Deliver(context.Background(), rc.srv.URL, events, &stripesim.DeliverOpts{Copies: 3, Concurrency: 4})
	require.NoError(t, err)
	require.Len(t, res, 3*len(events))
	dups := map[string]int{}
	for _, r := range res {
		require.True(t, r.Delivered)
		require.Equal(t, http.StatusOK, r.Status)
		require.Equal(t, []int{http.StatusOK}, r.StatusCodes)
		if r.Duplicate {
			dups[r.EventID]++
		}
	}
	for _, ev := range events {
		require.Equal(t, 3, rc.count(ev.ID), ev.Type)
		require.Equal(t, 2, dups[ev.ID], "the receiver's duplicate flag is reported")
	}
}

func TestDeliverRandomCopiesShuffledIsReproducible(t *testing.T) {
	t.Parallel()
	sim := scenario(t)
	events := sim.Events()
	opts := &stripesim.DeliverOpts{Copies: 4, RandomCopies: true, Shuffle: true, Seed: 99, Concurrency: 8}

	plan := func() ([]stripesim.DeliveryResult, *receiver) {
		rc := newReceiver(t, sim.WebhookSecret())
		res, err := sim.Deliver(context.Background(), rc.srv.URL, events, opts)
		require.NoError(t, err)
		return res, rc
	}
	res, rc := plan()
	sent := map[string]int{}
	for _, r := range res {
		sent[r.EventID]++
	}
	inOrder := true
	for i, r := range res {
		if r.EventID != events[min(i, len(events)-1)].ID {
			inOrder = false
		}
	}
	require.False(t, inOrder, "shuffled")
	multi := 0
	for _, ev := range events {
		require.GreaterOrEqual(t, sent[ev.ID], 1)
		require.LessOrEqual(t, sent[ev.ID], 4)
		require.Equal(t, sent[ev.ID], rc.count(ev.ID), "every copy arrived")
		if sent[ev.ID] > 1 {
			multi++
		}
	}
	require.Positive(t, multi, "some events were duplicated")

	again, _ := plan()
	require.Equal(t, len(res), len(again))
	for i := range res {
		require.Equal(t, res[i].EventID, again[i].EventID)
		require.Equal(t, res[i].Copy, again[i].Copy)
	}
}

func TestDeliverSkips(t *testing.T) {
	t.Parallel()
	sim := scenario(t)
	events := sim.Events()
	sim.SkipEvent(events[0].ID)
	rc := newReceiver(t, sim.WebhookSecret())

	res, err := sim.Deliver(context.Background(), rc.srv.URL, events, &stripesim.DeliverOpts{Skip: []string{events[1].ID}})
	require.NoError(t, err)
	require.Len(t, res, len(events)-2)
	require.Zero(t, rc.count(events[0].ID))
	require.Zero(t, rc.count(events[1].ID))
	require.Equal(t, 1, rc.count(events[2].ID))
	require.Len(t, sim.Deliverable(), len(events)-1)
}

func TestDeliverRetriesUntil2xx(t *testing.T) {
	t.Parallel()
	sim := scenario(t)
	ev := sim.Events()[0]
	rc := newReceiver(t, sim.WebhookSecret())
	rc.failFor[ev.ID] = 2

	res, err := sim.Deliver(context.Background(), rc.srv.URL, []stripesim.Event{ev}, &stripesim.DeliverOpts{Backoff: time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, []int{503, 503, 200}, res[0].StatusCodes)
	require.True(t, res[0].Delivered)
	require.False(t, res[0].Duplicate)

	rc.failFor[ev.ID] = 5
	res, err = sim.Deliver(context.Background(), rc.srv.URL, []stripesim.Event{ev}, &stripesim.DeliverOpts{MaxAttempts: 2, Backoff: time.Millisecond})
	require.ErrorIs(t, err, stripesim.ErrNotDelivered)
	require.Equal(t, []int{503, 503}, res[0].StatusCodes)
	require.False(t, res[0].Delivered)
	require.Equal(t, 1, rc.count(ev.ID))
}

func TestDeliverSignatureOverrides(t *testing.T) {
	t.Parallel()
	sim := scenario(t)
	ev := sim.Events()[0]
	rc := newReceiver(t, sim.WebhookSecret())
	one := []stripesim.Event{ev}
	quick := func(o stripesim.DeliverOpts) *stripesim.DeliverOpts {
		o.MaxAttempts, o.Backoff = 1, time.Millisecond
		return &o
	}

	res, err := sim.Deliver(context.Background(), rc.srv.URL, one, quick(stripesim.DeliverOpts{Secret: "whsec_wrong"}))
	require.ErrorIs(t, err, stripesim.ErrNotDelivered)
	require.Equal(t, http.StatusBadRequest, res[0].Status)

	stale := func() time.Time { return time.Now().Add(-time.Hour) }
	res, err = sim.Deliver(context.Background(), rc.srv.URL, one, quick(stripesim.DeliverOpts{Now: stale}))
	require.ErrorIs(t, err, stripesim.ErrNotDelivered)
	require.Contains(t, string(res[0].Body), "tolerance")

	res, err = sim.Deliver(context.Background(), rc.srv.URL, one, quick(stripesim.DeliverOpts{
		Secret: "whsec_retired", Signature: &stripesim.SignOpts{ExtraSecrets: []string{sim.WebhookSecret()}, V0: true},
	}))
	require.NoError(t, err, "rotation: one valid v1 among several is enough")
	require.True(t, res[0].Delivered)
	require.Zero(t, rc.count(sim.Events()[1].ID))
}

func TestDeliverStopsWithContext(t *testing.T) {
	t.Parallel()
	sim := scenario(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := sim.Deliver(ctx, "http://127.0.0.1:1/webhooks/stripe", sim.Events(), nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, res, len(sim.Events()))
	for _, r := range res {
		require.False(t, r.Delivered)
	}
}
