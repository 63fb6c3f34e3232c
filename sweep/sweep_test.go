package sweep_test

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	stripego "github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/sweep"
	"github.com/paygate/paygate/webhook"
)

// clock is a settable clock for the sweeper, the wall clock until set.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) Skip(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

type setupOpts struct {
	every    time.Duration // > 0: the periodic sweep runs in the world's workers
	pageSize int64
	retries  int64 // stripe-go's retries
	lister   func(provider.EventLister) provider.EventLister
	// beforeStart runs once the webhook endpoint is up, before the
	// workers start.
	beforeStart func(b *testBundle)
}

type testBundle struct {
	sim      *stripesim.Sim
	world    *worldtest.World
	sweeper  *sweep.Sweeper
	metrics  *prometheus.Registry
	now      *clock
	endpoint string // the webhook endpoint's URL
}

// setup is a world (a database with running workers and the webhook
// endpoint) whose sweeper lists sim's events: pages of 100 unless told, no
// stripe-go retries unless told (so that failures reach the sweeper),
// backoff of milliseconds. With o.every the periodic sweep runs in the
// world's workers.
func setup(t *testing.T, sim *stripesim.Sim, o setupOpts) *testBundle {
	t.Helper()
	srv := sim.Start(t)
	api, err := stripe.NewAPI(stripe.APIConfig{APIKey: sim.APIKey(), URL: srv.URL, PageSize: o.pageSize,
		MaxNetworkRetries: stripego.Int64(o.retries)})
	require.NoError(t, err)
	b := &testBundle{sim: sim, metrics: prometheus.NewRegistry(), now: &clock{}}
	var lister provider.EventLister = api
	if o.lister != nil {
		lister = o.lister(api)
	}
	pool, url := testdb.NewWithURL(t)
	var client *jobs.Client
	b.sweeper = sweep.New(sweep.Config{Pool: pool, Lister: lister,
		// As serve wires it: the webhook path's ingester, its River
		// client built after the worker that needs it.
		Ingester: ingesterFunc(func(ctx context.Context, events []provider.Event) ([]bool, error) {
			return (&webhook.TxIngester{Pool: pool, Enqueue: client}).IngestAll(ctx, events)
		}),
		Rate: 1000, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		OpsEmail: "ops@example.com", Metrics: sweep.NewMetrics(b.metrics), Now: b.now.Now})
	cfg := jobs.Config{FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
		ProcessMaxAttempts: 3, Email: jobs.EmailConfig{OpsEmail: "ops@example.com"}}
	if o.every > 0 {
		cfg.Register = sweep.Register(b.sweeper, o.every)
		cfg.Queues = map[string]river.QueueConfig{sweep.Queue: sweep.QueueConfig()}
	}
	client, err = jobs.NewClient(pool, cfg)
	require.NoError(t, err)
	b.world = &worldtest.World{Pool: pool, URL: url, Jobs: client, Ingester: &webhook.TxIngester{Pool: pool, Enqueue: client}}
	e := echo.New()
	webhook.NewHandler(webhook.Config{Ingester: b.world.Ingester,
		Receivers: []provider.Receiver{stripe.NewReceiver([]string{sim.WebhookSecret()}, 0)}}).Register(e)
	hook := httptest.NewServer(e)
	t.Cleanup(hook.Close)
	b.endpoint = hook.URL + "/webhooks/stripe"
	if o.beforeStart != nil {
		o.beforeStart(b)
	}
	require.NoError(t, client.River.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.River.StopAndCancel(ctx)
	})
	return b
}

type ingesterFunc func(ctx context.Context, events []provider.Event) ([]bool, error)

func (f ingesterFunc) IngestAll(ctx context.Context, events []provider.Event) ([]bool, error) {
	return f(ctx, events)
}

// deliver sends events to the webhook endpoint and returns, per event,
// whether paygate answered duplicate.
func (b *testBundle) deliver(t *testing.T, events []stripesim.Event) []bool {
	t.Helper()
	res, err := b.sim.Deliver(context.Background(), b.endpoint, events, nil)
	require.NoError(t, err)
	out := make([]bool, len(res))
	for i, r := range res {
		require.True(t, r.Delivered, "%s: %d %s", r.EventID, r.Status, r.Body)
		out[i] = r.Duplicate
	}
	return out
}

// run is one periodic sweep, run here to its end.
func (b *testBundle) run(t *testing.T) (sweep.Outcome, sweep.Result) {
	t.Helper()
	outcome, res, err := b.sweeper.Run(context.Background(), time.Now().Add(time.Minute), b.world.Jobs.River)
	require.NoError(t, err)
	return outcome, res
}

func (b *testBundle) sources(t *testing.T) map[string]string {
	t.Helper()
	rows, err := b.world.Pool.Query(context.Background(), `SELECT event_id, source FROM inbox_events WHERE provider = 'stripe'`)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var id, source string
		require.NoError(t, rows.Scan(&id, &source))
		out[id] = source
	}
	require.NoError(t, rows.Err())
	return out
}

// emails are the email_outbox rows of kind: object id → data.
func (b *testBundle) emails(t *testing.T, kind jobs.EmailKind) map[string]map[string]any {
	t.Helper()
	rows, err := b.world.Pool.Query(context.Background(), `SELECT object_id, data, coalesce(recipient, '') FROM email_outbox WHERE kind = $1`, kind)
	require.NoError(t, err)
	out := map[string]map[string]any{}
	for rows.Next() {
		var (
			id, to string
			data   map[string]any
		)
		require.NoError(t, rows.Scan(&id, &data, &to))
		require.Equal(t, "ops@example.com", to)
		out[id] = data
	}
	require.NoError(t, rows.Err())
	return out
}

func ids(events []stripesim.Event) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = ev.ID
	}
	return out
}

func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSweepIngestsMissedEventsWithinOnePeriod: the events of a payment
// and a refund whose webhooks never came are in the inbox, marked as read
// from the API, within one period of the periodic sweep, and applied to the
// books as their webhooks would have been; their webhooks, arriving late,
// are duplicates and change nothing. Ops get one missed_events email
// naming the first and the last; the metric counts them.
func TestSweepIngestsMissedEventsWithinOnePeriod(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{Seed: 49, Now: time.Now().Add(-20 * time.Minute)})
	delivered := sim.Pay(stripesim.PayOpts{Amount: 1000, Email: "ada@example.com", OrderID: "ord-1"})
	sim.Advance(time.Minute)
	missed := sim.Pay(stripesim.PayOpts{Amount: 2500, Email: "grace@example.com", OrderID: "ord-2"})
	sim.Advance(time.Minute)
	sim.Refund(delivered, 300)
	var onTime, late []stripesim.Event
	for _, ev := range sim.Events() {
		if ev.PaymentIntentID == delivered.ID && !strings.HasPrefix(string(ev.Type), "refund") && ev.Type != stripesim.EventChargeRefunded &&
			ev.Type != stripesim.EventChargeRefundUpdated {
			onTime = append(onTime, ev)
		} else {
			late = append(late, ev)
		}
	}
	require.NotEmpty(t, onTime)
	require.Greater(t, len(late), 2)

	const every = 2 * time.Second
	var sweptAt time.Time
	b := setup(t, sim, setupOpts{every: every, beforeStart: func(b *testBundle) {
		require.Equal(t, make([]bool, len(onTime)), b.deliver(t, onTime))
		sweptAt = time.Now()
	}})
	waitFor(t, 30*time.Second, "the missed events ingested", func() bool {
		return b.world.Count(t, `SELECT count(*) FROM inbox_events WHERE source = 'api'`) == len(late)
	})
	// One period, plus the moment River takes to elect its leader.
	require.Less(t, time.Since(sweptAt), every+10*time.Second)
	b.world.Settle(t)
	sources := b.sources(t)
	for _, ev := range onTime {
		require.Equal(t, "webhook", sources[ev.ID], ev.ID)
	}
	for _, ev := range late {
		require.Equal(t, "api", sources[ev.ID], ev.ID)
	}

	ref := worldtest.New(t, nil)
	ref.Apply(t, sim.Events()...)
	payments := []string{delivered.ID, missed.ID}
	want := ref.Snapshot(t, payments)
	require.Equal(t, want, b.world.Snapshot(t, payments))

	// The webhooks come after all: duplicates, nothing doubles.
	dups := b.deliver(t, late)
	require.Equal(t, slices.Repeat([]bool{true}, len(late)), dups)
	b.world.Settle(t)
	require.Equal(t, want, b.world.Snapshot(t, payments))
	require.Equal(t, len(onTime)+len(late), b.world.Count(t, `SELECT count(*) FROM inbox_events`))

	waitFor(t, 10*time.Second, "the sweep's email", func() bool {
		return len(b.emails(t, jobs.EmailMissedEvents)) > 0
	})
	waitFor(t, 10*time.Second, "a later sweep", func() bool {
		st, err := sweep.Statuses(context.Background(), b.world.Pool)
		require.NoError(t, err)
		return st["stripe"].Last != nil && st["stripe"].Last.New == 0
	})
	emails := b.emails(t, jobs.EmailMissedEvents)
	require.Len(t, emails, 1, "one email for the sweep that found them; later sweeps find them known")
	for id, data := range emails {
		require.True(t, strings.HasPrefix(id, "stripe/"), id)
		m := data["missed"].(map[string]any)
		require.EqualValues(t, len(late), m["count"])
		// By creation, to the second, then id.
		byCreation := slices.Clone(late)
		slices.SortFunc(byCreation, func(a, b stripesim.Event) int {
			return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
		})
		require.Equal(t, byCreation[0].ID, m["first"].(map[string]any)["id"])
		require.Equal(t, byCreation[len(late)-1].ID, m["last"].(map[string]any)["id"])
		require.Equal(t, "schedule", m["trigger"])
	}
	require.Equal(t, float64(len(late)), metric(t, b.metrics, "paygate_sweep_events_total", "new"))
	require.GreaterOrEqual(t, metric(t, b.metrics, "paygate_sweep_events_total", "known"), float64(len(onTime)))
}

// metric is the value of a sweep counter of provider stripe (and result,
// when given); 0 when it has none yet.
func metric(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["provider"] == "stripe" && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// payments makes n payments of sim's, one a second, none delivered: 2n
// events.
func payments(sim *stripesim.Sim, n int) []string {
	var out []string
	for i := range n {
		out = append(out, sim.Pay(stripesim.PayOpts{Amount: int64(1000 + i)}).ID)
		sim.Advance(time.Second)
	}
	return out
}

// TestSweepBacksOffAndResumes: list requests answered 429 and then 503
// in the middle of a window are waited out with backoff, and the sweep
// goes on with the page it was at: one request a page and one a failure,
// never a page fetched again from the start. Stripe-go's own retries
// take rate limits first when it has retries to spend.
func TestSweepBacksOffAndResumes(t *testing.T) {
	t.Parallel()
	t.Run("the sweeper waits", func(t *testing.T) {
		t.Parallel()
		sim := stripesim.New(stripesim.Config{Seed: 429, Now: time.Now().Add(-2 * time.Hour)})
		payments(sim, 60)
		b := setup(t, sim, setupOpts{pageSize: 50})
		sim.FailNext(3, stripesim.FailOpts{Status: http.StatusTooManyRequests, Route: "GET /v1/events", After: 1})
		sim.FailNext(2, stripesim.FailOpts{Status: http.StatusServiceUnavailable, Route: "GET /v1/events", After: 1})
		outcome, res := b.run(t)
		require.Equal(t, sweep.OutcomeDone, outcome)
		require.Equal(t, 120, res.New)
		require.Equal(t, 3+5, sim.Requests()["GET /v1/events"], "three pages, five failures")
		require.Equal(t, 3+5, res.Requests)
		require.Equal(t, 120, b.world.Count(t, `SELECT count(*) FROM inbox_events WHERE source = 'api'`))
		require.Equal(t, 5.0, metric(t, b.metrics, "paygate_sweep_errors_total", ""))
		st, err := sweep.Statuses(context.Background(), b.world.Pool)
		require.NoError(t, err)
		require.Nil(t, st["stripe"].FailingSince, "a success ends the failure")
		require.Nil(t, st["stripe"].Running)
		require.Empty(t, b.emails(t, jobs.EmailSweepFailing))
	})
	t.Run("stripe-go retries rate limits first", func(t *testing.T) {
		t.Parallel()
		sim := stripesim.New(stripesim.Config{Seed: 430, Now: time.Now().Add(-2 * time.Hour)})
		payments(sim, 30)
		b := setup(t, sim, setupOpts{pageSize: 50, retries: 2})
		sim.FailNext(2, stripesim.FailOpts{Status: http.StatusTooManyRequests, Route: "GET /v1/events", After: 1})
		outcome, res := b.run(t)
		require.Equal(t, sweep.OutcomeDone, outcome)
		require.Equal(t, 60, res.New)
		require.Equal(t, 2+2, sim.Requests()["GET /v1/events"])
		require.Equal(t, 2, res.Requests, "the sweeper saw no failure")
		require.Zero(t, metric(t, b.metrics, "paygate_sweep_errors_total", ""))
	})
}

// TestSweepCutOffGoesOnFromItsPlace: a sweep whose API keeps failing stops
// at its deadline with its place kept (the pages before committed, the
// cursor after them); an hour of failures sends ops one sweep_failing
// email, however many failures follow; once the API answers, the next run
// goes on with the same window from its cursor, and its email tells what
// the whole window found.
func TestSweepCutOffGoesOnFromItsPlace(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{Seed: 503, Now: time.Now().Add(-3 * time.Hour)})
	payments(sim, 60)
	b := setup(t, sim, setupOpts{pageSize: 50})
	sim.FailNext(100000, stripesim.FailOpts{Status: http.StatusInternalServerError, Route: "GET /v1/events", After: 1})
	ctx := context.Background()
	cut := func() {
		t.Helper()
		outcome, _, err := b.sweeper.Run(ctx, time.Now().Add(time.Second), b.world.Jobs.River)
		require.NoError(t, err)
		require.Equal(t, sweep.OutcomeFailing, outcome)
	}
	cut()
	st, err := sweep.Statuses(ctx, b.world.Pool)
	require.NoError(t, err)
	require.NotNil(t, st["stripe"].Running)
	window := *st["stripe"].Running
	require.NotNil(t, st["stripe"].FailingSince)
	require.Contains(t, st["stripe"].LastError, "500")
	require.Nil(t, st["stripe"].Last)
	require.Equal(t, 50, b.world.Count(t, `SELECT count(*) FROM inbox_events`), "the first page is committed")
	require.Equal(t, 50, b.world.Count(t, `SELECT window_new FROM event_sweeps`))
	require.Empty(t, b.emails(t, jobs.EmailSweepFailing))

	b.now.Skip(61 * time.Minute)
	cut()
	cut()
	alerts := b.emails(t, jobs.EmailSweepFailing)
	require.Len(t, alerts, 1, "one email an outage")
	for id, data := range alerts {
		require.Equal(t, "stripe/"+strconvUnix(*st["stripe"].FailingSince), id)
		require.Contains(t, data["reason"], "failing since")
	}

	sim.StopFailing()
	failures := int(metric(t, b.metrics, "paygate_sweep_errors_total", ""))
	outcome, res := b.run(t)
	require.Equal(t, sweep.OutcomeDone, outcome)
	require.Equal(t, window, res.Window, "the same window, from its place")
	require.Equal(t, 120, res.New, "what the whole window found")
	require.Equal(t, 3+failures, sim.Requests()["GET /v1/events"], "no page listed twice")
	st, err = sweep.Statuses(ctx, b.world.Pool)
	require.NoError(t, err)
	require.Nil(t, st["stripe"].Running)
	require.Nil(t, st["stripe"].FailingSince)
	require.Equal(t, window.To, *st["stripe"].SweptUntil)
	require.Equal(t, 120, st["stripe"].Last.New)
	found := b.emails(t, jobs.EmailMissedEvents)
	require.Len(t, found, 1)
	for _, data := range found {
		require.EqualValues(t, 120, data["missed"].(map[string]any)["count"])
	}
	// A later outage is another email.
	sim.FailNext(100000, stripesim.FailOpts{Status: http.StatusInternalServerError, Route: "GET /v1/events"})
	cut()
	b.now.Skip(61 * time.Minute)
	cut()
	require.Len(t, b.emails(t, jobs.EmailSweepFailing), 2)
}

func strconvUnix(t time.Time) string {
	b, _ := json.Marshal(t.Unix())
	return string(b)
}

// TestSweepWindows: the first sweep covers FirstWindow up to now, each
// next one starts Overlap before the last one's end, and none reaches past
// the list's 30 days.
func TestSweepWindows(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{Seed: 10})
	b := setup(t, sim, setupOpts{})
	_, first := b.run(t)
	now := b.now.Now()
	require.WithinDuration(t, now.Add(-sweep.FirstWindow), first.From, 2*time.Second)
	require.WithinDuration(t, now, first.To, 2*time.Second)
	require.True(t, first.To.After(now.Truncate(time.Second)), "this second's events are in")

	b.now.Skip(10 * time.Minute)
	_, next := b.run(t)
	require.Equal(t, first.To.Add(-sweep.Overlap), next.From)
	require.WithinDuration(t, b.now.Now(), next.To, 2*time.Second)

	_, err := b.world.Pool.Exec(context.Background(), `UPDATE event_sweeps SET swept_until = now() - interval '40 days'`)
	require.NoError(t, err)
	before := b.now.Now()
	_, old := b.run(t)
	require.WithinDuration(t, before.Add(-30*24*time.Hour), old.From, 2*time.Second)
	require.False(t, old.From.Before(before.Add(-30*24*time.Hour)))

	require.ErrorIs(t, b.sweeper.CheckWindow(sweep.Window{From: time.Now().Add(-31 * 24 * time.Hour), To: time.Now()}, time.Now()), sweep.ErrWindow)
	require.ErrorIs(t, b.sweeper.CheckWindow(sweep.Window{From: time.Now(), To: time.Now().Add(-time.Hour)}, time.Now()), sweep.ErrWindow)
	require.ErrorIs(t, b.sweeper.CheckWindow(sweep.Window{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)}, time.Now()), sweep.ErrWindow)
	require.NoError(t, b.sweeper.CheckWindow(sweep.Window{From: time.Now().Add(-29 * 24 * time.Hour), To: time.Now()}, time.Now()))
}

// slowLister lists as the API does, a little slowly, noting how many
// lists run at once across every instance that shares it.
type slowLister struct {
	provider.EventLister
	mu             sync.Mutex
	inflight, most int
	requests       int
}

func (l *slowLister) ListEvents(ctx context.Context, q provider.EventQuery) (provider.EventPage, error) {
	l.mu.Lock()
	l.inflight++
	l.requests++
	l.most = max(l.most, l.inflight)
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.inflight--
		l.mu.Unlock()
	}()
	time.Sleep(30 * time.Millisecond)
	return l.EventLister.ListEvents(ctx, q)
}

// TestTwoInstancesSweepOnce: two instances with the periodic sweep, both
// also asking for sweeps of their own all the while (as two leaders in a
// change of leadership would): one sweep runs at a time across both, the
// missed events are ingested once, and ops get one email for them.
func TestTwoInstancesSweepOnce(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{Seed: 2, Now: time.Now().Add(-time.Hour)})
	payments(sim, 120)
	shared := &slowLister{}
	wrap := func(api provider.EventLister) provider.EventLister {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		if shared.EventLister == nil {
			shared.EventLister = api
		}
		return shared
	}
	a := setup(t, sim, setupOpts{every: 200 * time.Millisecond, pageSize: 20, lister: wrap})
	// The second instance: its own workers and sweeper, on the first's
	// database.
	var bClient *jobs.Client
	bSweeper := sweep.New(sweep.Config{Pool: a.world.Pool, Lister: shared,
		Ingester: ingesterFunc(func(ctx context.Context, events []provider.Event) ([]bool, error) {
			return (&webhook.TxIngester{Pool: a.world.Pool, Enqueue: bClient}).IngestAll(ctx, events)
		}),
		Rate: 1000, OpsEmail: "ops@example.com"})
	bClient, err := jobs.NewClient(a.world.Pool, jobs.Config{FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
		Email:    jobs.EmailConfig{OpsEmail: "ops@example.com"},
		Register: sweep.Register(bSweeper, 200*time.Millisecond),
		Queues:   map[string]river.QueueConfig{sweep.Queue: sweep.QueueConfig()}})
	require.NoError(t, err)
	require.NoError(t, bClient.River.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = bClient.River.StopAndCancel(ctx)
	})

	// Ask until three sweeps ran (the first lists the events, the next
	// ones the overlap), however slow the machine.
	ctx, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	go func() {
		defer stop()
		for ctx.Err() == nil {
			var n int
			err := a.world.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job
				WHERE kind = 'sweep_provider_events' AND state = 'completed'`).Scan(&n)
			if err == nil && n >= 3 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for _, rc := range []*river.Client[pgx.Tx]{a.world.Jobs.River, bClient.River} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, err := rc.Insert(ctx, sweep.Args{Provider: "stripe"}, nil)
				if err != nil && ctx.Err() == nil {
					t.Errorf("insert a sweep: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	waitFor(t, 20*time.Second, "the missed events ingested", func() bool {
		return a.world.Count(t, `SELECT count(*) FROM inbox_events WHERE source = 'api'`) == 240
	})
	shared.mu.Lock()
	most, requests := shared.most, shared.requests
	shared.mu.Unlock()
	require.Equal(t, 1, most, "one list at a time across both instances")
	require.GreaterOrEqual(t, requests, 12+2, "twelve pages, then a page a sweep")
	require.Equal(t, 240, a.world.Count(t, `SELECT count(*) FROM inbox_events`))
	require.Len(t, a.emails(t, jobs.EmailMissedEvents), 1)
}

// typesLister lists only the events whose type has prefix.
type typesLister struct {
	provider.EventLister
	prefix string
}

func (l typesLister) ListEvents(ctx context.Context, q provider.EventQuery) (provider.EventPage, error) {
	page, err := l.EventLister.ListEvents(ctx, q)
	page.Events = slices.DeleteFunc(page.Events, func(ev provider.Event) bool { return !strings.HasPrefix(ev.Type, l.prefix) })
	return page, err
}

// TestAPIRenderedEventsInAnotherVersionMakeTheSameBooks: an account on an
// API version before 2022-11-15 lists its events with a PaymentIntent's
// charges list instead of latest_charge, and a charge with its refunds,
// while its webhooks come in the endpoint's 2024-06-20. Swept from the
// API, they make the same books as their webhooks: all of them, and the
// PaymentIntents' events alone, whose captures name the charge only
// through the list.
func TestAPIRenderedEventsInAnotherVersionMakeTheSameBooks(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{Seed: 2208, Now: time.Now().Add(-3 * time.Hour), AccountAPIVersion: stripesim.LegacyAPIVersion})
	auto := sim.Pay(stripesim.PayOpts{Amount: 2000, Email: "ada@example.com", OrderID: "ord-1", FailFirst: 1})
	manual := sim.Pay(stripesim.PayOpts{Amount: 5000, ManualCapture: true, OrderID: "ord-2"})
	sim.Advance(time.Hour)
	sim.Capture(manual)
	sim.Advance(time.Minute)
	sim.Refund(auto, 500)
	payments := []string{auto.ID, manual.ID}
	for _, ev := range sim.Events() {
		require.NotEqual(t, string(ev.Payload), string(ev.APIPayload), "%s: the API renders it otherwise", ev.Type)
	}

	for _, c := range []struct {
		name, prefix string
	}{{"every event", ""}, {"the PaymentIntents' events", "payment_intent."}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var webhooks []stripesim.Event
			for _, ev := range sim.Events() {
				if strings.HasPrefix(string(ev.Type), c.prefix) {
					webhooks = append(webhooks, ev)
				}
			}
			ref := worldtest.New(t, nil)
			ref.Apply(t, webhooks...)

			b := setup(t, sim, setupOpts{lister: func(l provider.EventLister) provider.EventLister { return typesLister{l, c.prefix} }})
			_, res := b.run(t)
			require.Equal(t, len(webhooks), res.New)
			b.world.Settle(t)
			var stored []byte
			require.NoError(t, b.world.Pool.QueryRow(context.Background(), `SELECT payload FROM inbox_events
				WHERE type = 'payment_intent.succeeded' LIMIT 1`).Scan(&stored))
			require.Contains(t, string(stored), `"api_version": "`+stripesim.LegacyAPIVersion+`"`)
			require.Contains(t, string(stored), `"charges"`)
			require.NotContains(t, string(stored), `"latest_charge"`)
			require.Equal(t, ref.Snapshot(t, payments), b.world.Snapshot(t, payments))
			captures := b.world.Count(t, `SELECT count(*) FROM ledger_transactions WHERE kind = 'capture'`)
			require.Equal(t, 2, captures, "both captures, from whichever copy")
		})
	}
}

// timedLister notes when each list request starts.
type timedLister struct {
	provider.EventLister
	at []time.Time
}

func (l *timedLister) ListEvents(ctx context.Context, q provider.EventQuery) (provider.EventPage, error) {
	l.at = append(l.at, time.Now())
	return l.EventLister.ListEvents(ctx, q)
}

// TestSweepRate: a sweep makes at most Rate list requests a second: the
// k-th request goes no earlier than k tenths of a second after the first.
// Each is measured from the first, not from the one before it: the limiter
// gives requests slots a tenth of a second apart, and a request that woke
// late for its slot (a loaded machine's timer) is followed by one on time,
// less than a tenth after it, yet never ahead of its own slot.
func TestSweepRate(t *testing.T) {
	t.Parallel()
	sim := stripesim.New(stripesim.Config{Seed: 20, Now: time.Now().Add(-time.Hour)})
	payments(sim, 25) // 50 events: five pages of ten
	srv := sim.Start(t)
	api, err := stripe.NewAPI(stripe.APIConfig{APIKey: sim.APIKey(), URL: srv.URL, PageSize: 10})
	require.NoError(t, err)
	w := worldtest.New(t, nil)
	timed := &timedLister{EventLister: api}
	s := sweep.New(sweep.Config{Pool: w.Pool, Lister: timed, Ingester: w.Ingester.(*webhook.TxIngester), Rate: 10})
	res, err := s.SweepWindow(context.Background(), sweep.Window{From: time.Now().Add(-2 * time.Hour), To: time.Now()}, w.Jobs.River)
	require.NoError(t, err)
	require.Equal(t, 5, res.Requests)
	require.Equal(t, 50, res.New)
	require.Len(t, timed.at, 5)
	for i := 1; i < len(timed.at); i++ {
		require.GreaterOrEqual(t, timed.at[i].Sub(timed.at[0]), time.Duration(i)*100*time.Millisecond-5*time.Millisecond,
			"ten a second: request %d a tenth of a second later per request than the first", i)
	}
}
