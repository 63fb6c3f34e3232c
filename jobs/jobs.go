// Package jobs owns paygate's background work on River: the job kinds and
// their arguments, the workers, the periodic jobs and the client's
// configuration.
//
// Every job that follows a state change is inserted in the same transaction
// as the change (River's InsertTx): the transactional outbox. Job kinds are
// stable snake_case strings stored in the database; they outlive any rename
// of the Go types. This package must never parse HTTP.
package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/provider"
)

// Queues. Events have their own queue so that a slow SMTP server or a long
// reconciliation never holds back the ledger.
const (
	QueueEvents      = "events"
	QueueEmail       = "email"
	QueueMaintenance = river.QueueDefault
)

// DefaultProcessMaxAttempts is how many times an event is tried before it
// becomes poison.
const DefaultProcessMaxAttempts = 10

// ProcessEventArgs asks for one inbox event to be applied. It carries only
// the key: the payload stays in the inbox, so job rows (and River's UI) never
// hold payment data.
type ProcessEventArgs struct {
	Provider string `json:"provider"`
	EventID  string `json:"event_id"`
}

// Kind is stored in the database: never change it.
func (ProcessEventArgs) Kind() string { return "process_event" }

// InsertOpts puts events on their own queue.
func (ProcessEventArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueEvents}
}

// ApplyEventsArgs asks for the new events of one ingest batch to be
// applied: the webhook path commits them with this one job instead of a job
// each (River's job row is written three times, at insert, fetch and
// completion, and was a third of the database's time at one per event).
// An event the batch cannot apply is handed to a process_event job of its
// own, which retries it and makes it poison; so an apply_events job itself
// fails only when that hand-off does. Like ProcessEventArgs it carries
// only keys.
type ApplyEventsArgs struct {
	Provider string   `json:"provider"`
	EventIDs []string `json:"event_ids"`
}

// Kind is stored in the database: never change it.
func (ApplyEventsArgs) Kind() string { return "apply_events" }

// InsertOpts puts ingest batches on the events queue.
func (ApplyEventsArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueEvents}
}

// eventJobKinds are the kinds of the jobs that apply inbox events: an
// event is in flight while a live job of one of them names it.
var eventJobKinds = []string{ProcessEventArgs{}.Kind(), ApplyEventsArgs{}.Kind()}

// EventJobsSQL selects one row (job_id, kind, state, provider, event_id) for
// each inbox event a job names, whichever kind the job is: for diagnostics
// and tests, as a subquery (FROM (...) j). Not indexed by event: the
// sweeper asks River's state-led index instead.
const EventJobsSQL = `
	SELECT id AS job_id, kind, state, args->>'provider' AS provider, args->>'event_id' AS event_id
	FROM river_job WHERE kind = 'process_event'
	UNION ALL
	SELECT j.id, j.kind, j.state, j.args->>'provider', ids.id
	FROM river_job j, jsonb_array_elements_text(j.args->'event_ids') AS ids(id) WHERE j.kind = 'apply_events'`

// Config configures the River client and its workers.
type Config struct {
	Logger             *slog.Logger
	ProcessMaxAttempts int // default DefaultProcessMaxAttempts
	// EventWorkers is how many jobs of the events queue run at once
	// (apply_events, one ingest batch each, and process_event, one event
	// each); default 32. A running job mostly waits for the batch its
	// events are applied in, so this bounds how many events the apply
	// batches can gather, not how much work runs at once: EventAppliers is
	// that. At make bench's 64 connections an ingest batch holds about 20
	// events, so 32 jobs gather about 640, enough for two apply batches of
	// 150 to 250; many more would leave jobs waiting, their timeout
	// running, while applying rests for ingest (64 measured no better).
	EventWorkers int
	// EventAppliers is how many batches of events are applied at once;
	// default 2.
	EventAppliers int
	// IngestPressure, when set, reports that webhook requests are waiting
	// on their commits in numbers (webhook.BatchIngester.UnderPressure).
	// Applying then rests between batches, so that acknowledging comes
	// first; it never stops (see applyQueue).
	IngestPressure func() bool
	// JobTimeout bounds one attempt. River only rescues a job left running
	// by a crashed process after RescueStuckJobsAfter, so both are set
	// deliberately short: an acknowledged event must be applied within a
	// minute of a restart. River's rescuer looks every 30 seconds (fixed)
	// on the leader, so the worst case is RescueStuckJobsAfter plus a
	// rescuer period plus the first retry's backoff: about 50s with these
	// defaults (the reliability suite measures it). Workers with a longer
	// Timeout of their own (reconcile, send_email) are not rescued before
	// it elapses: River honours per-worker timeouts.
	JobTimeout           time.Duration // default 10s
	RescueStuckJobsAfter time.Duration // default 15s
	// FetchCooldown and FetchPollInterval tune how quickly workers pick up
	// new jobs (River's defaults when zero); tests shorten them.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
	// Registerer, when set, gets the metrics of applying events and of the
	// inbox sweeper.
	Registerer prometheus.Registerer
	// InsertOnly builds a client that inserts but works no jobs.
	InsertOnly bool
	// StripeReferenceKey is the metadata key of a Stripe payment's order
	// reference (PAYGATE_STRIPE_REFERENCE_KEY); default
	// stripe.DefaultReferenceKey.
	StripeReferenceKey string
	// Email configures the send_email worker (SMTP, sender, ops address).
	Email EmailConfig
	// Refunders are the providers' refund clients, by provider name, for
	// the submit_refund worker; a provider without one cannot be asked for
	// refunds (see Client.CanRefund).
	Refunders map[string]provider.Refunder
	// ReportDownloaders are the providers' report clients, by provider
	// name, for the download_report worker; a report announced by a
	// provider without one is refused, with the reason.
	ReportDownloaders map[string]ReportDownloader
	// RefundCallTimeout bounds one call to a provider's refund API;
	// default 30s. A call cut off is indeterminate and retried with the
	// same key.
	RefundCallTimeout time.Duration
	// PayloadRetention is how long inbox payloads are kept; zero keeps them
	// forever (see InboxPartitionsWorker).
	PayloadRetention time.Duration
	// MessageRetention is how long outbox messages are kept
	// (PAYGATE_MESSAGE_RETENTION); zero: outbox.DefaultRetention.
	MessageRetention time.Duration
	// Extra lets other packages register their workers and periodic jobs.
	Register func(*river.Workers) []*river.PeriodicJob
	// Queues are the queues of the workers Register adds, beside
	// paygate's own.
	Queues map[string]river.QueueConfig
	// TracerProvider, when tracing is on (package tracing), traces every
	// job's work (River's otelriver middleware) and each batch of events
	// applied; nil: nothing is traced and nothing is installed.
	TracerProvider trace.TracerProvider
}

func (c *Config) withDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ProcessMaxAttempts <= 0 {
		c.ProcessMaxAttempts = DefaultProcessMaxAttempts
	}
	if c.EventWorkers <= 0 {
		c.EventWorkers = 32
	}
	if c.JobTimeout <= 0 {
		c.JobTimeout = 10 * time.Second
	}
	if c.RescueStuckJobsAfter <= 0 {
		c.RescueStuckJobsAfter = 15 * time.Second
	}
	if c.RefundCallTimeout <= 0 {
		c.RefundCallTimeout = 30 * time.Second
	}
}

// eventsFetchCooldown lets the events queue fetch again 2 ms after its last
// fetch. River's default, 100 ms, caps a queue at MaxWorkers jobs per 100 ms
// (200 events/s with 20 workers, whatever the machine), while a
// process_event job takes a few milliseconds; see docs/performance.md.
const eventsFetchCooldown = 2 * time.Millisecond

// Client is the River client with paygate's insert helpers.
type Client struct {
	River   *river.Client[pgx.Tx]
	config  Config
	sweeper *sweeper
	filler  *detailsFiller
	queues  []string
}

// NewClient builds the River client with every paygate worker registered.
func NewClient(pool *pgxpool.Pool, config Config) (*Client, error) {
	config.withDefaults()
	workers := river.NewWorkers()
	processEvent, applyEvents := eventWorkers(pool, config.Logger, config.Email.OpsEmail, NewMappers(config.StripeReferenceKey), config.EventAppliers,
		config.ProcessMaxAttempts, config.IngestPressure, config.Registerer, config.TracerProvider)
	river.AddWorker(workers, processEvent)
	river.AddWorker(workers, applyEvents)
	emailWorker, err := NewSendEmailWorker(pool, config.Email, config.Logger)
	if err != nil {
		return nil, err
	}
	river.AddWorker(workers, emailWorker)
	river.AddWorker(workers, NewSendEmailsWorker(emailWorker))
	river.AddWorker(workers, &IdempotencyPurgeWorker{Pool: pool})
	river.AddWorker(workers, &InboxPartitionsWorker{Pool: pool, Retention: config.PayloadRetention,
		MessageRetention: config.MessageRetention, Logger: config.Logger})
	river.AddWorker(workers, &SubmitRefundWorker{pool: pool, refunders: config.Refunders,
		opsEmail: config.Email.OpsEmail, logger: config.Logger, now: time.Now, callTimeout: config.RefundCallTimeout})
	river.AddWorker(workers, NewReportWorker(ReportWorkerConfig{Pool: pool, Downloaders: config.ReportDownloaders,
		OpsEmail: config.Email.OpsEmail, Logger: config.Logger}))
	sweeper := newSweeper(pool, config)
	river.AddWorker(workers, &InboxSweepWorker{sweeper: sweeper})
	river.AddWorker(workers, &BalanceSnapshotsWorker{Pool: pool, Logger: config.Logger})
	filler := newDetailsFiller(pool, config)
	river.AddWorker(workers, &FillDetailsWorker{filler: filler})
	var periodic []*river.PeriodicJob
	if config.Register != nil {
		periodic = config.Register(workers)
	}
	periodic = append(periodic, idempotencyPurgePeriodic(), inboxSweepPeriodic(), inboxPartitionsPeriodic(),
		balanceSnapshotsPeriodic(), fillDetailsPeriodic())
	rc := &river.Config{
		Logger:               config.Logger,
		JobTimeout:           config.JobTimeout,
		RescueStuckJobsAfter: config.RescueStuckJobsAfter,
		Workers:              workers,
		PeriodicJobs:         periodic,
		FetchCooldown:        config.FetchCooldown,
		FetchPollInterval:    config.FetchPollInterval,
		Middleware:           riverMiddleware(config.TracerProvider),
	}
	rc.ReindexerIndexNames = reindexedIndexes()
	if !config.InsertOnly && !mayReindex(pool) {
		// River's nightly REINDEX needs the job table's owner; as the app
		// role it would only log an error every night.
		config.Logger.Info("River's reindexer is off: the database role does not own river_job; " +
			"its owner may run REINDEX TABLE CONCURRENTLY river_job when its indexes bloat")
		rc.ReindexerIndexNames = []string{}
	}
	if !config.InsertOnly {
		rc.Queues = map[string]river.QueueConfig{
			QueueEvents:      {MaxWorkers: config.EventWorkers, FetchCooldown: eventsFetchCooldown},
			QueueEmail:       {MaxWorkers: 5},
			QueueMaintenance: {MaxWorkers: 2},
		}
		for name, q := range config.Queues {
			rc.Queues[name] = q
		}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), rc)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	return &Client{River: client, config: config, sweeper: sweeper, filler: filler, queues: slices.Sorted(maps.Keys(rc.Queues))}, nil
}

// Queues names the queues this client works, sorted; none when it only
// inserts.
func (c *Client) Queues() []string { return c.queues }

// CanRefund reports whether refunds can be started at provider: whether a
// refund client is configured for it.
func (c *Client) CanRefund(provider string) bool {
	_, ok := c.config.Refunders[provider]
	return ok
}

// droppedRiverIndexes are River's indexes that migration
// 0015_river_job_gin_indexes.sql drops.
var droppedRiverIndexes = []string{"river_job_args_index", "river_job_metadata_index"}

// reindexedIndexes is River's list of indexes to rebuild nightly without
// droppedRiverIndexes, which its reindexer would otherwise look for, and
// warn about, every night.
func reindexedIndexes() []string {
	names := river.ReindexerIndexNamesDefault()
	return slices.DeleteFunc(names, func(n string) bool { return slices.Contains(droppedRiverIndexes, n) })
}

// mayReindex reports whether the pool's role may reindex River's job table:
// its owner, a member of the owner's role, or a superuser. Not the case for
// migrations.AppRole, which owns nothing. When the answer cannot be had
// (River's tables are not there yet, the database is slow), River keeps
// its default.
func mayReindex(pool *pgxpool.Pool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var may bool
	err := pool.QueryRow(ctx, `SELECT pg_has_role(current_user, relowner, 'USAGE')
		FROM pg_class WHERE oid = to_regclass('river_job')`).Scan(&may)
	return err != nil || may
}

// InsertProcessEventTx enqueues processing of one inbox event in tx.
func (c *Client) InsertProcessEventTx(ctx context.Context, tx pgx.Tx, provider, eventID string) error {
	_, err := c.River.InsertTx(ctx, tx, ProcessEventArgs{Provider: provider, EventID: eventID},
		&river.InsertOpts{MaxAttempts: c.config.ProcessMaxAttempts})
	if err != nil {
		return fmt.Errorf("enqueue process_event %s: %w", eventID, err)
	}
	return nil
}

// InsertApplyEventsTx enqueues the applying of the new events of one ingest
// batch in tx: one apply_events job for up to maxApplyBatch of them.
func (c *Client) InsertApplyEventsTx(ctx context.Context, tx pgx.Tx, provider string, eventIDs []string) error {
	return c.InsertApplyEventsLinkedTx(ctx, tx, provider, eventIDs, nil)
}

// InsertApplyEventsLinkedTx is InsertApplyEventsTx for events received in
// traced requests: ingest[i] is the span eventIDs[i] was received in (nil:
// none), kept in its job's metadata so that the span of the batch that
// applies it links to it.
func (c *Client) InsertApplyEventsLinkedTx(ctx context.Context, tx pgx.Tx, provider string, eventIDs []string, ingest []trace.SpanContext) error {
	var params []river.InsertManyParams
	for start := 0; start < len(eventIDs); start += maxApplyBatch {
		end := min(start+maxApplyBatch, len(eventIDs))
		opts := &river.InsertOpts{MaxAttempts: c.config.ProcessMaxAttempts}
		if ingest != nil {
			opts.Metadata = ingestMetadata(ingest[start:end])
		}
		params = append(params, river.InsertManyParams{
			Args:       ApplyEventsArgs{Provider: provider, EventIDs: eventIDs[start:end:end]},
			InsertOpts: opts,
		})
	}
	if len(params) == 0 {
		return nil
	}
	if _, err := c.River.InsertManyFastTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue apply_events for %d events: %w", len(eventIDs), err)
	}
	return nil
}

// uniqueProcessEvents are the insert parameters of a process_event job for
// each of keys, unique by its event as unique says: the sweeper's and the
// apply_events hand-off's, whose jobs must never double an event's.
func uniqueProcessEvents(keys []inbox.Key, maxAttempts int, unique river.UniqueOpts) []river.InsertManyParams {
	unique.ByArgs = true
	params := make([]river.InsertManyParams, len(keys))
	for i, k := range keys {
		params[i] = river.InsertManyParams{
			Args: ProcessEventArgs{Provider: k.Provider, EventID: k.EventID},
			InsertOpts: &river.InsertOpts{
				MaxAttempts: maxAttempts,
				UniqueOpts:  unique,
			},
		}
	}
	return params
}

// InsertProcessEventsTx enqueues processing of several inbox events in tx,
// a job each, with one round trip.
func (c *Client) InsertProcessEventsTx(ctx context.Context, tx pgx.Tx, provider string, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(eventIDs))
	for i, id := range eventIDs {
		params[i] = river.InsertManyParams{
			Args:       ProcessEventArgs{Provider: provider, EventID: id},
			InsertOpts: &river.InsertOpts{MaxAttempts: c.config.ProcessMaxAttempts},
		}
	}
	if _, err := c.River.InsertManyFastTx(ctx, tx, params); err != nil {
		return fmt.Errorf("enqueue %d process_event jobs: %w", len(eventIDs), err)
	}
	return nil
}
