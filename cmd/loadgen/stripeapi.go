package main

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// stripeAccount is the Stripe account whose events list a paygate's
// missed-event sweep reads in make bench's sweep pairs: it serves
// GET /v1/events, in Stripe's shape, over the events the run sends, so
// that the sweep lists exactly what paygate received and finds nothing
// missing; its whole cost to paygate is then the listing and the inbox
// lookups.
//
// An event is listed only listAfter after its created time, as Stripe
// lists an event a little after it is made. The events are stamped at
// the pace they are expected to be sent (stampedEvents), so the lag
// keeps the sweep from listing, and ingesting as missing, an event wrk
// has not sent yet.
//
// It is written here rather than served by stripesim's Handler, which
// lists one simulator's events: a run's events come from a simulator a
// second's share (one simulator's mixes would repeat order references,
// which PayMix numbers from 0 each time), and the account shares the
// machine's cores with paygate, so a page costs it a binary search and
// the copy of its payloads, not a pass over every event.
type stripeAccount struct {
	apiKey    string
	listAfter time.Duration
	now       func() time.Time

	mu     sync.Mutex
	events []accountEvent // by created, then by when added
	index  map[string]int // event id → position in events
	listed map[int]int    // per batch: events served in list pages
	pages  int            // list pages served
	last   int64          // the latest created time
}

type accountEvent struct {
	delivery
	batch int
}

// stripeListLag is how long after its created time an event is listed.
const stripeListLag = 5 * time.Second

func newStripeAccount(apiKey string) *stripeAccount {
	return &stripeAccount{apiKey: apiKey, listAfter: stripeListLag, now: time.Now,
		index: map[string]int{}, listed: map[int]int{}}
}

// nextStart is when the next events may be stamped from: now, or after
// the latest event, so that the list keeps to the order events were
// made in.
func (a *stripeAccount) nextStart() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maxTime(a.now(), time.Unix(a.last+1, 0))
}

func maxTime(x, y time.Time) time.Time {
	if x.After(y) {
		return x
	}
	return y
}

// add makes ds the account's, as batch.
func (a *stripeAccount) add(batch int, ds []delivery) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range ds {
		a.events = append(a.events, accountEvent{delivery: d, batch: batch})
		a.last = max(a.last, d.created)
	}
	// Batches are stamped after one another (nextStart): sorting only
	// orders a batch's seconds, which stampedEvents already made in order.
	slices.SortStableFunc(a.events, func(x, y accountEvent) int { return int(x.created - y.created) })
	for i, e := range a.events {
		a.index[e.id] = i
	}
}

// served is how many list pages the account answered and how many of
// batch's events they carried.
func (a *stripeAccount) served(batch int) (pages, listed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pages, a.listed[batch]
}

// serve answers on addr until stop is called; it returns once the
// address is bound.
func (a *stripeAccount) serve(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// ServeHTTP answers GET /v1/events as Stripe does for the parameters
// paygate's lister sends (limit, created[gte|gt|lte|lt], starting_after):
// {"object":"list","data":[…],"has_more":…,"url":"/v1/events"}, newest
// first, the key required as a Bearer token or the basic-auth user.
func (a *stripeAccount) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet || r.URL.Path != "/v1/events" {
		stripeError(w, http.StatusNotFound, "Unrecognized request URL ("+r.Method+": "+r.URL.Path+").")
		return
	}
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if user, _, ok := r.BasicAuth(); ok {
		key = user
	}
	if subtle.ConstantTimeCompare([]byte(key), []byte(a.apiKey)) != 1 {
		stripeError(w, http.StatusUnauthorized, "Invalid API Key provided.")
		return
	}
	q := r.URL.Query()
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			stripeError(w, http.StatusBadRequest, "limit must be between 1 and 100.")
			return
		}
		limit = n
	}
	from, to, err := createdRange(q.Get)
	if err != nil {
		stripeError(w, http.StatusBadRequest, err.Error())
		return
	}
	body := a.page(from, to, q.Get("starting_after"), limit)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// createdRange reads the created filters as [from, to), Unix seconds.
func createdRange(get func(string) string) (from, to int64, err error) {
	from, to = 0, 1<<62
	for _, f := range []struct {
		name  string
		apply func(int64)
	}{
		{"created[gte]", func(v int64) { from = max(from, v) }},
		{"created[gt]", func(v int64) { from = max(from, v+1) }},
		{"created[lt]", func(v int64) { to = min(to, v) }},
		{"created[lte]", func(v int64) { to = min(to, v+1) }},
	} {
		if v := get(f.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, 0, errors.New("Invalid integer: " + v)
			}
			f.apply(n)
		}
	}
	return from, to, nil
}

// page is one page of the events created in [from, to) and listable now,
// newest first, after the cursor. A cursor the account does not know is
// one of an earlier run's account, whose events went with its process:
// everything here is newer than that place, so the page is empty and the
// last, and a window a sweep left open then ends.
func (a *stripeAccount) page(from, to int64, cursor string, limit int) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pages++
	to = min(to, a.now().Add(-a.listAfter).Unix()+1)
	lo, _ := slices.BinarySearchFunc(a.events, from, func(e accountEvent, t int64) int { return int(e.created - t) })
	hi, _ := slices.BinarySearchFunc(a.events, to, func(e accountEvent, t int64) int { return int(e.created - t) })
	if cursor != "" {
		i, ok := a.index[cursor]
		if !ok {
			hi = lo
		} else {
			hi = min(hi, i)
		}
	}
	end := max(lo, hi-limit)
	var b bytes.Buffer
	b.WriteString(`{"object":"list","data":[`)
	for i := hi - 1; i >= end; i-- {
		if i < hi-1 {
			b.WriteByte(',')
		}
		b.Write(a.events[i].payload)
		a.listed[a.events[i].batch]++
	}
	b.WriteString(`],"has_more":` + strconv.FormatBool(end > lo) + `,"url":"/v1/events"}`)
	return b.Bytes()
}

func stripeError(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	msg, _ := json.Marshal(message)
	_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":` + string(msg) + `}}`))
}
