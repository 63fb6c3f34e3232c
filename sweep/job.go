package sweep

import (
	"context"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Queue is the sweep's River queue: one worker an instance, away from the
// events and the maintenance jobs a sweep must not hold up.
const Queue = "sweep"

// Slice is how long one job sweeps before it lets the queue go (snoozed,
// it goes on from its place at once): a first sweep of a busy account lists
// for a while.
const Slice = 5 * time.Minute

// liveStates are the states of a job that has not ended: a sweep job is
// unique among them, so one sweep of a provider runs at a time across
// instances, however many leaders come and go.
var liveStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
	rivertype.JobStateRunning, rivertype.JobStateScheduled,
}

// Args asks for one sweep of a provider's events list.
type Args struct {
	Provider string `json:"provider"`
}

// Kind is stored in the database: never change it.
func (Args) Kind() string { return "sweep_provider_events" }

// InsertOpts puts the sweep on its queue, one live job per provider.
func (Args) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 5,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: liveStates}}
}

// Worker runs the periodic sweep, Slice at a time.
type Worker struct {
	river.WorkerDefaults[Args]
	Sweeper *Sweeper
}

// Timeout lets a slice end, with its last page, before River calls the job
// stuck.
func (w *Worker) Timeout(*river.Job[Args]) time.Duration { return Slice + time.Minute }

// Work implements river.Worker. A slice that ended mid-window is snoozed
// (which spends no attempt) to go on; a failing API ends the job, and the
// next period goes on from the place kept. Only the database's failures
// are the job's.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	if job.Args.Provider != w.Sweeper.Provider() {
		return river.JobCancel(errUnknownProvider(job.Args.Provider))
	}
	outcome, _, err := w.Sweeper.Run(ctx, time.Now().Add(Slice), nil)
	if err != nil {
		return err
	}
	if outcome == OutcomePaused {
		return river.JobSnooze(time.Second)
	}
	return nil
}

type errUnknownProvider string

func (e errUnknownProvider) Error() string { return "no sweep of provider " + string(e) + " here" }

// Register returns a jobs.Config.Register hook adding the worker and the
// periodic job that sweeps every every (its first run one period after a
// leader starts: a restart does not sweep, Stripe still retrying what the
// restart missed).
func Register(s *Sweeper, every time.Duration) func(*river.Workers) []*river.PeriodicJob {
	return func(w *river.Workers) []*river.PeriodicJob {
		river.AddWorker(w, &Worker{Sweeper: s})
		return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(every),
			func() (river.JobArgs, *river.InsertOpts) { return Args{Provider: s.Provider()}, nil },
			&river.PeriodicJobOpts{ID: "sweep_" + s.Provider()})}
	}
}

// QueueConfig is the sweep queue's configuration for jobs.Config.Queues.
func QueueConfig() river.QueueConfig { return river.QueueConfig{MaxWorkers: 1} }
