package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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

// relayName is the endpoints' fan-out's place in the feed.
const relayName = "endpoints"

// fanOutBatch is how many messages one fan-out transaction hands on.
const fanOutBatch = 1000

// Relay moves messages from the outbox to the endpoints: it places new
// messages in the feed (outbox.Sequence), gives each to the endpoints
// subscribed to its type (a delivery each, in the transaction that
// advances the relay's place, so none is given twice or skipped), and
// queues a dispatcher for every endpoint with messages due. It wakes when
// a transaction writes messages (outbox.Channel) and every Interval, for
// retries that come due; any number of instances may run one.
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

// Step places every committed message in the feed, fans them all out,
// queues the dispatchers of the endpoints with messages due, and runs
// AfterStep.
func (r *Relay) Step(ctx context.Context) error {
	for {
		n, err := outbox.Sequence(ctx, r.config.Pool, 10*fanOutBatch)
		if err != nil {
			return err
		}
		if n < 10*fanOutBatch {
			break
		}
	}
	for {
		n, aggregates, err := FanOut(ctx, r.config.Pool, fanOutBatch)
		if err != nil {
			return err
		}
		// Those held behind a message a record settled while this batch
		// was being fanned out (the record could not see them).
		if err := Release(ctx, r.config.Pool, aggregates); err != nil {
			return err
		}
		if n < fanOutBatch {
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

// stepRest is the least time between two steps woken by notifications: a
// message waits at most this much longer to leave.
const stepRest = 100 * time.Millisecond

// sweepEvery is how often a relay looks at every held message, not only
// those of the batch it just fanned out.
const sweepEvery = 10 * time.Second

// Release lets go, at once, every message of aggregates (every object when
// nil) held at 'infinity' behind an earlier message of its object that is
// no longer pending at that endpoint. The fan-out and the dispatchers'
// records do not lock each other out: a record that settles a message
// cannot see a successor a concurrent fan-out has not committed yet, so
// that successor is released here, after the fan-out committed.
func Release(ctx context.Context, pool *pgxpool.Pool, aggregates []string) error {
	if aggregates != nil && len(aggregates) == 0 {
		return nil
	}
	_, err := pool.Exec(ctx, releaseHeads, aggregates, nil)
	if err != nil {
		return fmt.Errorf("release held messages: %w", err)
	}
	return nil
}

// FanOut hands up to limit placed messages after the relay's place to the
// endpoints subscribed to their types (created before the message), in one
// transaction with the relay's move, and returns how many messages it
// read (0 when another instance is fanning out) and their objects.
func FanOut(ctx context.Context, pool *pgxpool.Pool, limit int) (int, []string, error) {
	var (
		n    int
		aggs []string
	)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lazyCommit(ctx, tx); err != nil {
			return err
		}
		from, err := outbox.LockRelayTx(ctx, tx, relayName)
		if errors.Is(err, outbox.ErrRelayBusy) {
			return nil
		}
		if err != nil {
			return err
		}
		msgs, err := outbox.ReadHeaders(ctx, tx, from, limit)
		if err != nil || len(msgs) == 0 {
			return err
		}
		n = len(msgs)
		aggs = make([]string, n)
		var (
			ids, types      = make([]string, n), make([]string, n)
			created         = make([]time.Time, n)
			seqs, positions = make([]int64, n), make([]int64, n)
		)
		for i, m := range msgs {
			ids[i], types[i], aggs[i] = m.ID, m.Type, string(m.AggregateType)+"/"+m.AggregateID
			created[i], seqs[i], positions[i] = m.CreatedAt, m.Sequence, m.Position
		}
		// A message goes at once when it is the first of its object in the
		// batch and nothing of its object is pending at the endpoint (what
		// is pending there is older: messages are handed on in order);
		// otherwise it waits at 'infinity' for the record that settles its
		// predecessor. The pending objects are looked up once for the
		// batch, by the order index.
		if _, err := tx.Exec(ctx, `
			WITH m AS (
				SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::bigint[], $6::bigint[])
					AS m(id, created_at, type, aggregate, sequence, position)
			), waiting AS MATERIALIZED (
				SELECT DISTINCT p.aggregate, p.endpoint_id FROM deliveries p
				WHERE p.aggregate = ANY($4::text[]) AND p.status = 'pending'
			)
			INSERT INTO deliveries (endpoint_id, message_id, message_created_at, type, aggregate, sequence, position, next_attempt_at)
			SELECT e.id, m.id, m.created_at, m.type, m.aggregate, m.sequence, m.position,
				CASE WHEN row_number() OVER (PARTITION BY e.id, m.aggregate ORDER BY m.sequence) = 1 AND w.aggregate IS NULL
				     THEN now() ELSE 'infinity' END
			FROM m
			JOIN endpoints e ON (e.event_types @> ARRAY['*'] OR e.event_types @> ARRAY[m.type]) AND e.created_at <= m.created_at
			LEFT JOIN waiting w ON w.aggregate = m.aggregate AND w.endpoint_id = e.id
			ORDER BY m.position
			ON CONFLICT (endpoint_id, message_id) DO NOTHING`,
			ids, created, types, aggs, seqs, positions); err != nil {
			return err
		}
		aggs = slices.Compact(slices.Sorted(slices.Values(aggs)))
		return outbox.AdvanceRelayTx(ctx, tx, relayName, msgs[n-1].Position)
	})
	if err != nil {
		return 0, nil, fmt.Errorf("fan out messages: %w", err)
	}
	return n, aggs, nil
}

// Kick queues a dispatcher for every enabled endpoint with a message due;
// one that has a dispatcher queued or running already is left to it (the
// job is unique per endpoint).
func Kick(ctx context.Context, pool *pgxpool.Pool, rc *river.Client[pgx.Tx]) error {
	rows, err := pool.Query(ctx, `
		SELECT e.id FROM endpoints e WHERE e.status = 'enabled' AND EXISTS (
			SELECT 1 FROM deliveries d WHERE d.endpoint_id = e.id AND d.status = 'pending' AND d.next_attempt_at <= now())`)
	if err != nil {
		return fmt.Errorf("find endpoints with messages due: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		return err
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
