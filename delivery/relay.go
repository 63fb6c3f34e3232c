package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/paygate/paygate/outbox"
)

// QueueDelivery is the River queue of the dispatchers: their own, so an
// endpoint that hangs never holds a worker that applies events or sends
// email.
const QueueDelivery = "delivery"

// DeliverArgs asks for endpoint EndpointID's due messages to be sent. One
// such job per endpoint is queued or running at a time (unique by args):
// it sends until nothing is due.
type DeliverArgs struct {
	EndpointID string `json:"endpoint_id"`
}

// Kind is stored in the database: never change it.
func (DeliverArgs) Kind() string { return "deliver_endpoint" }

// InsertOpts puts dispatchers on their queue, one per endpoint.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueDelivery, MaxAttempts: 25, UniqueOpts: river.UniqueOpts{
		ByArgs: true,
		ByState: []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStatePending,
			rivertype.JobStateRunning, rivertype.JobStateRetryable, rivertype.JobStateScheduled},
	}}
}

// DeliverWorker runs a Dispatcher for one endpoint.
type DeliverWorker struct {
	river.WorkerDefaults[DeliverArgs]
	Dispatcher *Dispatcher
}

// Timeout lets a dispatcher send for a while: Dispatch stops claiming when
// less than one attempt's time (and 5 s) is left, and the relay queues the
// next job. It is also how long an endpoint waits after a crash: River
// rescues the crashed process's job (unique per endpoint) only once it
// elapsed, so it is kept short.
func (w *DeliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return w.Dispatcher.config.Sender.Timeout() + 15*time.Second
}

// Work implements river.Worker.
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	rc, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	_, err = w.Dispatcher.Dispatch(ctx, rc, job.Args.EndpointID)
	return err
}

// Relay places new messages in the feed (outbox.Sequence) and queues a
// dispatcher for every endpoint with messages to send: placed after its
// place in the feed, or pending and due. Each endpoint's dispatcher reads
// the feed from its own place and writes a message's delivery row with its
// first outcome (Dispatcher), so no row is written per message before it
// is sent. The relay wakes when a transaction writes messages
// (outbox.Channel) and every Interval, for retries that come due; any
// number of instances may run one.
type Relay struct {
	config RelayConfig
	swept  time.Time // the last Release of every held message
}

// RelayConfig configures a Relay.
type RelayConfig struct {
	Pool   *pgxpool.Pool
	River  *river.Client[pgx.Tx]
	Logger *slog.Logger
	// Interval is the longest wait between steps; default 1s.
	Interval time.Duration
	// AfterStep, when set, runs at the end of each step, once new messages
	// have their places: the other relays' kick (the NATS publisher's).
	AfterStep func(ctx context.Context) error
}

// NewRelay returns a relay.
func NewRelay(config RelayConfig) *Relay {
	if config.Logger == nil {
		config.Logger = slog.New(slog.DiscardHandler)
	}
	if config.Interval <= 0 {
		config.Interval = time.Second
	}
	return &Relay{config: config}
}

// Run steps until ctx ends, woken by outbox.Channel or every Interval.
func (r *Relay) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		r.config.Logger.WarnContext(ctx, "message relay: listening failed; polling until it works again", "error", err.Error())
		// Without notifications, poll.
		for range 5 {
			if r.stepLogged(ctx); ctx.Err() != nil {
				return
			}
			sleep(ctx, r.config.Interval)
		}
	}
}

// listen holds a connection listening on outbox.Channel and steps at each
// notification, or after Interval without one; it returns when the
// connection fails.
func (r *Relay) listen(ctx context.Context) error {
	conn, err := r.config.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `LISTEN `+outbox.Channel); err != nil {
		conn.Conn().Close(ctx) //nolint:errcheck // a connection in an unknown state must not return to the pool
		return err
	}
	defer func() {
		// Back to the pool not listening.
		_, _ = conn.Exec(context.WithoutCancel(ctx), `UNLISTEN *`)
	}()
	for {
		r.stepLogged(ctx)
		// Under load every apply transaction notifies: resting a moment
		// after a step lets the next one take what committed meanwhile in
		// one go, rather than stepping per commit. Notifications that came
		// in the rest are still queued on the connection.
		sleep(ctx, stepRest)
		wait, cancel := context.WithTimeout(ctx, r.config.Interval)
		_, err := conn.Conn().WaitForNotification(wait)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			conn.Conn().Close(ctx) //nolint:errcheck // see above
			return err
		}
	}
}

func (r *Relay) stepLogged(ctx context.Context) {
	if err := r.Step(ctx); err != nil && ctx.Err() == nil {
		r.config.Logger.WarnContext(ctx, "message relay step failed; retrying", "error", err.Error())
	}
}

// Step places every committed message in the feed, lets go the messages
// held behind settled ones that a record could not see (every
// sweepEvery), queues the dispatchers of the endpoints with messages to
// send, and runs AfterStep.
func (r *Relay) Step(ctx context.Context) error {
	for {
		n, err := outbox.Sequence(ctx, r.config.Pool, sequenceBatch)
		if err != nil {
			return err
		}
		if n < sequenceBatch {
			break
		}
	}
	if time.Since(r.swept) > sweepEvery {
		if err := Release(ctx, r.config.Pool, nil); err != nil {
			return err
		}
		r.swept = time.Now()
	}
	if err := Kick(ctx, r.config.Pool, r.config.River); err != nil {
		return err
	}
	if r.config.AfterStep != nil {
		return r.config.AfterStep(ctx)
	}
	return nil
}

// kickSQL finds the endpoints Kick queues a dispatcher for ($1 is
// kickLookahead), by the feed's position index from each endpoint's place.
// Run by outbox.QueryByIndex: a plan made on the statistics of an empty
// or small feed (autovacuum analyzes a new database's tables early) sorts
// a sequential scan of every message instead, and the relay's connection
// kept it while the feed grew: the whole feed read at every step, ten
// times a second under load (TestKickReadsWhatItLooksAt).
const kickSQL = `
		SELECT e.id FROM endpoints e
		WHERE e.status = 'enabled' AND (
			EXISTS (SELECT 1 FROM deliveries d WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.next_attempt_at <= now())
			OR EXISTS (
				SELECT 1 FROM (SELECT m.type, m.created_at FROM messages m WHERE m.position > e.handed_through
				               ORDER BY m.position LIMIT $1) m
				WHERE m.created_at >= e.created_at AND (e.event_types @> ARRAY['*'] OR e.event_types @> ARRAY[m.type]))
			OR e.handed_through < (SELECT last_position FROM message_sequencer) - $1)`

// kickLookahead is how far past an endpoint's place Kick looks for a
// message of its types.
const kickLookahead = 256

// sequenceBatch is how many messages one sequencer transaction places.
const sequenceBatch = 10_000

// stepRest is the least time between two steps woken by notifications: a
// message waits at most this much longer to leave.
const stepRest = 100 * time.Millisecond

// sweepEvery is how often a relay looks at every held message, not only
// those a record held.
const sweepEvery = 10 * time.Second

// Release lets go, at once, every message of aggregates (every object when
// nil) held at 'infinity' behind an earlier message of its object that is
// no longer pending at that endpoint. Records do not lock each other out:
// a record that settles a message cannot see a successor a concurrent
// record is holding behind it, so that successor is released here, after
// the holding record committed.
func Release(ctx context.Context, pool *pgxpool.Pool, aggregates []string) error {
	if aggregates != nil && len(aggregates) == 0 {
		return nil
	}
	// By the pending messages' own index (QueryByIndex), not the
	// endpoints' every delivery, whatever the
	// statistics were when the connection made the plan it keeps
	// (TestReleaseReadsThePendingOnly).
	if err := outbox.QueryByIndex(ctx, pool, nil, releaseHeads, aggregates, nil); err != nil {
		return fmt.Errorf("release held messages: %w", err)
	}
	return nil
}

// Kick queues a dispatcher for every enabled endpoint with messages to
// send: of its types among the first kickLookahead placed after its place
// in the feed, or pending and due; and for one more than kickLookahead
// behind, whose dispatcher moves its place past what is not of its types.
// One that has a dispatcher queued or running already is left to it (the
// job is unique per endpoint).
func Kick(ctx context.Context, pool *pgxpool.Pool, rc *river.Client[pgx.Tx]) error {
	// By the index (QueryByIndex): the relay's connection keeps its plan,
	// which must go by the feed's position whatever the statistics were
	// when it was made (see kickSQL).
	var ids []string
	err := outbox.QueryByIndex(ctx, pool, func(rows pgx.Rows) error {
		var err error
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}, kickSQL, kickLookahead)
	if err != nil {
		return fmt.Errorf("find endpoints with messages to send: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	params := make([]river.InsertManyParams, len(ids))
	for i, id := range ids {
		params[i] = river.InsertManyParams{Args: DeliverArgs{EndpointID: id}}
	}
	if _, err := rc.InsertMany(ctx, params); err != nil {
		return fmt.Errorf("queue dispatchers of %d endpoints: %w", len(ids), err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
