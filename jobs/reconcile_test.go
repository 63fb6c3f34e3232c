package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	striperef "github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

type reconcileBundle struct {
	world    *worldtest.World
	sim      *stripesim.Sim
	runner   *reconcile.Runner
	worker   *jobs.ReconcileWorker
	schedule *jobs.CronSchedule
}

// setupReconcile is a world whose workers include the reconcile worker (and,
// with a schedule, the daily job), reading a simulator over HTTP.
func setupReconcile(t *testing.T, schedule *jobs.CronSchedule) *reconcileBundle {
	t.Helper()
	b := &reconcileBundle{sim: stripesim.New(stripesim.Config{Seed: 7}), worker: &jobs.ReconcileWorker{}, schedule: schedule}
	b.world = worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.Register = b.register
	}})
	srv := b.sim.Start(t)
	provider, err := striperef.NewAPI(striperef.APIConfig{APIKey: b.sim.APIKey(), URL: srv.URL, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	b.runner = reconcile.New(reconcile.Config{
		Pool: b.world.Pool, Provider: provider, RecoveryWait: 10 * time.Second,
		Ingester: reconcile.IngesterFunc(func(ctx context.Context, payload []byte) (bool, error) {
			ev, err := striperef.DecodeEvent(payload)
			if err != nil {
				return false, err
			}
			return b.world.Ingester.Ingest(ctx, ev)
		}),
	})
	// The worker is registered before the pool exists; it gets its runner
	// before any job can reach it.
	b.worker.Runner = b.runner
	return b
}

func (b *reconcileBundle) register(w *river.Workers) []*river.PeriodicJob {
	river.AddWorker(w, b.worker)
	if b.schedule == nil {
		return nil
	}
	return []*river.PeriodicJob{jobs.ReconcilePeriodicJob(b.schedule)}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *reconcileBundle) runs(t *testing.T, trigger, status string) int {
	return b.world.Count(t, `SELECT count(*) FROM reconciliation_runs WHERE trigger = $1 AND status = $2`, trigger, status)
}

// TestScheduledReconcileRunsOncePerDay: the daily job inserted twice for a
// day is one job, and one run; a copy that River no longer remembers (its
// completed job cleaned away) finds the day's scheduled run and does nothing.
func TestScheduledReconcileRunsOncePerDay(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t, nil)
	ctx := context.Background()
	day := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)
	b.sim.SetNow(day.Add(10 * time.Hour))
	b.sim.Pay(stripesim.PayOpts{Amount: 1000})
	b.world.Apply(t, b.sim.Deliverable()...)

	args, opts := jobs.ScheduledReconcile(day)
	first, err := b.world.Jobs.River.Insert(ctx, args, opts)
	require.NoError(t, err)
	require.False(t, first.UniqueSkippedAsDuplicate)
	second, err := b.world.Jobs.River.Insert(ctx, args, opts)
	require.NoError(t, err)
	require.True(t, second.UniqueSkippedAsDuplicate, "same day: the same job")
	require.Equal(t, first.Job.ID, second.Job.ID)

	waitFor(t, "the scheduled run", func() bool { return b.runs(t, "scheduled", "completed") == 1 })
	third, err := b.world.Jobs.River.Insert(ctx, args, opts)
	require.NoError(t, err)
	require.True(t, third.UniqueSkippedAsDuplicate, "a completed job still holds its day")

	// River cleans completed jobs after a while; a copy inserted then runs,
	// finds the day's run and stops.
	forgotten, err := b.world.Jobs.River.Insert(ctx, args, nil)
	require.NoError(t, err)
	waitFor(t, "the forgotten copy", func() bool {
		return b.world.Count(t, `SELECT count(*) FROM river_job WHERE id = $1 AND state = 'completed'`, forgotten.Job.ID) == 1
	})
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM reconciliation_runs`))

	// Another day is another run.
	args2, opts2 := jobs.ScheduledReconcile(day.AddDate(0, 0, -1))
	_, err = b.world.Jobs.River.Insert(ctx, args2, opts2)
	require.NoError(t, err)
	waitFor(t, "the other day's run", func() bool { return b.runs(t, "scheduled", "completed") == 2 })
}

// TestPeriodicReconcileSurvivesRestart: the periodic job inserts its day at
// start (RunOnStart) as well as at its tick; a second scheduler (a restart,
// or a new leader) inserting the same day runs nothing more.
func TestPeriodicReconcileSurvivesRestart(t *testing.T) {
	t.Parallel()
	schedule, err := jobs.ParseCron("0 2 * * *")
	require.NoError(t, err)
	b := setupReconcile(t, schedule)
	day := jobs.ScheduledDay(schedule, time.Now()).Format(time.DateOnly)
	waitFor(t, "the scheduled run at start", func() bool { return b.runs(t, "scheduled", "completed") == 1 })

	// A restart: the old client stops, a new one leads and inserts again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.world.Jobs.River.Stop(ctx))
	restarted, err := jobs.NewClient(b.world.Pool, jobs.Config{
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond, Register: b.register,
	})
	require.NoError(t, err)
	require.NoError(t, restarted.River.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = restarted.River.StopAndCancel(ctx)
	})
	waitFor(t, "the new leader's insert", func() bool {
		return b.world.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'reconcile'`) >= 1 &&
			b.world.Count(t, `SELECT count(*) FROM river_leader`) == 1
	})
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'reconcile'`))
	require.Equal(t, 1, b.world.Count(t, `SELECT count(*) FROM reconciliation_runs WHERE date = $1`, day))
}

// TestReconcileWorkerFailsTheRunWhenUnconfigured: without an API key a
// requested run fails at once with the reason, instead of retrying.
func TestReconcileWorkerFailsTheRunWhenUnconfigured(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t, nil)
	_, cfgErr := striperef.NewAPI(striperef.APIConfig{})
	b.worker.Runner = reconcile.New(reconcile.Config{Pool: b.world.Pool, Provider: reconcile.Unavailable(striperef.Name, cfgErr)})
	ctx := context.Background()
	tx, err := b.world.Pool.Begin(ctx)
	require.NoError(t, err)
	run, err := reconcile.CreateRunTx(ctx, tx, reconcile.DayScope(striperef.Name, time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)), reconcile.TriggerAPI, "token:test")
	require.NoError(t, err)
	require.NoError(t, b.world.Jobs.InsertReconcileTx(ctx, tx, run))
	require.NoError(t, tx.Commit(ctx))
	waitFor(t, "the failed run", func() bool { return b.runs(t, "api", "failed") == 1 })
	got, err := reconcile.GetRun(ctx, b.world.Pool, run.ID)
	require.NoError(t, err)
	require.Contains(t, got.Error, "PAYGATE_STRIPE_API_KEY")
}
