package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/outbox"
	striperef "github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

// runMessage reads the one message of run id and decodes its data.
func runMessage(t *testing.T, b *testBundle, id int64) (outbox.Message, outbox.RunView) {
	t.Helper()
	msgs, err := outbox.OfAggregate(context.Background(), b.world.Pool, outbox.AggregateReconciliationRun, fmt.Sprint(id))
	require.NoError(t, err)
	require.Len(t, msgs, 1, "a run finishes once")
	m := msgs[0]
	require.Equal(t, int64(1), m.Sequence)
	require.Equal(t, outbox.ID(outbox.AggregateReconciliationRun, fmt.Sprint(id), 1), m.ID)
	var body struct {
		ID        string         `json:"id"`
		Type      string         `json:"type"`
		CreatedAt time.Time      `json:"created_at"`
		Sequence  int64          `json:"sequence"`
		Data      outbox.RunData `json:"data"`
	}
	dec := json.NewDecoder(bytes.NewReader(m.Body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&body), "%s", m.Body)
	require.Equal(t, m.ID, body.ID)
	require.Equal(t, m.Type, body.Type)
	require.True(t, m.CreatedAt.Equal(body.CreatedAt))
	require.Equal(t, m.Sequence, body.Sequence)
	return m, body.Data.Run
}

// TestCompletedRunIsAMessage: a run that completes tells downstream once,
// reconciliation_run.completed with its id, provider, day, status and
// summary as its report has them; trying to perform it again writes
// nothing, and a re-run of the day is a run, and a message, of its own.
func TestCompletedRunIsAMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.sim.Pay(stripesim.PayOpts{Amount: 10000})
	p := b.sim.Pay(stripesim.PayOpts{Amount: 4000})
	b.sim.TamperBalanceTransaction(p.BalanceTransactionID, 4100)
	b.deliver(t)

	run, _ := b.run(t, day)
	m, v := runMessage(t, b, run.ID)
	require.Equal(t, outbox.TypeReconciliationRunCompleted, m.Type)
	summary := map[string]int{}
	for s, n := range run.Report.Summary {
		summary[string(s)] = n
	}
	require.Equal(t, outbox.RunView{ID: run.ID, Provider: "stripe", Date: "2025-03-14", Status: "completed", Summary: summary}, v)
	require.Equal(t, 1, v.Summary[string(reconcile.StatusAmountMismatch)], "the summary is the report's: %v", v.Summary)
	require.WithinDuration(t, *run.FinishedAt, m.CreatedAt, 5*time.Second)

	_, err := b.runner.Perform(context.Background(), run.ID)
	require.ErrorIs(t, err, reconcile.ErrRunFinished)
	runMessage(t, b, run.ID)

	again, _ := b.run(t, day)
	require.NotEqual(t, run.ID, again.ID)
	m2, v2 := runMessage(t, b, again.ID)
	require.NotEqual(t, m.ID, m2.ID)
	require.Equal(t, again.ID, v2.ID)
	require.Equal(t, 2, b.world.Count(t, `SELECT count(*) FROM messages WHERE aggregate_type = 'reconciliation_run'`))
}

// TestFailedRunIsAMessage: a run the provider fails tells downstream once,
// reconciliation_run.failed, with an empty summary.
func TestFailedRunIsAMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	srv := b.sim.Start(t)
	provider, err := striperef.NewAPI(striperef.APIConfig{APIKey: "sk_test_wrong", URL: srv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	runner := reconcile.New(reconcile.Config{Pool: b.world.Pool, Provider: provider})
	run, err := runner.RunDay(context.Background(), day, reconcile.TriggerCLI, "test")
	require.ErrorIs(t, err, reconcile.ErrProvider)
	require.Equal(t, reconcile.RunFailed, run.Status)

	m, v := runMessage(t, b, run.ID)
	require.Equal(t, outbox.TypeReconciliationRunFailed, m.Type)
	require.Equal(t, outbox.RunView{ID: run.ID, Provider: "stripe", Date: "2025-03-14", Status: "failed", Summary: map[string]int{}}, v)

	require.NoError(t, runner.Fail(context.Background(), run.ID, fmt.Errorf("failed again")), "a finished run is left as it is")
	runMessage(t, b, run.ID)
}
