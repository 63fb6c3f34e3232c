package main

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
)

// TestStampedEventsAreCreatedAtTheirPace: each second's share of the
// events is created at that second, in the order wrk sends them, and the
// payloads say so.
func TestStampedEventsAreCreatedAtTheirPace(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	ds := stampedEvents(35, 0.1, start, 10)
	require.Len(t, ds, 35)
	ids := map[string]bool{}
	for i, d := range ds {
		require.Equal(t, start.Unix()+int64(i/10), d.created, "event %d", i)
		ev, err := stripe.DecodeEvent(d.payload)
		require.NoError(t, err)
		require.Equal(t, d.id, ev.ID)
		require.Equal(t, d.created, ev.Created.Unix())
		ids[d.id] = true
	}
	require.Len(t, ids, 35, "distinct events")
}

// TestStripeAccountListsSentEvents: paygate's own Stripe lister, as its
// sweep calls it, reads the account's events list page by page, newest
// first, each event once it is listAfter old and within the window asked;
// a cursor of an earlier run's account ends the window; a wrong key is
// refused as Stripe refuses it.
func TestStripeAccountListsSentEvents(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	var (
		mu  sync.Mutex
		now = start
	)
	account := newStripeAccount("sk_test_loadgen")
	account.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	setNow := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }

	warmup := stampedEvents(12, 0, account.nextStart(), 10)
	account.add(1, warmup)
	require.True(t, start.Add(2*time.Second).Equal(account.nextStart()), "after the warm-up's last second")
	setNow(start.Add(time.Minute))
	level := stampedEvents(35, 0.1, account.nextStart(), 10) // created at +60 s to +63 s
	account.add(2, level)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	stop, err := account.serve(addr)
	require.NoError(t, err)
	t.Cleanup(stop)
	api, err := stripe.NewAPI(stripe.APIConfig{APIKey: "sk_test_loadgen", URL: "http://" + addr, PageSize: 10})
	require.NoError(t, err)

	// list walks a window as the sweep does.
	list := func(from, to time.Time) []provider.Event {
		var out []provider.Event
		q := provider.EventQuery{From: from, To: to}
		for {
			page, err := api.ListEvents(t.Context(), q)
			require.NoError(t, err)
			require.Empty(t, page.Unreadable)
			out = append(out, page.Events...)
			if page.Next == "" {
				return out
			}
			q.After = page.Next
		}
	}
	idsOf := func(evs []provider.Event) []string {
		var ids []string
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
		return ids
	}
	idsOfDeliveries := func(ds []delivery) []string {
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.id)
		}
		return ids
	}
	newestFirst := func(evs []provider.Event) {
		for i := 1; i < len(evs); i++ {
			require.False(t, evs[i].Created.After(evs[i-1].Created), "newest first")
		}
	}

	// At +66 s: the level's events created up to +61 s are listed, with
	// the warm-up's; those of +62 s and +63 s are not yet.
	setNow(start.Add(66 * time.Second))
	got := list(start.Add(-time.Hour), start.Add(67*time.Second))
	newestFirst(got)
	require.ElementsMatch(t, append(idsOfDeliveries(warmup), idsOfDeliveries(level[:20])...), idsOf(got))
	for _, e := range got {
		require.Equal(t, provider.SourceAPI, e.Source)
	}
	pages, listed := account.served(2)
	require.Equal(t, 4, pages, "32 events, 10 a page")
	require.Equal(t, 20, listed)

	// Later, the window of the level alone: all of it.
	setNow(start.Add(70 * time.Second))
	got = list(start.Add(time.Minute), start.Add(71*time.Second))
	newestFirst(got)
	require.ElementsMatch(t, idsOfDeliveries(level), idsOf(got))
	require.Equal(t, level[len(level)-1].created, got[0].Created.Unix())

	page, err := api.ListEvents(t.Context(), provider.EventQuery{From: start, To: start.Add(71 * time.Second), After: "evt_of_an_earlier_run"})
	require.NoError(t, err)
	require.Empty(t, page.Events)
	require.Empty(t, page.Next, "the window ends")

	refused, err := stripe.NewAPI(stripe.APIConfig{APIKey: "sk_test_other", URL: "http://" + addr})
	require.NoError(t, err)
	_, err = refused.ListEvents(t.Context(), provider.EventQuery{From: start, To: start.Add(time.Hour)})
	require.ErrorIs(t, err, provider.ErrAPIRefused)
}
