package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/outbox"
)

// The sweeper keeps invariant 7's promise that nothing is stranded. An
// event is "in flight" only while a live job names it (its process_event
// job, or the apply_events job of its ingest batch); a job
// can vanish while its event is still received (deleted in River UI,
// cancelled by hand, removed by River's retention), and nothing else would
// ever look at the event again. The sweeper finds those events and gives
// each a new job.
const (
	// SweepAfter is how long an event stays received without a live job
	// before the sweeper calls it stranded, counted from its arrival or its
	// last replay or sweep (inbox_events.requeued_at). The ingest path and
	// replays commit an event's status and its job together, so an event
	// without a job is stranded at once; the minute is a margin, not a
	// guess at how long jobs take.
	SweepAfter = time.Minute
	// SweepActor is the audit log's actor for the sweeper's re-enqueues.
	SweepActor = "sweeper"

	// sweepInterval is how often the sweep runs. An event whose job
	// vanished waits at most SweepAfter + sweepInterval before a new job
	// is enqueued.
	sweepInterval = 30 * time.Second
	// sweepBatch bounds one sweep transaction; a run takes up to
	// sweepMaxBatches of them.
	sweepBatch      = 1000
	sweepMaxBatches = 10
	// sweepLockKey makes sweeps take turns (after a leader change, two may
	// run at once); an arbitrary constant of ours.
	sweepLockKey = 7_236_000_003
)

// liveJobStates are the states of a job River will still work.
var liveJobStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRetryable,
	rivertype.JobStateRunning, rivertype.JobStateScheduled,
}

// sweepUnique makes a sweeper's job unique by its event among live jobs,
// under a key of the sweeper's own (ByQueue adds the queue to it): River's
// unique key leaves out the states, so a hand-off job (unique among every
// state) keeps holding its event's key once ended, until River's retention
// deletes it a day later, and a sweep sharing that key would be skipped as
// a duplicate all that day. The sweeper's jobs never meet a live hand-off
// job: it sweeps only events no live job names.
var sweepUnique = river.UniqueOpts{ByQueue: true, ByState: liveJobStates}

// InboxSweepArgs asks for one sweep of the inbox for stranded events.
type InboxSweepArgs struct{}

// Kind is stored in the database: never change it.
func (InboxSweepArgs) Kind() string { return "inbox_sweep" }

// InsertOpts puts the sweep on the events queue (many workers, short jobs:
// a long reconciliation on the maintenance queue never delays it), at most
// once per interval however many leaders come and go. A failed sweep is not
// retried: the next one comes soon.
func (InboxSweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueEvents, MaxAttempts: 1, UniqueOpts: river.UniqueOpts{ByPeriod: sweepInterval}}
}

// InboxSweepWorker runs the sweep.
type InboxSweepWorker struct {
	river.WorkerDefaults[InboxSweepArgs]
	sweeper *sweeper
}

// Work implements river.Worker.
func (w *InboxSweepWorker) Work(ctx context.Context, _ *river.Job[InboxSweepArgs]) error {
	rc, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	_, err = w.sweeper.sweep(ctx, rc)
	return err
}

func inboxSweepPeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(sweepInterval),
		func() (river.JobArgs, *river.InsertOpts) { return InboxSweepArgs{}, nil },
		&river.PeriodicJobOpts{ID: "inbox_sweep", RunOnStart: true})
}

// SweepInbox runs one sweep now, as the periodic inbox_sweep job does, and
// returns how many events it re-enqueued.
func (c *Client) SweepInbox(ctx context.Context) (int, error) {
	return c.sweeper.sweep(ctx, c.River)
}

type sweeper struct {
	pool        *pgxpool.Pool
	maxAttempts int
	logger      *slog.Logger
	swept       prometheus.Counter
}

func newSweeper(pool *pgxpool.Pool, config Config) *sweeper {
	s := &sweeper{
		pool:        pool,
		maxAttempts: config.ProcessMaxAttempts,
		logger:      config.Logger,
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "paygate_inbox_swept_total",
			Help: "Inbox events found received with no live job and re-enqueued by the sweeper.",
		}),
	}
	if config.Registerer != nil {
		config.Registerer.MustRegister(s.swept)
	}
	return s
}

func (s *sweeper) sweep(ctx context.Context, rc *river.Client[pgx.Tx]) (int, error) {
	total := 0
	for range sweepMaxBatches {
		found, swept, err := s.sweepBatch(ctx, rc)
		total += swept
		if err != nil || found < sweepBatch {
			return total, err
		}
	}
	return total, nil
}

// sweepStranded selects the stranded events (received, older than $1
// seconds by arrival and by last requeue, no live job of the kinds $3 names
// it), at most
// $2 of them, oldest first, and notes that they are requeued now. The rows
// are locked, skipping any another transaction holds (a worker recording a
// failure, an operator replaying or discarding): that event is looked at
// again next time. A row changed by a transaction that committed after this
// statement began is checked again in its new version, so an event replayed
// meanwhile (requeued_at just now) is left to its new job; one still
// stranded in its new version is left to the next sweep: the update below
// sees rows as they were when the statement began, and the new version's
// address is not among them.
//
// The received set is read from inbox_events_status_idx alone, oldest
// first; both it and the live jobs are small next to the whole inbox and
// job table, but not next to each other in a backlog, when every received
// event is named by a live job. So the events the live jobs name are read
// once, and each received event is looked up in them by hash (NOT IN over
// a hashed subplan, which sweepHashSQL lets the planner choose for as many
// as a backlog holds), instead of each live job's arguments being read
// again for each received event: 28,000 received events named by 1,000
// jobs took 4 s a sweep that way, 39 ms this way
// (TestSweepStaysLinearInABacklog). The status is a range of one
// value, not an equality, so that the order asked for (status, then
// arrival) is that index's alone (read backwards): with an equality the
// planner drops the status from the order, and the arrival index gives it
// too, which a plan made on the statistics of an empty inbox chose,
// filtering every event at every sweep. The rows the first step locked are
// then updated where they lie (their partition and row address, which no
// one else can move while the lock is held), a fetch each, with no join
// for a stale plan to turn into a scan per row
// (TestSweepReadsTheReceivedOnly).
const sweepStranded = `
	WITH live AS MATERIALIZED (
		SELECT j.args->>'provider' AS provider, j.args->>'event_id' AS event_id
		FROM river_job j
		WHERE j.kind = ANY($3)
		  AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
		  AND j.args ? 'event_id'
		UNION ALL
		SELECT j.args->>'provider', ids.event_id
		FROM river_job j,
		     jsonb_array_elements_text(CASE jsonb_typeof(j.args->'event_ids') WHEN 'array' THEN j.args->'event_ids' END) AS ids (event_id)
		WHERE j.kind = ANY($3)
		  AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')),
	stranded AS MATERIALIZED (
		SELECT e.tableoid AS partition, e.ctid AS row FROM inbox_events e
		WHERE e.status BETWEEN 'received' AND 'received'
		  AND e.received_at < now() - $1 * interval '1 second'
		  AND (e.requeued_at IS NULL OR e.requeued_at < now() - $1 * interval '1 second')
		  AND (e.provider, e.event_id) NOT IN (
			SELECT provider, event_id FROM live WHERE provider IS NOT NULL AND event_id IS NOT NULL)
		ORDER BY e.status DESC, e.received_at, e.id
		LIMIT $2
		FOR UPDATE OF e SKIP LOCKED)
	UPDATE inbox_events e SET requeued_at = now()
	WHERE e.ctid = ANY (ARRAY(SELECT row FROM stranded))
	  AND (e.tableoid, e.ctid) = ANY (ARRAY(SELECT (partition, row) FROM stranded))
	RETURNING e.provider, e.event_id`

// sweepHashSQL lets the sweep's transaction hash the events the live jobs
// name however many the planner expects (a hundred for each apply_events
// job: it cannot see into their arguments). A hashed subplan is chosen only
// when its expected size fits in work_mem (times hash_mem_multiplier), and
// the one alternative rereads every live job for each received event; the
// table takes what the live jobs actually name, a few megabytes for a
// hundred thousand events in flight.
const sweepHashSQL = `SELECT set_config('work_mem', '256MB', true)`

// sweepBatch re-enqueues up to sweepBatch stranded events in one
// transaction: their requeue time, their jobs and their audit entries
// commit together. It returns how many stranded events it found and how
// many it gave a job.
//
// Whether an event needs a job is decided by the database, never by a read
// followed by a write another instance could interleave with: sweeps take
// turns on a transaction-level advisory lock (one that finds it taken does
// nothing: the other is sweeping), and the jobs are unique by args among
// live jobs, so even two sweeps that did overlap could not give an event
// two.
func (s *sweeper) sweepBatch(ctx context.Context, rc *river.Client[pgx.Tx]) (found, swept int, err error) {
	var requeued []inbox.Key
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var ours bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, sweepLockKey).Scan(&ours); err != nil {
			return fmt.Errorf("take sweep lock: %w", err)
		}
		if !ours {
			return nil
		}
		if _, err := tx.Exec(ctx, sweepHashSQL); err != nil {
			return fmt.Errorf("find stranded events: %w", err)
		}
		// Planned by the indexes whatever the statistics were when this
		// connection made the plan it keeps (see sweepStranded).
		var keys []inbox.Key
		err := outbox.QueryByIndex(ctx, tx, func(rows pgx.Rows) error {
			var err error
			keys, err = pgx.CollectRows(rows, pgx.RowToStructByPos[inbox.Key])
			return err
		}, sweepStranded, SweepAfter.Seconds(), sweepBatch, eventJobKinds)
		if err != nil {
			return fmt.Errorf("find stranded events: %w", err)
		}
		found = len(keys)
		if found == 0 {
			return nil
		}
		params := uniqueProcessEvents(keys, s.maxAttempts, sweepUnique)
		results, err := rc.InsertManyTx(ctx, tx, params)
		if err != nil {
			return fmt.Errorf("enqueue %d stranded events: %w", len(keys), err)
		}
		for i, r := range results {
			if !r.UniqueSkippedAsDuplicate {
				requeued = append(requeued, keys[i])
			}
		}
		return inbox.AppendAuditTx(ctx, tx, inbox.ActionSweep,
			inbox.Operation{Actor: SweepActor, Reason: "received with no live job"}, requeued...)
	})
	if err != nil {
		return found, 0, fmt.Errorf("sweep inbox: %w", err)
	}
	if len(requeued) > 0 {
		s.swept.Add(float64(len(requeued)))
		s.logger.WarnContext(ctx, "re-enqueued stranded inbox events", "count", len(requeued),
			"first_event_id", requeued[0].EventID)
	}
	return found, len(requeued), nil
}
