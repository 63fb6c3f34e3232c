package delivery

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/outbox"
)

// DefaultSchedule is the wait before each retry of a failed attempt
// (Svix's and Standard Webhooks' schedule: the last try about 27 h after
// the first); PAYGATE_DELIVERY_RETRY_SCHEDULE replaces it.
var DefaultSchedule = []time.Duration{
	5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
}

// DefaultDisableAfter is how long an endpoint may fail every attempt
// before it is disabled (Svix's 120 h).
const DefaultDisableAfter = 120 * time.Hour

// DefaultMaxInFlight bounds the messages being sent to one endpoint at
// once, across instances: a slow endpoint ties up this many, never more.
const DefaultMaxInFlight = 32

// maxRetryAfterHonoured is the longest Retry-After a 429 or 503 may ask
// for; a longer one is taken as the schedule's delay.
const maxRetryAfterHonoured = time.Hour

// ParseSchedule reads a comma-separated list of Go durations
// ("5s,5m,30m,2h"), each positive.
func ParseSchedule(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("retry schedule %q: %q is not a positive duration such as 5s or 2h", s, part)
		}
		out = append(out, d)
	}
	return out, nil
}

// jitter spreads d by ±20 %, so endpoints that failed together are not
// retried in one burst.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	Pool   *pgxpool.Pool
	Sender *Sender
	// Schedule, DisableAfter and MaxInFlight default to DefaultSchedule,
	// DefaultDisableAfter and DefaultMaxInFlight.
	Schedule     []time.Duration
	DisableAfter time.Duration
	MaxInFlight  int
	// OpsEmail gets the endpoint_disabled emails.
	OpsEmail string
	Logger   *slog.Logger
	Metrics  *Metrics // nil: none
	// Jitter spreads a delay; default ±20 %. Tests make it exact.
	Jitter func(time.Duration) time.Duration
}

// Dispatcher sends an endpoint's due messages: it claims them (at most
// MaxInFlight at a time per endpoint, each message after the earlier
// messages of its object), sends them in parallel, and records every
// outcome with the next attempt in one transaction.
type Dispatcher struct {
	config DispatcherConfig
}

// NewDispatcher returns a dispatcher.
func NewDispatcher(config DispatcherConfig) *Dispatcher {
	if len(config.Schedule) == 0 {
		config.Schedule = DefaultSchedule
	}
	if config.DisableAfter <= 0 {
		config.DisableAfter = DefaultDisableAfter
	}
	if config.MaxInFlight <= 0 {
		config.MaxInFlight = DefaultMaxInFlight
	}
	if config.Logger == nil {
		config.Logger = slog.New(slog.DiscardHandler)
	}
	if config.Jitter == nil {
		config.Jitter = jitter
	}
	return &Dispatcher{config: config}
}

// claimed is one delivery a dispatcher holds while it sends it.
type claimed struct {
	messageID      string
	createdAt      time.Time // the message's, its partition key
	aggregate      string
	attempts       int
	seriesAttempts int
	trigger        string
	body           []byte
}

// Timeout is the longest one attempt takes.
func (s *Sender) Timeout() time.Duration { return s.timeout }

// dispatch is one run of an endpoint's dispatcher: the connection that
// holds its advisory lock, the messages its lanes are sending, and the
// endpoint's in-flight slots.
type dispatch struct {
	endpointID string
	mu         sync.Mutex // the connection, claims and inFlight
	conn       *pgxpool.Conn
	inFlight   map[string]bool // claimed and not yet recorded
	sending    chan struct{}   // a slot per request in flight
}

// Dispatch sends endpoint endpointID's due messages until none is left or
// ctx is nearly done, and returns how many attempts it made. rc enqueues
// the ops email of an endpoint it disables.
//
// One dispatcher of an endpoint runs at a time across instances: it holds
// a session advisory lock, let go with its connection if its process dies,
// and another returns at once, leaving the messages to it. So a claim is
// a read on that connection, not a row written per message: the messages
// a dispatcher is sending are known to it alone, and a crashed one's are
// simply due again (delivery is at least once, under the same webhook-id).
// Claims read on the lock's connection, so a dispatcher that lost its lock
// with its connection stops claiming.
func (d *Dispatcher) Dispatch(ctx context.Context, rc *river.Client[pgx.Tx], endpointID string) (int, error) {
	conn, err := d.config.Pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("dispatch %s: %w", endpointID, err)
	}
	defer conn.Release()
	var ours bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, dispatchLockKey(endpointID)).Scan(&ours); err != nil {
		return 0, fmt.Errorf("dispatch %s: %w", endpointID, err)
	}
	if !ours {
		return 0, nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, dispatchLockKey(endpointID)); err != nil {
			conn.Conn().Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing it is what lets the lock go
		}
	}()

	// Lanes overlap one batch's database round trips with another's
	// sends. A lane claims more than it may send at once, so that each
	// claim and each record carries many messages; the endpoint's
	// in-flight bound holds across the lanes (send).
	run := &dispatch{endpointID: endpointID, conn: conn, inFlight: map[string]bool{},
		sending: make(chan struct{}, d.config.MaxInFlight)}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		attempts int
		errs     []error
	)
	for range dispatchLanes {
		wg.Go(func() {
			n, err := d.lane(ctx, rc, run)
			mu.Lock()
			defer mu.Unlock()
			attempts += n
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return attempts, errors.Join(errs...)
}

// dispatchLockKey is the advisory lock of endpoint id's dispatcher.
func dispatchLockKey(id string) int64 {
	h := fnv.New64a()
	h.Write([]byte("paygate/deliver/" + id))
	return int64(h.Sum64()) //nolint:gosec // a lock key: any 64 bits do
}

// dispatchLanes is how many claim-send-record loops one dispatcher runs.
const dispatchLanes = 2

// claimFactor is how many times its share of the in-flight bound a lane
// of a healthy endpoint claims at once: the messages past the bound wait
// for a free slot, not for a round trip to the database.
const claimFactor = 4

// lane claims, sends and records until nothing is left to claim or ctx is
// nearly done.
func (d *Dispatcher) lane(ctx context.Context, rc *river.Client[pgx.Tx], run *dispatch) (int, error) {
	attempts := 0
	for {
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < d.config.Sender.Timeout()+5*time.Second {
			return attempts, nil // the next job goes on
		}
		e, batch, err := d.claim(ctx, run)
		if err != nil || len(batch) == 0 {
			return attempts, err
		}
		results := d.send(ctx, e, batch, run.sending)
		err = d.record(context.WithoutCancel(ctx), rc, e, batch, results)
		run.mu.Lock()
		for _, c := range batch {
			delete(run.inFlight, c.messageID)
		}
		run.mu.Unlock()
		if err != nil {
			return attempts, err
		}
		for _, r := range results {
			if !r.unsent {
				attempts++
			}
		}
	}
}

// claim takes up to a lane's share of the endpoint's due messages that no
// lane is sending, each the earliest pending of its object there, and
// reads their bodies: one round trip, on the lock's connection.
func (d *Dispatcher) claim(ctx context.Context, run *dispatch) (Endpoint, []claimed, error) {
	run.mu.Lock()
	defer run.mu.Unlock()
	share := max(1, d.config.MaxInFlight/dispatchLanes)
	sending := make([]string, 0, len(run.inFlight))
	for id := range run.inFlight {
		sending = append(sending, id)
	}
	batch := &pgx.Batch{}
	batch.Queue(`SELECT `+endpointColumns+` FROM endpoints WHERE id = $1`, run.endpointID)
	// The due messages are the heads of their objects' queues here:
	// the fan-out, the records and the requeues keep every other
	// pending message of an object at 'infinity' (releaseHeads), so no
	// check against its predecessors is needed, and none can turn into
	// a scan of the queue per row when the statistics are stale.
	batch.Queue(`
		SELECT d.message_id, d.message_created_at, d.aggregate, d.attempts, d.series_attempts, d.series_trigger
		FROM deliveries d
		WHERE d.endpoint_id = $1 AND d.status = 'pending' AND d.next_attempt_at <= now()
		  AND d.message_id <> ALL($2::text[])
		ORDER BY d.next_attempt_at
		-- A failing endpoint's lane claims its share only: its messages
		-- would mostly fail and be recorded in bulk, work that crowds the
		-- database for nothing while the endpoint is down.
		LIMIT CASE WHEN (SELECT e.failing_since FROM endpoints e WHERE e.id = $1) IS NULL THEN $3::bigint ELSE $4::bigint END`,
		run.endpointID, sending, claimFactor*share, share)
	results := run.conn.SendBatch(ctx, batch)
	e, err := scanEndpoint(results.QueryRow())
	var claims []claimed
	if err == nil {
		var rows pgx.Rows
		rows, err = results.Query()
		if err == nil {
			claims, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
				var c claimed
				err := row.Scan(&c.messageID, &c.createdAt, &c.aggregate, &c.attempts, &c.seriesAttempts, &c.trigger)
				return c, err
			})
		}
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	switch {
	case errors.Is(err, ErrEndpointNotFound):
		return Endpoint{}, nil, nil // deleted meanwhile: nothing to send
	case err != nil:
		return Endpoint{}, nil, fmt.Errorf("claim deliveries of %s: %w", run.endpointID, err)
	case e.Status != StatusEnabled || len(claims) == 0:
		return e, nil, nil
	}
	ids, created := make([]string, len(claims)), make([]time.Time, len(claims))
	for i, c := range claims {
		ids[i], created[i] = c.messageID, c.createdAt
	}
	bodies, err := outbox.Bodies(ctx, run.conn, ids, created)
	if err != nil {
		return Endpoint{}, nil, fmt.Errorf("claim deliveries of %s: %w", run.endpointID, err)
	}
	for i := range claims {
		claims[i].body = bodies[claims[i].messageID]
		run.inFlight[claims[i].messageID] = true
	}
	return e, claims, nil
}

// send makes one attempt of each claimed message, in parallel, at most
// cap(sending) at a time across the endpoint's lanes. A message that finds
// no free slot within one attempt's time (the endpoint is slow) is
// returned unsent, due again at once, so that a batch never takes longer
// than one attempt.
func (d *Dispatcher) send(ctx context.Context, e Endpoint, batch []claimed, sending chan struct{}) []sendResult {
	results := make([]sendResult, len(batch))
	wait, cancel := context.WithTimeout(ctx, d.config.Sender.Timeout())
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range batch {
		select {
		case sending <- struct{}{}:
		case <-wait.Done():
			for j := i; j < len(batch); j++ {
				results[j].unsent = true
			}
			wg.Wait()
			return results
		}
		wg.Go(func() {
			defer func() { <-sending }()
			now := time.Now()
			results[i].Result = d.config.Sender.Send(ctx, Request{
				URL: e.URL, MessageID: c.messageID, Body: c.body, Secrets: e.SigningSecrets(now), Now: now,
			})
		})
	}
	wg.Wait()
	return results
}

// sendResult is one claimed message's attempt, or none (unsent).
type sendResult struct {
	Result
	unsent bool
}

// record writes, in one transaction, every attempt of batch with what
// comes next: the delivery settled, or its next attempt scheduled; the
// next message of an object released once its predecessor settled; the
// endpoint's health, disabled at a 410 or after failing for DisableAfter,
// with ops told by email.
func (d *Dispatcher) record(ctx context.Context, rc *river.Client[pgx.Tx], e Endpoint, claims []claimed, results []sendResult) error {
	now := time.Now()
	var (
		batch []claimed
		sent  []Result
	)
	for i, c := range claims {
		if !results[i].unsent { // an unsent one is simply due again
			batch, sent = append(batch, c), append(sent, results[i].Result)
		}
	}
	n := len(batch)
	var (
		ids, statuses, errs, bodies, triggers = make([]string, n), make([]string, n), make([]*string, n), make([]*string, n), make([]string, n)
		attempts, series, durations           = make([]int32, n), make([]int32, n), make([]int32, n)
		codes                                 = make([]*int32, n)
		next                                  = make([]time.Time, n)
		at                                    = make([]time.Time, n)
		settled                               []string
		anySuccess, anyFailure, gone          bool
	)
	for i, c := range batch {
		r := sent[i]
		ids[i], triggers[i], attempts[i], series[i] = c.messageID, c.trigger, int32(c.attempts+1), int32(c.seriesAttempts+1)
		durations[i], at[i], bodies[i] = int32(r.Duration.Milliseconds()), now.Add(-r.Duration), nullable(r.Body)
		if r.Status != 0 {
			code := int32(r.Status)
			codes[i] = &code
		}
		switch {
		case r.Succeeded():
			statuses[i], next[i] = string(DeliverySucceeded), now
			settled = append(settled, c.aggregate)
			anySuccess = true
		case r.Gone():
			// Kept pending: it goes when the endpoint is enabled again.
			statuses[i], next[i] = string(DeliveryPending), now
			errs[i] = nullable("the endpoint answered 410 Gone: disabled")
			gone, anyFailure = true, true
		default:
			anyFailure = true
			errs[i] = nullable(failure(r))
			if c.seriesAttempts >= len(d.config.Schedule) {
				statuses[i], next[i] = string(DeliveryFailed), now
				settled = append(settled, c.aggregate)
				break
			}
			delay := d.config.Jitter(d.config.Schedule[c.seriesAttempts])
			if r.RetryAfter > 0 && r.RetryAfter <= maxRetryAfterHonoured {
				delay = r.RetryAfter
			}
			statuses[i], next[i] = string(DeliveryPending), now.Add(delay)
		}
		if d.config.Metrics != nil {
			d.config.Metrics.attempt(r)
		}
	}
	return pgx.BeginFunc(ctx, d.config.Pool, func(tx pgx.Tx) error {
		batch := &pgx.Batch{}
		batch.Queue(lazyCommitSQL)
		batch.Queue(`
			INSERT INTO delivery_attempts (endpoint_id, message_id, attempt, trigger, at, duration_ms, response_status,
				response_body, error)
			SELECT $1, a.id, a.attempt, a.trigger, a.at, a.duration, a.code, a.body, a.error
			FROM unnest($2::text[], $3::int[], $4::text[], $5::timestamptz[], $6::int[], $7::int[], $8::text[], $9::text[])
				AS a(id, attempt, trigger, at, duration, code, body, error)
			WHERE EXISTS (SELECT 1 FROM deliveries d WHERE d.endpoint_id = $1 AND d.message_id = a.id)`,
			e.ID, ids, attempts, triggers, at, durations, codes, bodies, errs)
		batch.Queue(`
			UPDATE deliveries d SET status = u.status, attempts = u.attempt, series_attempts = u.series,
				next_attempt_at = u.next, last_attempt_at = u.at,
				response_status = u.code, error = u.error
			FROM unnest($2::text[], $3::text[], $4::int[], $5::int[], $6::timestamptz[], $7::timestamptz[], $8::int[], $9::text[])
				AS u(id, status, attempt, series, next, at, code, error)
			WHERE d.endpoint_id = $1 AND d.message_id = u.id`,
			e.ID, ids, statuses, attempts, series, next, at, codes, errs)
		if len(settled) > 0 {
			// The next pending message of each settled object goes now.
			batch.Queue(releaseHeads, settled, e.ID)
		}
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return fmt.Errorf("record %d attempts at %s: %w", len(ids), e.ID, err)
		}
		if n == 0 {
			return nil
		}
		return d.health(ctx, tx, rc, e, anySuccess, anyFailure, gone)
	})
}

// health records the endpoint's standing after a batch: a success clears
// its failing streak; a failure starts one, and disables the endpoint once
// it lasted DisableAfter; a 410 disables it at once.
func (d *Dispatcher) health(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], e Endpoint, success, failure, gone bool) error {
	if !gone && healthUnchanged(e, success, failure, time.Now(), d.config.DisableAfter) {
		return nil
	}
	var (
		reason   string
		disabled bool
		at       time.Time
	)
	err := tx.QueryRow(ctx, `
		-- No FOR UPDATE here (the lock is held since the batch above): a
		-- locking read runs after this UPDATE changed the row and finds
		-- nothing, where a plain one sees the status before it.
		WITH old AS (SELECT status FROM endpoints WHERE id = $1)
		UPDATE endpoints SET
			last_success_at = CASE WHEN $2 THEN now() ELSE last_success_at END,
			last_failure_at = CASE WHEN $3 THEN now() ELSE last_failure_at END,
			failing_since = CASE WHEN $2 THEN NULL WHEN $3 THEN coalesce(failing_since, now()) ELSE failing_since END,
			status = CASE WHEN status = 'enabled' AND ($4 OR (NOT $2 AND $3
				AND coalesce(failing_since, now()) <= now() - make_interval(secs => $5))) THEN 'disabled' ELSE status END,
			disabled_reason = CASE
				WHEN status = 'enabled' AND $4 THEN 'the endpoint answered 410 Gone'
				WHEN status = 'enabled' AND NOT $2 AND $3 AND coalesce(failing_since, now()) <= now() - make_interval(secs => $5)
				THEN 'every attempt failed since ' || to_char(failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
				ELSE disabled_reason END,
			updated_at = now()
		WHERE id = $1
		RETURNING coalesce(disabled_reason, ''), status = 'disabled' AND (SELECT status FROM old) = 'enabled', now()`,
		e.ID, success, failure, gone, d.config.DisableAfter.Seconds()).Scan(&reason, &disabled, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // deleted meanwhile
	}
	if err != nil || !disabled {
		return err
	}
	d.config.Logger.WarnContext(ctx, "endpoint disabled", "endpoint_id", e.ID, "reason", reason)
	if d.config.Metrics != nil {
		d.config.Metrics.disabled.Inc()
	}
	_, err = jobs.EnqueueEmailsTx(ctx, tx, rc, []jobs.Email{{
		Kind: jobs.EmailEndpointDisabled, ObjectID: fmt.Sprintf("%s/%d", e.ID, at.Unix()),
		Recipient: d.config.OpsEmail, EndpointID: e.ID, Reason: reason,
	}})
	return err
}

// lazyCommitSQL lets a delivery transaction commit without waiting for its
// WAL to reach the disk (synchronous_commit off, for that transaction
// only). Delivery is at least once: a crash that loses the last
// milliseconds of claims, records or fan-out sends those messages again
// under the same webhook-id, which consumers deduplicate; nothing is
// lost, since the messages themselves were written durably with their
// change. Waiting for a flush at every claim and record instead held an
// endpoint to a few hundred messages a second. The feed's sequencer does
// not do this: a place a reader saw must never be given again.
const lazyCommitSQL = `SET LOCAL synchronous_commit = off`

func lazyCommit(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, lazyCommitSQL)
	return err
}

// releaseHeads lets the first pending message of each object of $1 (all
// objects when NULL) go at once where it is held at 'infinity', at
// endpoint $2 (every endpoint when NULL): the one step every writer of the
// queue ends with. Set-based (one ordered pass over the objects' pending
// messages), so stale statistics cannot make it a scan per row.
const releaseHeads = `
	UPDATE deliveries d SET next_attempt_at = now()
	FROM (SELECT DISTINCT ON (p.aggregate, p.endpoint_id) p.endpoint_id, p.message_id, p.next_attempt_at
	      FROM deliveries p
	      WHERE p.status = 'pending' AND ($1::text[] IS NULL OR p.aggregate = ANY($1))
	        AND ($2::text IS NULL OR p.endpoint_id = $2)
	      ORDER BY p.aggregate, p.endpoint_id, p.sequence) h
	WHERE h.next_attempt_at = 'infinity' AND d.endpoint_id = h.endpoint_id AND d.message_id = h.message_id`

// healthRefresh is how stale an endpoint's last_success_at and
// last_failure_at may be before a record writes them again: writing the
// endpoint's row at every batch would line its lanes up behind that row.
const healthRefresh = 5 * time.Second

// healthUnchanged reports whether a batch leaves the endpoint's standing as
// e (read at the claim) had it: successes of a healthy endpoint, or
// failures within a streak too young to disable it, with the times shown
// fresh enough.
func healthUnchanged(e Endpoint, success, failure bool, now time.Time, disableAfter time.Duration) bool {
	recent := func(t *time.Time) bool { return t != nil && now.Sub(*t) < healthRefresh }
	switch {
	case success && !failure:
		return e.FailingSince == nil && recent(e.LastSuccessAt)
	case failure && !success:
		return e.FailingSince != nil && now.Sub(*e.FailingSince) < disableAfter-healthRefresh && recent(e.LastFailureAt)
	}
	return false
}

// failure says why an attempt failed, for the delivery's record.
func failure(r Result) string {
	switch {
	case r.Err != nil:
		return r.Err.Error()
	case r.Status >= 300 && r.Status < 400:
		return fmt.Sprintf("the endpoint answered %d: redirects are not followed", r.Status)
	default:
		return fmt.Sprintf("the endpoint answered %d", r.Status)
	}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
