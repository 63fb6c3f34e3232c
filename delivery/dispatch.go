package delivery

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
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

// claimed is one message a dispatcher holds while it sends it: a pending
// delivery that came due, or a message read from the feed after the
// endpoint's place (feed), which has no delivery row until its record.
type claimed struct {
	messageID      string
	createdAt      time.Time // the message's, its partition key
	aggregate      string
	attempts       int
	seriesAttempts int
	trigger        string
	body           []byte

	feed     bool
	typ      string
	sequence int64
	position int64
	// held: an earlier message of its object is pending at the endpoint,
	// so it is not sent but recorded pending, waiting for that one.
	held bool
}

// Timeout is the longest one attempt takes.
func (s *Sender) Timeout() time.Duration { return s.timeout }

// dispatch is one run of an endpoint's dispatcher: the connection that
// holds its advisory lock, the messages its lanes are sending, and the
// endpoint's in-flight slots.
type dispatch struct {
	endpointID string
	mu         sync.Mutex // the connection, claims, inFlight and feeding
	conn       *pgxpool.Conn
	inFlight   map[string]bool // claimed and not yet recorded
	sending    chan struct{}   // a slot per request in flight
	// feeding: a lane holds messages read from the feed and not recorded
	// yet. One feed batch at a time: its record moves the endpoint's place
	// past it, so the next one reads after it.
	feeding bool
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
		if err != nil || len(batch.claims) == 0 {
			return attempts, err
		}
		results := d.send(ctx, e, batch.claims, run.sending)
		err = d.record(context.WithoutCancel(ctx), rc, e, batch, results)
		run.mu.Lock()
		for _, c := range batch.claims {
			delete(run.inFlight, c.messageID)
		}
		if batch.fed {
			run.feeding = false
		}
		run.mu.Unlock()
		if err != nil {
			return attempts, err
		}
		for _, r := range results {
			if r.attempted() {
				attempts++
			}
		}
	}
}

// claimBatch is what one claim took: pending deliveries that came due and,
// when fed, the messages read from the feed up to feedThrough, the place
// the endpoint moves to when the batch is recorded.
type claimBatch struct {
	claims      []claimed
	fed         bool
	feedThrough int64
}

// feedClaim reads up to $2 ($3 while it is failing) messages of endpoint $1's types placed after its
// place and not handed to it yet (a resend or a recovery may have given
// one a delivery already), with their bodies, each marked held when an
// earlier message of its object is pending there. One row at least: the
// endpoint's place and the feed's last position come with it, and with
// the messages, if any.
//
// Its probes of the endpoint's deliveries (has it one of this message? is
// one of this object pending there?), and the record's, go by the message
// or the object, whose indexes hold a row per endpoint it went to, with
// the endpoint compared as an expression (concatenated with an empty
// string), which no index can take, and never as a sequential scan
// (probeSQL). Compared as the column, the planner is free to go by the
// endpoint's own index and filter its every delivery, a month of them, by
// message, for each message; and a plan kept from when the table was empty
// scans it. On the statistics of a deliveries table analyzed while empty
// or small (a new database, an endpoint added long after the last
// ANALYZE) both happened, and a second endpoint's delivery fell tens of
// seconds behind applying in make bench (TestFeedClaimReadsWhatItClaims).
const feedClaim = `
	WITH e AS (
		SELECT handed_through, event_types, created_at,
			-- A failing endpoint reads a lane's share only (see the due
			-- messages' claim).
			CASE WHEN failing_since IS NULL THEN $2::bigint ELSE $3::bigint END AS lim
		FROM endpoints WHERE id = $1),
	top AS (SELECT last_position FROM message_sequencer),
	m AS (
		SELECT m.id, m.created_at, m.type, m.aggregate_type || '/' || m.aggregate_id AS aggregate,
			m.sequence, m.position, m.body
		FROM messages m
		-- Scalar subqueries, not a join with e: their values bound the
		-- scan of the position index, where a join's would only filter
		-- every message from the start of the feed.
		WHERE m.position > (SELECT handed_through FROM e) AND m.position <= (SELECT last_position FROM top)
		  AND m.created_at >= (SELECT created_at FROM e)
		  AND (SELECT event_types FROM e) && ARRAY['*', m.type]
		  -- A probe per message read (OFFSET 0 keeps it one), not an
		  -- anti-join, and by the message (see above).
		  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = m.id AND d.endpoint_id || '' = $1 OFFSET 0)
		ORDER BY m.position LIMIT (SELECT lim FROM e))
	SELECT (SELECT handed_through FROM e), (SELECT lim FROM e), (SELECT last_position FROM top),
		m.id, m.created_at, m.type, m.aggregate, m.sequence, m.position, m.body,
		-- By the object's pending deliveries (see above).
		EXISTS (SELECT 1 FROM deliveries p WHERE p.aggregate = m.aggregate AND p.status = 'pending' AND p.endpoint_id || '' = $1)
	FROM (SELECT) one LEFT JOIN m ON true
	ORDER BY m.position`

// claim takes up to a lane's share of the endpoint's due messages that no
// lane is sending, each the earliest pending of its object there, and,
// when no other lane holds a feed batch, the messages after the endpoint's
// place in the feed: one round trip, on the lock's connection, and one
// more for the due messages' bodies.
func (d *Dispatcher) claim(ctx context.Context, run *dispatch) (Endpoint, claimBatch, error) {
	run.mu.Lock()
	defer run.mu.Unlock()
	share := max(1, d.config.MaxInFlight/dispatchLanes)
	sending := make([]string, 0, len(run.inFlight))
	for id := range run.inFlight {
		sending = append(sending, id)
	}
	batch := &pgx.Batch{}
	batch.Queue(probeSQL) // a batch is one transaction
	batch.Queue(`SELECT `+endpointColumns+` FROM endpoints WHERE id = $1`, run.endpointID)
	// The due messages are the heads of their objects' queues here:
	// the records and the requeues keep every other pending message of an
	// object at 'infinity' (releaseHeads), so no check against its
	// predecessors is needed, and none can turn into a scan of the queue
	// per row when the statistics are stale.
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
	feeds := !run.feeding
	if feeds {
		// The feed batch may fill every slot: one lane reads the feed at a
		// time.
		batch.Queue(feedClaim, run.endpointID, claimFactor*d.config.MaxInFlight, share)
	}
	results := run.conn.SendBatch(ctx, batch)
	_, err := results.Exec()
	var e Endpoint
	if err == nil {
		e, err = scanEndpoint(results.QueryRow())
	}
	var (
		claims  []claimed
		fed     []claimed
		placed  *int64
		through int64
	)
	if err == nil {
		claims, err = collectDue(results)
	}
	if err == nil && feeds {
		fed, placed, through, err = collectFeed(results)
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	switch {
	case errors.Is(err, ErrEndpointNotFound):
		return Endpoint{}, claimBatch{}, nil // deleted meanwhile: nothing to send
	case err != nil:
		return Endpoint{}, claimBatch{}, fmt.Errorf("claim deliveries of %s: %w", run.endpointID, err)
	case e.Status != StatusEnabled:
		return e, claimBatch{}, nil
	}
	if len(fed) == 0 && placed != nil && through > *placed {
		// Nothing of its types in what was placed since: the endpoint's
		// place moves past it at once.
		if _, err := run.conn.Exec(ctx, `UPDATE endpoints SET handed_through = greatest(handed_through, $2) WHERE id = $1`,
			run.endpointID, through); err != nil {
			return Endpoint{}, claimBatch{}, fmt.Errorf("move %s past messages not of its types: %w", run.endpointID, err)
		}
	}
	if len(claims) > 0 {
		ids, created := make([]string, len(claims)), make([]time.Time, len(claims))
		for i, c := range claims {
			ids[i], created[i] = c.messageID, c.createdAt
		}
		bodies, err := outbox.Bodies(ctx, run.conn, ids, created)
		if err != nil {
			return Endpoint{}, claimBatch{}, fmt.Errorf("claim deliveries of %s: %w", run.endpointID, err)
		}
		for i := range claims {
			claims[i].body = bodies[claims[i].messageID]
		}
	}
	out := claimBatch{claims: append(claims, fed...)}
	if len(fed) > 0 {
		out.fed, out.feedThrough = true, through
		run.feeding = true
	}
	for _, c := range out.claims {
		run.inFlight[c.messageID] = true
	}
	return e, out, nil
}

func collectDue(results pgx.BatchResults) ([]claimed, error) {
	rows, err := results.Query()
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
		var c claimed
		err := row.Scan(&c.messageID, &c.createdAt, &c.aggregate, &c.attempts, &c.seriesAttempts, &c.trigger)
		return c, err
	})
}

// collectFeed reads feedClaim's rows: the messages, the endpoint's place
// (nil when it was deleted meanwhile), and the place the batch moves it to:
// its last message's when it is full (more may follow), else the feed's
// last position.
func collectFeed(results pgx.BatchResults) (msgs []claimed, placed *int64, through int64, err error) {
	rows, err := results.Query()
	if err != nil {
		return nil, nil, 0, err
	}
	defer rows.Close()
	var limit, top *int64
	for rows.Next() {
		var (
			id, typ, aggregate *string
			created            *time.Time
			sequence, position *int64
			body               []byte
			held               bool
		)
		if err := rows.Scan(&placed, &limit, &top, &id, &created, &typ, &aggregate, &sequence, &position, &body, &held); err != nil {
			return nil, nil, 0, err
		}
		if id == nil {
			continue // the one row of an empty read
		}
		msgs = append(msgs, claimed{
			messageID: *id, createdAt: *created, aggregate: *aggregate, trigger: "scheduled", body: body,
			feed: true, typ: *typ, sequence: *sequence, position: *position, held: held,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, 0, err
	}
	if placed == nil {
		return nil, nil, 0, nil // deleted meanwhile
	}
	through = *top
	if int64(len(msgs)) == *limit {
		through = msgs[len(msgs)-1].position
	}
	return msgs, placed, through, nil
}

// send makes one attempt of each claimed message, in parallel, at most
// cap(sending) at a time across the endpoint's lanes, except that the feed
// messages of one object go one after the other, each once the one before
// it succeeded (a message is never sent before its object's earlier ones
// settled there). A message that finds no free slot within one attempt's
// time (the endpoint is slow) is returned unsent, so that a batch never
// takes longer than one attempt; the object's messages after one not sent
// or not delivered, and the held ones, are returned behind it, unsent.
func (d *Dispatcher) send(ctx context.Context, e Endpoint, batch []claimed, sending chan struct{}) []sendResult {
	results := make([]sendResult, len(batch))
	wait, cancel := context.WithTimeout(ctx, d.config.Sender.Timeout())
	defer cancel()
	// Chains of the batch's indexes, each sent in order: a due delivery
	// alone (the head of its object's queue), a feed message with the
	// object's other feed messages.
	var (
		chains  [][]int
		ofFeeds = map[string]int{} // an object's chain among chains
	)
	for i, c := range batch {
		switch {
		case c.held:
			results[i].behind = true
		case !c.feed:
			chains = append(chains, []int{i})
		default:
			k, ok := ofFeeds[c.aggregate]
			if !ok {
				k = len(chains)
				ofFeeds[c.aggregate] = k
				chains = append(chains, nil)
			}
			chains[k] = append(chains[k], i)
		}
	}
	var wg sync.WaitGroup
	for _, chain := range chains {
		wg.Go(func() {
			for n, i := range chain {
				select {
				case sending <- struct{}{}:
				case <-wait.Done():
					results[i].unsent = true
				}
				if !results[i].unsent {
					c, now := batch[i], time.Now()
					results[i].Result = d.config.Sender.Send(ctx, Request{
						URL: e.URL, MessageID: c.messageID, Body: c.body, Secrets: e.SigningSecrets(now), Now: now,
					})
					<-sending
				}
				if results[i].unsent || !results[i].Succeeded() {
					for _, j := range chain[n+1:] {
						results[j].behind = true
					}
					return
				}
			}
		})
	}
	wg.Wait()
	return results
}

// sendResult is one claimed message's attempt, or none: unsent (no slot
// in time), or behind an earlier message of its object that is pending.
type sendResult struct {
	Result
	unsent bool
	behind bool
}

func (r sendResult) attempted() bool { return !r.unsent && !r.behind }

// record writes, in one transaction, every attempt of batch with what
// comes next: the delivery settled, or its next attempt scheduled; a feed
// message's delivery row, written here once with its first attempt kept
// in it (or pending, when it was not sent), and the endpoint's place moved past the
// feed batch; the next message of an object released once its predecessor
// settled; the endpoint's health, disabled at a 410 or after failing for
// DisableAfter, with ops told by email.
func (d *Dispatcher) record(ctx context.Context, rc *river.Client[pgx.Tx], e Endpoint, cb claimBatch, results []sendResult) error {
	now := time.Now()
	var (
		batch []claimed
		sent  []Result
		fed   feedRows
		held  []string
	)
	for i, c := range cb.claims {
		r := results[i]
		switch {
		case c.feed && !r.attempted():
			next := pgtype.Timestamptz{Time: now, Valid: true} // unsent: due again at once
			if r.behind {
				// Released when the one before it settles.
				next = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
			}
			if c.held {
				held = append(held, c.aggregate)
			}
			fed.add(c, string(DeliveryPending), 0, next, nil)
		case r.unsent:
			// A due delivery not sent is simply due again.
		default:
			batch, sent = append(batch, c), append(sent, r.Result)
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
		due                                   dueRows
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
		if c.feed {
			fed.add(c, statuses[i], attempts[i], pgtype.Timestamptz{Time: next[i], Valid: true},
				&firstAttempt{at: at[i], duration: durations[i], code: codes[i], body: bodies[i], err: errs[i]})
		} else {
			due.add(i)
		}
		if d.config.Metrics != nil {
			d.config.Metrics.attempt(r)
		}
	}
	err := pgx.BeginFunc(ctx, d.config.Pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(lazyCommitSQL)
		b.Queue(probeSQL)
		if cb.fed {
			// First: the endpoint's row lock keeps it from being deleted
			// until the rows below are in (their foreign key), and a
			// deleted one gets none (the EXISTS below).
			b.Queue(`UPDATE endpoints SET handed_through = greatest(handed_through, $2) WHERE id = $1`, e.ID, cb.feedThrough)
		}
		if len(fed.ids) > 0 {
			// A feed message's first attempt is kept in the delivery row
			// it writes (migration 0029): one row, not two.
			b.Queue(`
				INSERT INTO deliveries (endpoint_id, message_id, message_created_at, type, aggregate, sequence, position,
					status, attempts, series_attempts, next_attempt_at, last_attempt_at, response_status, error,
					first_attempt_at, first_duration_ms, first_response_status, first_response_body, first_error)
				SELECT $1, f.id, f.created_at, f.type, f.aggregate, f.sequence, f.position,
					f.status, f.attempts, f.attempts, f.next, f.at, f.code, f.error,
					f.at, f.duration, f.code, f.body, f.error
				FROM unnest($2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::bigint[], $7::bigint[],
					$8::text[], $9::int[], $10::timestamptz[], $11::timestamptz[], $12::int[], $13::text[], $14::int[], $15::text[])
					AS f(id, created_at, type, aggregate, sequence, position, status, attempts, next, at, code, error, duration, body)
				WHERE EXISTS (SELECT 1 FROM endpoints WHERE id = $1)
				ORDER BY f.position
				-- A resend or a recovery gave it a delivery meanwhile: that
				-- one stands.
				ON CONFLICT (endpoint_id, message_id) DO NOTHING`,
				e.ID, fed.ids, fed.created, fed.types, fed.aggregates, fed.sequences, fed.positions,
				fed.statuses, fed.attempts, fed.next, fed.at, fed.codes, fed.errs, fed.durations, fed.bodies)
		}
		if len(due) > 0 {
			b.Queue(`
				INSERT INTO delivery_attempts (endpoint_id, message_id, attempt, trigger, at, duration_ms, response_status,
					response_body, error)
				SELECT $1, a.id, a.attempt, a.trigger, a.at, a.duration, a.code, a.body, a.error
				FROM unnest($2::text[], $3::int[], $4::text[], $5::timestamptz[], $6::int[], $7::int[], $8::text[], $9::text[])
					AS a(id, attempt, trigger, at, duration, code, body, error)
				-- A probe per attempt (OFFSET 0 keeps it one), by the
				-- message, as in feedClaim.
				WHERE EXISTS (SELECT 1 FROM deliveries d WHERE d.message_id = a.id AND d.endpoint_id || '' = $1 OFFSET 0)`,
				e.ID, pick(due, ids), pick(due, attempts), pick(due, triggers), pick(due, at), pick(due, durations),
				pick(due, codes), pick(due, bodies), pick(due, errs))
			b.Queue(`
				UPDATE deliveries d SET status = u.status, attempts = u.attempt, series_attempts = u.series,
					next_attempt_at = u.next, last_attempt_at = u.at,
					response_status = u.code, error = u.error
				FROM unnest($2::text[], $3::text[], $4::int[], $5::int[], $6::timestamptz[], $7::timestamptz[], $8::int[], $9::text[])
					AS u(id, status, attempt, series, next, at, code, error)
				-- By the message, as in feedClaim.
				WHERE d.message_id = u.id AND d.endpoint_id || '' = $1`,
				e.ID, pick(due, ids), pick(due, statuses), pick(due, attempts), pick(due, series), pick(due, next), pick(due, at),
				pick(due, codes), pick(due, errs))
		}
		if len(settled) > 0 {
			// The next pending message of each settled object goes now.
			b.Queue(releaseHeads, settled, e.ID)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("record %d attempts at %s: %w", len(ids), e.ID, err)
		}
		if n == 0 {
			return nil
		}
		return d.health(ctx, tx, rc, e, anySuccess, anyFailure, gone)
	})
	if err != nil || len(held) == 0 {
		return err
	}
	// Those held behind a delivery that a concurrent record settled: that
	// record could not see them.
	return Release(ctx, d.config.Pool, slices.Compact(slices.Sorted(slices.Values(held))))
}

// feedRows are the delivery rows a record writes for feed messages, each
// with its first attempt, if it was sent.
type feedRows struct {
	ids, types, aggregates, statuses []string
	created                          []time.Time
	next                             []pgtype.Timestamptz
	at                               []*time.Time
	sequences, positions             []int64
	attempts                         []int32
	durations, codes                 []*int32
	bodies, errs                     []*string
}

// firstAttempt is what a feed message's delivery row keeps of the attempt
// recorded with it.
type firstAttempt struct {
	at        time.Time
	duration  int32
	code      *int32
	body, err *string
}

func (f *feedRows) add(c claimed, status string, attempts int32, next pgtype.Timestamptz, a *firstAttempt) {
	f.ids, f.types, f.aggregates, f.statuses = append(f.ids, c.messageID), append(f.types, c.typ), append(f.aggregates, c.aggregate), append(f.statuses, status)
	f.created, f.next = append(f.created, c.createdAt), append(f.next, next)
	f.sequences, f.positions, f.attempts = append(f.sequences, c.sequence), append(f.positions, c.position), append(f.attempts, attempts)
	if a == nil {
		f.at, f.durations, f.codes, f.bodies, f.errs = append(f.at, nil), append(f.durations, nil), append(f.codes, nil), append(f.bodies, nil), append(f.errs, nil)
		return
	}
	f.at, f.durations, f.codes = append(f.at, &a.at), append(f.durations, &a.duration), append(f.codes, a.code)
	f.bodies, f.errs = append(f.bodies, a.body), append(f.errs, a.err)
}

// dueRows are the indexes, in a record's arrays, of the due deliveries.
type dueRows []int

func (d *dueRows) add(i int) { *d = append(*d, i) }

// pick returns the elements of s at d's indexes.
func pick[T any](d dueRows, s []T) []T {
	out := make([]T, len(d))
	for k, i := range d {
		out[k] = s[i]
	}
	return out
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
// milliseconds of records, or of an endpoint's place, sends those messages again
// under the same webhook-id, which consumers deduplicate; nothing is
// lost, since the messages themselves were written durably with their
// change. Waiting for a flush at every claim and record instead held an
// endpoint to a few hundred messages a second. The feed's sequencer does
// not do this: a place a reader saw must never be given again.
const lazyCommitSQL = `SET LOCAL synchronous_commit = off`

// probeSQL begins each claim and each record, in its transaction: their
// probes of an endpoint's deliveries go by an index whatever the
// statistics (see feedClaim). A connection keeps the plans of its prepared
// statements, and one made while the deliveries table was small scans it,
// for every message, once it has grown.
const probeSQL = outbox.ByIndexSQL

// releaseHeads lets the first pending message of each object of $1 (all
// objects when NULL) go at once where it is held at 'infinity', at
// endpoint $2 (every endpoint when NULL): the one step every writer of the
// queue ends with. Set-based (one ordered pass over the objects' pending
// messages, by their own index), and with no join for a planner to get
// wrong: the heads held are read once, and their rows found by the message
// (the primary key's first column) and matched as a pair. Joined to the
// heads, a plan made on the statistics of an empty deliveries table read
// every delivery, or, by an index, read them all once per delivery
// (TestReleaseReadsThePendingOnly).
const releaseHeads = `
	WITH held AS MATERIALIZED (
		SELECT h.endpoint_id, h.message_id
		FROM (SELECT DISTINCT ON (p.aggregate, p.endpoint_id) p.endpoint_id, p.message_id, p.next_attempt_at
		      FROM deliveries p
		      WHERE p.status = 'pending' AND ($1::text[] IS NULL OR p.aggregate = ANY($1))
		        AND ($2::text IS NULL OR p.endpoint_id = $2)
		      ORDER BY p.aggregate, p.endpoint_id, p.sequence) h
		WHERE h.next_attempt_at = 'infinity')
	UPDATE deliveries d SET next_attempt_at = now()
	WHERE d.message_id = ANY (ARRAY(SELECT message_id FROM held))
	  AND (d.message_id, d.endpoint_id) = ANY (ARRAY(SELECT (message_id, endpoint_id) FROM held))`

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
