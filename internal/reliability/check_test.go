package reliability_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/reliability"
	"github.com/paygate/paygate/ledger"
)

// acked makes the sender's record of every event delivered once and
// acknowledged as new.
func acked(w *reliability.Workload) []reliability.Outcome {
	var out []reliability.Outcome
	for _, e := range w.Events() {
		out = append(out, reliability.Outcome{
			Delivery: reliability.Delivery{Event: e, Copy: 1},
			Attempts: []reliability.Attempt{{Start: time.Now(), Status: 200}},
		})
	}
	return out
}

// TestCheckerCatchesLossDuplicationAndStrangers: the checker is only worth
// its table if it can fail. Two worlds get the same workload; the second is
// then damaged the three ways the suite looks for, and each shows.
func TestCheckerCatchesLossDuplicationAndStrangers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := reliability.NewWorkload(reliability.WorkloadOpts{Payments: 12, PoisonEvery: 4, Seed: 42})
	model := reliability.NewModel(t)
	require.NoError(t, model.Apply(ctx, w))
	twin := reliability.NewModel(t)
	require.NoError(t, twin.Apply(ctx, w))

	clean := &reliability.Report{}
	clean.Tally(acked(w))
	reliability.Check(ctx, t, clean, twin.World.Pool, model, w, acked(w))
	require.True(t, clean.OK(), "identical worlds: %v", clean.Problems)
	require.NotZero(t, clean.Poison)

	// Lost: an acknowledged event vanishes from the inbox. Stranger: an
	// event nobody sent appears. Duplicate: a movement is posted under a
	// second ref.
	lost := w.Events()[3].ID
	_, err := twin.World.Pool.Exec(ctx, `DELETE FROM inbox_events WHERE event_id = $1`, lost)
	require.NoError(t, err)
	_, err = twin.World.Pool.Exec(ctx, `INSERT INTO inbox_events (provider, event_id, type, payload, status) VALUES ('stripe', 'evt_stranger', 'x', '\x7b7d', 'processed')`)
	require.NoError(t, err)
	tx, err := twin.World.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = ledger.PostTx(ctx, tx, ledger.NewCapture("stripe:charge:ch_twice:capture", w.Payments[0], "evt_x", "usd", decimal.RequireFromString("1.00"), time.Now()))
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	damaged := &reliability.Report{}
	damaged.Tally(acked(w))
	reliability.Check(ctx, t, damaged, twin.World.Pool, model, w, acked(w))
	require.False(t, damaged.OK())
	require.Equal(t, 1, damaged.Lost, damaged.Problems)
	require.Equal(t, 1, damaged.Unexpected, damaged.Problems)
	require.Equal(t, 2, damaged.Duplicated, "a ref beyond the model and beyond the simulator's history: %v", damaged.Problems)
	require.NotZero(t, damaged.TransactionsDiffering, "the trial balance moved")
}

// TestTallyCountsWhatTheSenderSaw: recovered deliveries, answers lost after
// a commit, and two "new" answers for one event (a dedupe failure).
func TestTallyCountsWhatTheSenderSaw(t *testing.T) {
	t.Parallel()
	w := reliability.NewWorkload(reliability.WorkloadOpts{Payments: 1, Seed: 7})
	evs := w.Events()
	refused := reliability.Attempt{Err: "connection refused"}
	ok := reliability.Attempt{Status: 200}
	dup := reliability.Attempt{Status: 200, Duplicate: true}
	r := &reliability.Report{}
	r.Tally([]reliability.Outcome{
		{Delivery: reliability.Delivery{Event: evs[0], Copy: 1}, Attempts: []reliability.Attempt{refused, ok}},
		{Delivery: reliability.Delivery{Event: evs[1], Copy: 1}, Attempts: []reliability.Attempt{{Status: 503}, dup}},
		{Delivery: reliability.Delivery{Event: evs[2], Copy: 1}, Attempts: []reliability.Attempt{ok}},
		{Delivery: reliability.Delivery{Event: evs[2], Copy: 2}, Attempts: []reliability.Attempt{ok}},
		{Delivery: reliability.Delivery{Event: evs[3], Copy: 1}, Attempts: []reliability.Attempt{refused}},
	})
	require.Equal(t, 4, r.Attempted)
	require.Equal(t, 3, r.Acknowledged)
	require.Equal(t, 2, r.Recovered)
	require.Equal(t, 1, r.CommittedUnanswered, "evs[1] was committed by the attempt that got a 503? no: by one whose answer was lost")
	require.Equal(t, 1, r.Duplicated, "evs[2] was new twice")
	require.Equal(t, map[string]int{"2xx": 4, "503": 1, "connection refused": 2}, r.Answers)
}

// TestScanLogsFindsLeaks: each kind of leak is found, and an ordinary
// request log line is not.
func TestScanLogsFindsLeaks(t *testing.T) {
	t.Parallel()
	clean := `{"level":"INFO","msg":"webhook received","provider":"stripe","event_id":"evt_1","type":"charge.succeeded","duplicate":false,"request_id":"abc"}`
	require.Empty(t, reliability.ScanLogs(clean, "s3cret"))
	for _, line := range []string{
		`{"msg":"x","secret":"` + reliability.WebhookSecret + `"}`,
		`{"msg":"x","header":"t=1800000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd"}`,
		`{"msg":"x","auth":"Bearer ` + reliability.OpsToken + `"}`,
		`{"msg":"x","body":"{\"object\":\"charge\",\"amount\":100}"}`,
		`{"msg":"x","key":"sk_test_abcdef"}`,
		`{"msg":"x","to":"buyer-3@example.test"}`,
		`{"msg":"s3cret"}`,
	} {
		require.NotEmpty(t, reliability.ScanLogs(line, "s3cret"), line)
		for _, l := range reliability.ScanLogs(line, "s3cret") {
			require.False(t, strings.Contains(l.Line, "s3cret"), "the report masks the secret")
		}
	}
}
