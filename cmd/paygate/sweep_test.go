package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/webhook"
)

func runSweep(t *testing.T, args ...string) (stdout, progress string, err error) {
	t.Helper()
	var out, errOut, prog bytes.Buffer
	old := progressOut
	progressOut = &prog
	defer func() { progressOut = old }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = run(ctx, append([]string{"sweep"}, args...), &out, &errOut)
	return out.String(), prog.String(), err
}

func TestSweepCommandArguments(t *testing.T) {
	sim := stripesim.New(stripesim.Config{Seed: 1})
	reconcileEnv(t, sim, sim.APIKey())
	var ue usageError
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--since is required"},
		{[]string{"--since", "yesterday"}, "not an RFC 3339 time"},
		{[]string{"--since", time.Now().Add(-time.Hour).Format(time.RFC3339), "--until", "now"}, "not an RFC 3339 time"},
		{[]string{"--since", time.Now().Add(-31 * 24 * time.Hour).Format(time.RFC3339)}, "events of the last 30 days only"},
		{[]string{"--since", time.Now().Add(-time.Hour).Format(time.RFC3339), "--until", time.Now().Add(-2 * time.Hour).Format(time.RFC3339)}, "end after it starts"},
		{[]string{"--since", time.Now().Add(-time.Hour).Format(time.RFC3339), "--until", time.Now().Add(time.Hour).Format(time.RFC3339)}, "in the future"},
		{[]string{"--since", time.Now().Add(-time.Hour).Format(time.RFC3339), "extra"}, "unexpected argument"},
	} {
		_, _, err := runSweep(t, c.args...)
		require.ErrorAs(t, err, &ue, "%v", c.args)
		require.ErrorContains(t, err, c.want)
	}
	require.Zero(t, sim.RequestCount(), "nothing is listed for a refused window")

	t.Setenv("PAYGATE_STRIPE_API_KEY", "sk_test_not_the_key")
	start := time.Now()
	_, _, err := runSweep(t, "--since", time.Now().Add(-time.Hour).Format(time.RFC3339))
	require.ErrorIs(t, err, provider.ErrAPIRefused, "a key Stripe refuses stops the command")
	require.ErrorContains(t, err, "Invalid API Key")
	require.Less(t, time.Since(start), 30*time.Second)

	t.Setenv("PAYGATE_STRIPE_API_KEY", "")
	_, _, err = runSweep(t, "--since", time.Now().Add(-time.Hour).Format(time.RFC3339))
	require.ErrorIs(t, err, stripe.ErrNoAPIKey)
}

// TestSweepCommandFiveDays: `paygate sweep --since` five days ago ingests
// the window's events that paygate lacks, as read from the API, leaves
// alone those it has and those before the window, prints what it found,
// and queues one missed_events email; swept again, the window has nothing
// missed.
func TestSweepCommandFiveDays(t *testing.T) {
	now := time.Now()
	sim := stripesim.New(stripesim.Config{Seed: 55, Now: now.Add(-6 * 24 * time.Hour)})
	before := sim.Pay(stripesim.PayOpts{Amount: 100})
	sim.Advance(24*time.Hour + time.Hour)
	var inWindow []stripesim.Event
	for range 5 {
		for range 30 {
			p := sim.Pay(stripesim.PayOpts{Amount: 1500})
			inWindow = append(inWindow, sim.EventsOf(p.ID)...)
			sim.Advance(time.Minute)
		}
		sim.Advance(23 * time.Hour)
	}
	require.True(t, sim.Now().Before(now), "every event is in the past")
	url := reconcileEnv(t, sim, sim.APIKey())
	t.Setenv("PAYGATE_OPS_EMAIL", "ops@example.com")
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()

	// The first day's webhooks came.
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)
	in := &webhook.TxIngester{Pool: pool, Enqueue: jc}
	delivered := inWindow[:60]
	for _, ev := range delivered {
		e, err := stripe.DecodeEvent(ev.Payload)
		require.NoError(t, err)
		_, err = in.Ingest(context.Background(), e)
		require.NoError(t, err)
	}

	since := now.Add(-5 * 24 * time.Hour).UTC().Format(time.RFC3339)
	out, progress, err := runSweep(t, "--since", since)
	require.NoError(t, err, out)
	missed := len(inWindow) - len(delivered)
	require.Contains(t, out, fmt.Sprintf("Swept stripe's events created %s to ", since))
	require.Contains(t, out, fmt.Sprintf(": %d listed, %d new, %d already in paygate (3 list requests).", len(inWindow), missed, len(delivered)))
	first := slices.MinFunc(inWindow[60:], func(a, b stripesim.Event) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID))
	})
	require.Contains(t, out, "First new: "+first.ID+" "+string(first.Type))
	require.Contains(t, progress, "page 3: ")
	require.Equal(t, 3, sim.Requests()["GET /v1/events"], "300 events, pages of 100")

	count := func(sql string, args ...any) int {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
		return n
	}
	require.Equal(t, missed, count(`SELECT count(*) FROM inbox_events WHERE source = 'api'`))
	require.Equal(t, len(delivered), count(`SELECT count(*) FROM inbox_events WHERE source = 'webhook'`))
	for _, ev := range sim.EventsOf(before.ID) {
		require.Zero(t, count(`SELECT count(*) FROM inbox_event_keys WHERE event_id = $1`, ev.ID), "before the window")
	}
	require.Equal(t, missed, count(`SELECT count(*) FROM river_job j, jsonb_array_elements_text(j.args->'event_ids') e
		WHERE j.kind = 'apply_events'`)-len(delivered), "each new event has its apply job")

	var data []byte
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT data FROM email_outbox WHERE kind = 'missed_events'`).Scan(&data))
	var email struct {
		Missed jobs.MissedEvents `json:"missed"`
	}
	require.NoError(t, json.Unmarshal(data, &email))
	require.Equal(t, missed, email.Missed.Count)
	require.Equal(t, "cli", email.Missed.Trigger)

	out, _, err = runSweep(t, "--since", since)
	require.NoError(t, err)
	require.Contains(t, out, fmt.Sprintf("%d listed, 0 new, %d already in paygate", len(inWindow), len(inWindow)))
	require.True(t, strings.Contains(out, "Nothing was missed."))
	require.Equal(t, 1, count(`SELECT count(*) FROM email_outbox WHERE kind = 'missed_events'`))
}

func TestSweepConfiguration(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cfg, err := loadConfig(env())
	require.NoError(t, err)
	require.Equal(t, 10*time.Minute, cfg.StripeSweepEvery)
	require.Equal(t, 10.0, cfg.StripeSweepRate)
	cfg, err = loadConfig(env("PAYGATE_STRIPE_SWEEP_EVERY", "0", "PAYGATE_STRIPE_SWEEP_RATE", "2.5"))
	require.NoError(t, err)
	require.Zero(t, cfg.StripeSweepEvery)
	require.Equal(t, 2.5, cfg.StripeSweepRate)
	cfg, err = loadConfig(env("PAYGATE_STRIPE_SWEEP_EVERY", "10s"))
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, cfg.StripeSweepEvery)
	for _, bad := range [][]string{
		{"PAYGATE_STRIPE_SWEEP_EVERY", "ten"}, {"PAYGATE_STRIPE_SWEEP_EVERY", "10ms"}, {"PAYGATE_STRIPE_SWEEP_EVERY", "48h"},
		{"PAYGATE_STRIPE_SWEEP_RATE", "0"}, {"PAYGATE_STRIPE_SWEEP_RATE", "101"}, {"PAYGATE_STRIPE_SWEEP_RATE", "NaN"},
	} {
		_, err := loadConfig(env(bad...))
		require.ErrorContains(t, err, bad[0], "%v", bad)
	}
}

// TestServeSweepsMissedEvents: the real server, with a Stripe API key and
// PAYGATE_STRIPE_SWEEP_EVERY=1s, ingests the events whose webhooks never
// came within a period, applies them, and says so in /v1/ops/stats and
// /metrics; their webhooks, arriving late, are duplicates.
func TestServeSweepsMissedEvents(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret, Now: time.Now().Add(-5 * time.Minute)})
	sim.Pay(stripesim.PayOpts{Amount: 1200})
	missed := sim.Pay(stripesim.PayOpts{Amount: 3400})
	api := sim.Start(t)
	srv := startServer(t, dbURL, "PAYGATE_STRIPE_API_KEY="+sim.APIKey(), "PAYGATE_STRIPE_API_URL="+api.URL,
		"PAYGATE_STRIPE_SWEEP_EVERY=1s")
	late := sim.EventsOf(missed.ID)
	var onTime []stripesim.Event
	for _, ev := range sim.Events() {
		if ev.PaymentIntentID != missed.ID {
			onTime = append(onTime, ev)
		}
	}
	hook := "http://" + srv.addr + "/webhooks/stripe"
	_, err := sim.Deliver(context.Background(), hook, onTime, nil)
	require.NoError(t, err)
	srv.awaitProcessed(t, len(sim.Events()))

	var stats struct {
		Sweep map[string]struct {
			Last *struct {
				New   int `json:"new"`
				Known int `json:"known"`
			} `json:"last"`
		} `json:"sweep"`
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		require.Equal(t, http.StatusOK, getJSON(t, "http://"+srv.addr+"/v1/ops/stats", testOps, &stats))
		if st := stats.Sweep["stripe"]; st.Last != nil {
			break
		}
		require.False(t, time.Now().After(deadline), "no sweep finished\n%s", srv.logs.String())
		time.Sleep(100 * time.Millisecond)
	}
	var event struct {
		Source string `json:"source"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+srv.addr+"/v1/events/stripe/"+late[0].ID, testOps, &event))
	require.Equal(t, "api", event.Source)

	results, err := sim.Deliver(context.Background(), hook, late, nil)
	require.NoError(t, err)
	for _, r := range results {
		require.True(t, r.Duplicate, r.EventID)
	}
	resp, err := http.Get("http://" + srv.addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), fmt.Sprintf(`paygate_sweep_events_total{provider="stripe",result="new"} %d`, len(late)))
	require.Contains(t, srv.logs.String(), "sweep: events whose webhooks never arrived were ingested")
}
