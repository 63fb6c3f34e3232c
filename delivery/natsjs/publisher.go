// Package natsjs publishes paygate's messages to NATS JetStream: every
// message of the outbox, byte for byte, on subject <prefix>.<type> of one
// stream, under its id as Nats-Msg-Id, so that JetStream drops a message
// published twice (a crash between the publish and the commit) and its
// consumers can dedupe on the id beyond the duplicate window.
//
// It is a relay (outbox's "nats"): it locks its place in the feed, reads
// the messages after it, publishes them and moves its place in the same
// transaction, only once JetStream acknowledged them, so a crash or an
// outage republishes and never skips. Within a batch an object's next
// message is published only after JetStream acknowledged the one before,
// so the stream holds each object's messages in sequence order whatever
// fails.
//
// It must never write messages, slow ingest or applying (it runs as its
// own job on messages already committed, holding nothing but its relay
// row), or lose a message when NATS is down or the stream is full: that
// delays publishing, and ops get one email per outage.
package natsjs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/outbox"
)

// RelayName is the publisher's place in the feed (message_relays).
const RelayName = "nats"

// Defaults of Config.
const (
	DefaultStream        = "PAYGATE"
	DefaultSubjectPrefix = "paygate"
	// DefaultDuplicates is the duplicate window of a stream created here.
	// It must outlast the longest gap between publishing a batch and
	// publishing it again after a crash before the commit: the job's
	// timeout (a minute) until River rescues it, plus its rescuer's period
	// (30 s) and the first retry's wait. Ten minutes leaves room; JetStream
	// keeps one id per message of the window in memory, a few MB at 1,000
	// messages a second.
	DefaultDuplicates = 10 * time.Minute
	// DefaultAlertAfter is how long publishing fails without a success
	// before ops get a nats_unavailable email.
	DefaultAlertAfter = 15 * time.Minute
	// DefaultBatch is how many messages one transaction publishes, and the
	// most acknowledgements awaited at once.
	DefaultBatch      = 256
	DefaultAckTimeout = 5 * time.Second
	DefaultBudget     = 10 * time.Second
)

// ErrNotConnected is a batch's error when the connection to NATS is down:
// nothing was published, the batch is tried again later.
var ErrNotConnected = errors.New("not connected to NATS")

// Config configures a Publisher.
type Config struct {
	// URL is the NATS server's (PAYGATE_NATS_URL), user and password or a
	// token in it if the server needs them; several comma-separated.
	URL string
	// Creds is a NATS credentials file (PAYGATE_NATS_CREDS); empty: none.
	Creds string
	// Stream is the JetStream stream (PAYGATE_NATS_STREAM), created at
	// start when missing; default DefaultStream.
	Stream string
	// SubjectPrefix (PAYGATE_NATS_SUBJECT_PREFIX) begins every subject;
	// default DefaultSubjectPrefix.
	SubjectPrefix string
	// MaxAge is a created stream's MaxAge: at least the messages'
	// retention; zero keeps them until ops set limits.
	MaxAge time.Duration
	// Replicas is a created stream's replica count; default 1 (3 in a
	// cluster: see docs/scaling.md).
	Replicas int
	// Duplicates is a created stream's duplicate window; default
	// DefaultDuplicates.
	Duplicates time.Duration

	Pool *pgxpool.Pool
	// OpsEmail gets the nats_unavailable email (PAYGATE_OPS_EMAIL).
	OpsEmail string
	// AlertAfter is how long publishing fails before ops are told; default
	// DefaultAlertAfter.
	AlertAfter time.Duration
	// Batch is how many messages a transaction publishes; default
	// DefaultBatch.
	Batch int
	// AckTimeout bounds the wait for one acknowledgement; default
	// DefaultAckTimeout.
	AckTimeout time.Duration
	// Budget is how long one job publishes before it leaves the rest to
	// the next; default DefaultBudget.
	Budget     time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// TracerProvider, when tracing is on, makes each publish a PRODUCER
	// span whose traceparent the message carries in its headers; nil:
	// nothing is traced or added.
	TracerProvider trace.TracerProvider
}

// Publisher publishes the outbox's messages to JetStream (see the package
// comment). Its connection reconnects for ever in the background; a nil
// *Publisher is publishing switched off.
type Publisher struct {
	config  Config
	nc      *nats.Conn
	js      jetstream.JetStream
	ensured atomic.Bool
	metrics *metrics
	tracer  trace.Tracer // nil: tracing off
	// beforeCommit, set by tests, runs before a batch's commit; an error
	// rolls the batch back as a crash would.
	beforeCommit func() error
}

var (
	streamNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	prefixRe     = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
)

// CheckNames reports whether stream and prefix are a usable stream name
// and subject prefix (empty: the defaults).
func CheckNames(stream, prefix string) error {
	if stream != "" && !streamNameRe.MatchString(stream) {
		return fmt.Errorf("stream name %q: letters, digits, - and _ only", stream)
	}
	if prefix != "" && (!prefixRe.MatchString(prefix) || len(prefix) > 200) {
		return fmt.Errorf("subject prefix %q: dot-separated tokens of letters, digits, - and _", prefix)
	}
	return nil
}

// New connects to NATS and returns the publisher. A server that cannot be
// reached is not an error: the connection keeps trying, and publishing
// waits for it.
func New(config Config) (*Publisher, error) {
	if config.Logger == nil {
		config.Logger = slog.New(slog.DiscardHandler)
	}
	if config.Stream == "" {
		config.Stream = DefaultStream
	}
	if config.SubjectPrefix == "" {
		config.SubjectPrefix = DefaultSubjectPrefix
	}
	if err := CheckNames(config.Stream, config.SubjectPrefix); err != nil {
		return nil, err
	}
	if config.Replicas <= 0 {
		config.Replicas = 1
	}
	if config.Duplicates <= 0 {
		config.Duplicates = DefaultDuplicates
	}
	if config.AlertAfter <= 0 {
		config.AlertAfter = DefaultAlertAfter
	}
	if config.Batch <= 0 {
		config.Batch = DefaultBatch
	}
	if config.AckTimeout <= 0 {
		config.AckTimeout = DefaultAckTimeout
	}
	if config.Budget <= 0 {
		config.Budget = DefaultBudget
	}
	logger, where := config.Logger, redact(config.URL)
	opts := []nats.Option{
		nats.Name("paygate"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.RetryOnFailedConnect(true),
		// Publishing while disconnected fails at once rather than
		// buffering: a batch is retried whole, never half-sent later.
		nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats: disconnected; reconnecting", "url", where, "error", err.Error())
			}
		}),
		nats.ReconnectHandler(func(*nats.Conn) { logger.Info("nats: reconnected", "url", where) }),
	}
	if config.Creds != "" {
		opts = append(opts, nats.UserCredentials(config.Creds))
	}
	nc, err := nats.Connect(config.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats at %s: %w", where, err)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(config.Batch),
		jetstream.WithPublishAsyncTimeout(config.AckTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	p := &Publisher{config: config, nc: nc, js: js}
	p.metrics = newMetrics(p, config.Registerer)
	if config.TracerProvider != nil {
		p.tracer = config.TracerProvider.Tracer("github.com/paygate/paygate/delivery/natsjs")
	}
	return p, nil
}

// Close closes the connection.
func (p *Publisher) Close() {
	if p != nil {
		p.nc.Close()
	}
}

// EnsureStream creates the stream when missing: subjects <prefix>.>, file
// storage, the duplicate window, DiscardNew (a full stream refuses
// messages, which then wait, rather than dropping old ones unread), MaxAge
// and Replicas as configured. A stream that exists is left as ops set it.
func (p *Publisher) EnsureStream(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.config.AckTimeout)
	defer cancel()
	s, err := p.js.Stream(ctx, p.config.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = p.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        p.config.Stream,
			Description: "paygate's messages (github.com/paygate/paygate)",
			Subjects:    []string{p.config.SubjectPrefix + ".>"},
			Storage:     jetstream.FileStorage,
			Duplicates:  p.config.Duplicates,
			Discard:     jetstream.DiscardNew,
			MaxAge:      p.config.MaxAge,
			Replicas:    p.config.Replicas,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil // created meanwhile by another instance
		}
		if err == nil {
			p.config.Logger.InfoContext(ctx, "nats: stream created", "stream", p.config.Stream,
				"subjects", p.config.SubjectPrefix+".>", "duplicate_window", p.config.Duplicates.String())
		}
	} else if err == nil {
		c := s.CachedInfo().Config
		if c.Duplicates < 2*time.Minute {
			p.config.Logger.WarnContext(ctx, "nats: the stream's duplicate window is short: a batch republished after a crash may be stored twice",
				"stream", c.Name, "duplicate_window", c.Duplicates.String())
		}
	}
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", p.config.Stream, err)
	}
	p.ensured.Store(true)
	return nil
}

// Result is what publishing did.
type Result struct {
	// Messages were acknowledged by JetStream and marked published.
	Messages int
	// Duplicates of them JetStream already held (published before a crash
	// or a failed batch): acknowledged, not stored again.
	Duplicates int
}

// Publish publishes batches until the publisher has caught up with the
// feed or its Budget is spent, or another instance holds the relay. rc
// queues the nats_unavailable email (nil: the client working ctx's job).
//
// A batch that fails (NATS down, an acknowledgement missing or refused, a
// full stream) is the error; what JetStream acknowledged before it, in
// feed order, stays published.
func (p *Publisher) Publish(ctx context.Context, rc *river.Client[pgx.Tx]) (Result, error) {
	var total Result
	deadline := time.Now().Add(p.config.Budget)
	for {
		b, err := p.publishBatch(ctx, rc)
		total.Messages += b.Messages
		total.Duplicates += b.Duplicates
		if err != nil || b.busy || b.read < p.config.Batch || time.Now().After(deadline) {
			return total, err
		}
	}
}

type batchResult struct {
	Result
	read int
	busy bool
}

// publishBatch publishes one batch in one transaction holding the relay.
func (p *Publisher) publishBatch(ctx context.Context, rc *river.Client[pgx.Tx]) (batchResult, error) {
	var (
		res    batchResult
		pubErr error
	)
	err := pgx.BeginFunc(ctx, p.config.Pool, func(tx pgx.Tx) error {
		from, err := outbox.LockRelayTx(ctx, tx, RelayName)
		if errors.Is(err, outbox.ErrRelayBusy) {
			res.busy = true
			return nil
		}
		if err != nil {
			return err
		}
		msgs, err := outbox.Read(ctx, tx, from, p.config.Batch, nil)
		if err != nil || len(msgs) == 0 {
			return err
		}
		res.read = len(msgs)
		var acked []bool
		acked, res.Duplicates, pubErr = p.send(ctx, msgs)
		// The acknowledged prefix, in feed order, is published; the rest
		// is published again by the next batch (JetStream drops what it
		// already holds, within its duplicate window).
		for res.Messages < len(msgs) && acked[res.Messages] {
			res.Messages++
		}
		if res.Messages > 0 {
			if err := outbox.AdvanceRelayTx(ctx, tx, RelayName, msgs[res.Messages-1].Position); err != nil {
				return err
			}
		}
		if pubErr != nil {
			if err := p.recordFailureTx(ctx, tx, rc, pubErr); err != nil {
				return err
			}
		} else if _, err := tx.Exec(ctx, `UPDATE message_relays SET failing_since = NULL, alerted_at = NULL
			WHERE name = $1 AND failing_since IS NOT NULL`, RelayName); err != nil {
			return err
		}
		if p.beforeCommit != nil {
			return p.beforeCommit()
		}
		return nil
	})
	if err != nil {
		p.metrics.errors.Inc()
		return batchResult{}, fmt.Errorf("publish messages to nats: %w", err)
	}
	p.metrics.published.WithLabelValues("stored").Add(float64(res.Messages - res.Duplicates))
	p.metrics.published.WithLabelValues("duplicate").Add(float64(res.Duplicates))
	if pubErr != nil {
		p.metrics.errors.Inc()
		return res, fmt.Errorf("publish messages to nats (%d of %d acknowledged in order): %w", res.Messages, res.read, pubErr)
	}
	return res, nil
}

// send publishes msgs and reports which JetStream acknowledged, how many
// of those it already held, and the first error. It publishes in waves:
// the first message of each object in the batch, then, once those are
// acknowledged, the second, and so on; an object whose message failed
// sends nothing more. So whatever fails, an object's messages are stored
// in sequence order, while different objects' go together (up to Batch
// acknowledgements outstanding).
func (p *Publisher) send(ctx context.Context, msgs []outbox.Message) (acked []bool, dups int, err error) {
	acked = make([]bool, len(msgs))
	if !p.ensured.Load() {
		if err := p.EnsureStream(ctx); err != nil {
			return acked, 0, err
		}
	}
	if s := p.nc.Status(); s != nats.CONNECTED {
		return acked, 0, fmt.Errorf("%w at %s (%s)", ErrNotConnected, redact(p.config.URL), s)
	}
	keys := make([]string, len(msgs))
	wave := make([]int, len(msgs))
	count := make(map[string]int, len(msgs))
	waves := 0
	for i, m := range msgs {
		keys[i] = string(m.AggregateType) + "/" + m.AggregateID
		wave[i] = count[keys[i]]
		count[keys[i]]++
		waves = max(waves, wave[i]+1)
	}
	failed := make(map[string]bool)
	fail := func(i int, e error) {
		failed[keys[i]] = true
		if err == nil {
			err = fmt.Errorf("message %s: %w", msgs[i].ID, e)
		}
	}
	type sent struct {
		i    int
		ack  jetstream.PubAckFuture
		span trace.Span // nil: tracing off
	}
	for w := 0; w < waves && err == nil; w++ {
		var out []sent
		for i, m := range msgs {
			if wave[i] != w || failed[keys[i]] || err != nil {
				continue
			}
			nm := nats.NewMsg(p.config.SubjectPrefix + "." + m.Type)
			nm.Data = m.Body
			nm.Header.Set(jetstream.MsgIDHeader, m.ID)
			span := p.publishSpan(ctx, nm, m.ID)
			f, e := p.js.PublishMsgAsync(nm)
			if e != nil {
				endPublishSpan(span, e)
				fail(i, e)
				continue
			}
			out = append(out, sent{i, f, span})
		}
		for n, s := range out {
			select {
			case a := <-s.ack.Ok():
				endPublishSpan(s.span, nil)
				acked[s.i] = true
				if a.Duplicate {
					dups++
				}
			case e := <-s.ack.Err():
				endPublishSpan(s.span, e)
				fail(s.i, e)
			case <-ctx.Done():
				for _, rest := range out[n:] {
					endPublishSpan(rest.span, ctx.Err())
				}
				fail(s.i, ctx.Err())
				return acked, dups, err
			}
		}
	}
	return acked, dups, err
}

// recordFailureTx notes, in the batch's transaction, that publishing
// failed with cause, and queues the nats_unavailable email once it has
// failed for AlertAfter without a success, once per outage.
func (p *Publisher) recordFailureTx(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], cause error) error {
	var (
		since time.Time
		due   bool
	)
	if err := tx.QueryRow(ctx, `
		UPDATE message_relays SET failing_since = coalesce(failing_since, now()), last_error = $2, updated_at = now()
		WHERE name = $1
		RETURNING failing_since, alerted_at IS NULL AND failing_since <= now() - make_interval(secs => $3)`,
		RelayName, cause.Error(), p.config.AlertAfter.Seconds()).Scan(&since, &due); err != nil {
		return fmt.Errorf("record nats failure: %w", err)
	}
	p.config.Logger.WarnContext(ctx, "nats: publishing failed; retrying", "error", cause.Error(),
		"failing_since", since.UTC().Format(time.RFC3339))
	if !due {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE message_relays SET alerted_at = now() WHERE name = $1`, RelayName); err != nil {
		return fmt.Errorf("record nats alert: %w", err)
	}
	_, err := jobs.EnqueueEmailsTx(ctx, tx, rc, []jobs.Email{{
		Kind: jobs.EmailNATSUnavailable, ObjectID: fmt.Sprintf("nats/%d", since.Unix()), Recipient: p.config.OpsEmail,
		Reason: fmt.Sprintf("failing since %s: %s", since.UTC().Format(time.RFC3339), cause.Error()),
	}})
	return err
}

// redact drops the passwords and tokens from NATS URLs (comma-separated)
// for logs and the console.
func redact(raw string) string {
	parts := strings.Split(raw, ",")
	for i, part := range parts {
		u, err := url.Parse(strings.TrimSpace(part))
		switch {
		case err != nil:
			parts[i] = "(invalid URL)"
		case u.User == nil:
		default:
			if _, ok := u.User.Password(); !ok {
				u.User = url.User("REDACTED") // a bare token
			}
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
