package stripe_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/provider"
	striperef "github.com/paygate/paygate/provider/stripe"
)

// TestListEventsPages: ListEvents reads one page a request, newest first,
// within [From, To), and its cursor leads to the next page until the last;
// each event is decoded from the bytes the API rendered (the account's
// version, not the webhook's), marked as read from the API; an item no
// event can be decoded from is named, not returned, and does not stop the
// list.
func TestListEventsPages(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	sim := stripesim.New(stripesim.Config{Seed: 11, Now: start, AccountAPIVersion: stripesim.LegacyAPIVersion})
	before := sim.Pay(stripesim.PayOpts{Amount: 100})
	sim.Advance(time.Hour)
	from := sim.Now()
	sim.Pay(stripesim.PayOpts{Amount: 200})
	sim.Advance(time.Minute)
	bad := sim.Emit(stripesim.EventCustomerCreated, map[string]any{"id": "cus_nul", "object": "customer", "name": "a\x00b"})
	sim.Advance(time.Minute)
	sim.Pay(stripesim.PayOpts{Amount: 300, ManualCapture: true})
	to := sim.Now() // the last payment's events are at To: outside
	sim.Pay(stripesim.PayOpts{Amount: 400})

	srv := sim.Start(t)
	api, err := striperef.NewAPI(striperef.APIConfig{APIKey: sim.APIKey(), URL: srv.URL, PageSize: 2, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	require.Equal(t, 30*24*time.Hour, api.Retention())

	var (
		got        []provider.Event
		unreadable []provider.UnreadableEvent
		after      string
		pages      int
	)
	for {
		page, err := api.ListEvents(context.Background(), provider.EventQuery{From: from, To: to, After: after})
		require.NoError(t, err)
		pages++
		got = append(got, page.Events...)
		unreadable = append(unreadable, page.Unreadable...)
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	var want []stripesim.Event
	for _, ev := range sim.Events() {
		if !ev.Created.Before(from) && ev.Created.Before(to) && ev.ID != bad.ID {
			want = append([]stripesim.Event{ev}, want...) // newest first
		}
	}
	require.Len(t, got, len(want))
	for i, ev := range got {
		require.Equal(t, want[i].ID, ev.ID)
		require.Equal(t, "stripe", ev.Provider)
		require.Equal(t, provider.SourceAPI, ev.Source)
		require.Equal(t, stripesim.LegacyAPIVersion, ev.APIVersion)
		require.JSONEq(t, string(want[i].APIPayload), string(ev.Payload), "the API's rendering, as the page carried it")
		require.Equal(t, want[i].Created, ev.Created)
	}
	require.Len(t, unreadable, 1)
	require.Equal(t, bad.ID, unreadable[0].ID)
	require.ErrorIs(t, unreadable[0].Err, provider.ErrNotAnEvent)
	for _, ev := range sim.EventsOf(before.ID) {
		for _, g := range got {
			require.NotEqual(t, ev.ID, g.ID)
		}
	}
	require.Equal(t, (len(want)+1+1)/2, pages, "one request a page of two")
	require.Equal(t, pages, sim.Requests()["GET /v1/events"])

	// A failing API is the caller's to wait out once the client's own
	// retries are spent; a bad request is refused.
	sim.FailNext(1, stripesim.FailOpts{Status: http.StatusServiceUnavailable})
	_, err = api.ListEvents(context.Background(), provider.EventQuery{From: from, To: to})
	require.ErrorIs(t, err, provider.ErrAPI)
	require.NotErrorIs(t, err, provider.ErrAPIRefused)
	_, err = api.ListEvents(context.Background(), provider.EventQuery{From: from, To: to, After: "evt_none"})
	require.ErrorIs(t, err, provider.ErrAPIRefused)
	wrongKey, err := striperef.NewAPI(striperef.APIConfig{APIKey: "sk_test_wrong", URL: srv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	_, err = wrongKey.ListEvents(context.Background(), provider.EventQuery{From: from, To: to})
	require.ErrorIs(t, err, provider.ErrAPIRefused, "a key Stripe refuses lists nothing until changed")
}
