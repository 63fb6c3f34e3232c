package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripego "github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/sweep"
)

// TestEventsSourceAndSweepStats: an event says how it reached paygate
// (webhook, or api: read from the provider by the sweep) in
// GET /v1/events/{provider}/{id} and GET /v1/events, and GET /v1/ops/stats
// has where each provider's sweep stands: nothing before the first, then
// the last sweep's window and findings, and a sweep under way or failing.
func TestEventsSourceAndSweepStats(t *testing.T) {
	t.Parallel()
	w := worldtest.New(t, nil)
	e := newEcho(t, w)
	sim := stripesim.New(stripesim.Config{Seed: 49, Now: time.Now().Add(-time.Hour)})
	sim.Pay(stripesim.PayOpts{Amount: 1000})
	webhook := sim.Events()[0]
	w.Apply(t, webhook)

	var stats struct {
		Sweep map[string]map[string]any `json:"sweep"`
	}
	require.Equal(t, http.StatusOK, get(t, e, "/v1/ops/stats", opsToken, &stats).Code)
	require.NotNil(t, stats.Sweep)
	require.Empty(t, stats.Sweep, "no sweep yet")

	srv := sim.Start(t)
	api, err := stripe.NewAPI(stripe.APIConfig{APIKey: sim.APIKey(), URL: srv.URL, MaxNetworkRetries: stripego.Int64(0)})
	require.NoError(t, err)
	sw := sweep.New(sweep.Config{Pool: w.Pool, Lister: api, Ingester: ingestAll{w}})
	_, res, err := sw.Run(context.Background(), time.Now().Add(time.Minute), w.Jobs.River)
	require.NoError(t, err)
	require.Equal(t, len(sim.Events())-1, res.New)
	w.Settle(t)

	for _, ev := range sim.Events() {
		want := "api"
		if ev.ID == webhook.ID {
			want = "webhook"
		}
		for _, tok := range []string{opsToken, financeToken} {
			var view map[string]any
			require.Equal(t, http.StatusOK, get(t, e, "/v1/events/stripe/"+ev.ID, tok, &view).Code)
			require.Equal(t, want, view["source"], ev.ID)
		}
	}
	var page struct {
		Events []map[string]any `json:"events"`
	}
	require.Equal(t, http.StatusOK, get(t, e, "/v1/events?provider=stripe", opsToken, &page).Code)
	require.Len(t, page.Events, len(sim.Events()))
	sources := map[string]int{}
	for _, ev := range page.Events {
		sources[ev["source"].(string)]++
	}
	require.Equal(t, map[string]int{"webhook": 1, "api": len(sim.Events()) - 1}, sources)

	require.Equal(t, http.StatusOK, get(t, e, "/v1/ops/stats", opsToken, &stats).Code)
	st := stats.Sweep["stripe"]
	require.Equal(t, res.To.Format(time.RFC3339), st["swept_until"])
	last := st["last"].(map[string]any)
	require.EqualValues(t, res.New, last["new"])
	require.EqualValues(t, 1, last["known"])
	require.Equal(t, res.From.Format(time.RFC3339), last["from"])
	require.Equal(t, res.First.ID, last["first"].(map[string]any)["id"])
	require.Equal(t, res.Last.ID, last["last"].(map[string]any)["id"])
	require.Nil(t, st["running"])
	require.Nil(t, st["failing_since"])

	// A sweep under way whose list fails.
	sim.FailNext(1000, stripesim.FailOpts{Status: http.StatusBadGateway, Route: "GET /v1/events"})
	outcome, _, err := sw.Run(context.Background(), time.Now().Add(100*time.Millisecond), w.Jobs.River)
	require.NoError(t, err)
	require.Equal(t, sweep.OutcomeFailing, outcome)
	require.Equal(t, http.StatusOK, get(t, e, "/v1/ops/stats", opsToken, &stats).Code)
	st = stats.Sweep["stripe"]
	require.NotNil(t, st["running"])
	require.NotNil(t, st["failing_since"])
	require.Contains(t, st["last_error"], "502")
	require.NotNil(t, st["last"], "the last finished sweep stays")
}

type ingestAll struct{ w *worldtest.World }

func (i ingestAll) IngestAll(ctx context.Context, events []provider.Event) ([]bool, error) {
	return i.w.Ingester.IngestAll(ctx, events)
}
