package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/delivery/natsjs"
	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/outbox"
)

// natsServer is an embedded nats-server with JetStream, storing in a
// directory of the test's, so that it can be stopped and started again on
// the same port with what it stored.
type natsServer struct {
	dir  string
	port int
	srv  *server.Server
}

func startNATS(t testing.TB) *natsServer {
	t.Helper()
	// A port of freeport's, never handed to another test of this process:
	// on a port the kernel chose, a parallel test's server could start
	// while this one was down, and the publisher, reconnecting, publish to
	// it: the likely way TestServerRestartMidStream once lost 42 of 480
	// in a full make test.
	n := &natsServer{dir: t.TempDir(), port: freeport.MustPort(t)}
	n.start(t)
	t.Cleanup(n.stop)
	return n
}

func (n *natsServer) start(t testing.TB) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: n.port, JetStream: true, StoreDir: n.dir,
		NoLog: true, NoSigs: true, ServerName: "paygate-test",
		// As docs/downstream.md asks of a single server: a message acknowledged is
		// on disk. Without it, a restart loses the last ones acknowledged
		// (TestServerRestartMidStream lost 3 of 480 in 2 of 12 runs).
		SyncAlways: true,
	})
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	n.srv, n.port = srv, srv.Addr().(*net.TCPAddr).Port
}

func (n *natsServer) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

func (n *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

type testBundle struct {
	pool  *pgxpool.Pool
	nats  *natsServer
	river *river.Client[pgx.Tx]
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	pool := testdb.New(t)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true, Register: func(w *river.Workers) []*river.PeriodicJob {
		river.AddWorker(w, &natsjs.Worker{})
		return nil
	}})
	require.NoError(t, err)
	return &testBundle{pool: pool, nats: startNATS(t), river: jc.River}
}

func (b *testBundle) publisher(t testing.TB, configure ...func(*natsjs.Config)) *natsjs.Publisher {
	t.Helper()
	cfg := natsjs.Config{URL: b.nats.url(), Pool: b.pool, OpsEmail: "ops@example.com", AckTimeout: 2 * time.Second}
	for _, f := range configure {
		f(&cfg)
	}
	p, err := natsjs.New(cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// write commits msgs in one transaction, as a change would.
func (b *testBundle) write(t testing.TB, msgs ...outbox.Message) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		return outbox.WriteTx(t.Context(), tx, msgs)
	}))
}

// sequence places what committed, as the relay does before kicking.
func (b *testBundle) sequence(t testing.TB) {
	t.Helper()
	_, err := outbox.Sequence(t.Context(), b.pool, 100_000)
	require.NoError(t, err)
}

func (b *testBundle) backlog(t testing.TB) int64 {
	t.Helper()
	n, _, err := outbox.RelayLag(t.Context(), b.pool, natsjs.RelayName)
	require.NoError(t, err)
	return n
}

func message(t testing.TB, object string, seq int64, typ string) outbox.Message {
	t.Helper()
	m, err := outbox.New(outbox.AggregatePayment, object, seq, typ, time.Now(), map[string]any{
		"payment": map[string]any{"id": object, "status": typ, "n": seq},
	})
	require.NoError(t, err)
	return m
}

// interleaved is objects' messages 1..perObject, round robin.
func interleaved(t testing.TB, prefix string, objects, perObject int) []outbox.Message {
	t.Helper()
	var out []outbox.Message
	for s := 1; s <= perObject; s++ {
		for o := range objects {
			out = append(out, message(t, fmt.Sprintf("%s_%d", prefix, o), int64(s), "payment.processing"))
		}
	}
	return out
}

// tb is what the checks need of a *testing.T or a *rapid.T.
type tb interface {
	require.TestingT
	Helper()
}

// stored is what a stream holds, in its order.
func stored(t tb, url, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		out = append(out, m)
	}
	require.Len(t, out, int(info.State.Msgs))
	return out
}

// requireStream fails unless the stream holds each of want once, under its
// id, on <prefix>.<type>, with its exact bytes, and each object's messages
// in sequence order.
func requireStream(t tb, got []*jetstream.RawStreamMsg, prefix string, want []outbox.Message) {
	t.Helper()
	byID := make(map[string]outbox.Message, len(want))
	for _, m := range want {
		byID[m.ID] = m
	}
	seen := make(map[string]bool, len(got))
	last := make(map[string]int64)
	for _, g := range got {
		id := g.Header.Get(jetstream.MsgIDHeader)
		w, ok := byID[id]
		require.True(t, ok, "stream holds %q, which is not a message of the workload", id)
		require.False(t, seen[id], "stream holds %s twice", id)
		seen[id] = true
		require.Equal(t, prefix+"."+w.Type, g.Subject)
		require.Equal(t, string(w.Body), string(g.Data), "the bytes of %s", id)
		obj := string(w.AggregateType) + "/" + w.AggregateID
		require.Greater(t, w.Sequence, last[obj], "%s: sequence %d stored after %d", obj, w.Sequence, last[obj])
		last[obj] = w.Sequence
	}
	if len(seen) != len(want) {
		// Which ones, so that a loss can be placed against the test's
		// timeline (before the outage, during it, after it).
		var missing []string
		for i, m := range want {
			if !seen[m.ID] && len(missing) < 40 {
				missing = append(missing, fmt.Sprintf("#%d %s/%s seq %d", i, m.AggregateType, m.AggregateID, m.Sequence))
			}
		}
		require.Failf(t, "every message is in the stream", "%d of %d stored; missing (in the workload's order, at most 40): %s",
			len(seen), len(want), strings.Join(missing, ", "))
	}
}

// TestPublishRandomWorkload: whatever the objects, the transactions that
// write their messages, the batch size and when publishing runs, the
// stream holds every message once, byte for byte, each object's in
// sequence order, and the publisher's place is the feed's end.
func TestPublishRandomWorkload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var round atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		r := round.Add(1)
		prefix, stream := fmt.Sprintf("pg%d", r), fmt.Sprintf("PG%d", r)
		p := b.publisher(t, func(c *natsjs.Config) {
			c.Stream, c.SubjectPrefix = stream, prefix
			c.Batch = rapid.IntRange(1, 12).Draw(rt, "batch")
		})
		// The stream starts where the last round's publisher left off.
		require.NoError(rt, p.EnsureStream(t.Context()))
		objects := rapid.IntRange(1, 6).Draw(rt, "objects")
		picks := rapid.SliceOfN(rapid.IntRange(0, objects-1), 1, 40).Draw(rt, "picks")
		seqs := make([]int64, objects)
		var all, pending []outbox.Message
		for i, o := range picks {
			seqs[o]++
			m := message(t, fmt.Sprintf("pi_%d_%d", r, o), seqs[o], rapid.SampledFrom([]string{
				"payment.processing", "payment.succeeded", "payment.partially_refunded", "payment.refunded"}).Draw(rt, "type"))
			all, pending = append(all, m), append(pending, m)
			if i == len(picks)-1 || rapid.Bool().Draw(rt, "commit") {
				b.write(t, pending...)
				pending = nil
				if rapid.Bool().Draw(rt, "publish") {
					b.sequence(t)
					_, err := p.Publish(t.Context(), b.river)
					require.NoError(rt, err)
				}
			}
		}
		b.sequence(t)
		res, err := p.Publish(t.Context(), b.river)
		require.NoError(rt, err)
		require.Zero(rt, res.Duplicates)
		require.Zero(rt, b.backlog(t))
		requireStream(rt, stored(rt, b.nats.url(), stream), prefix, all)
	})
}

// TestCrashBeforeCommitRepublishesDeduplicated: a batch JetStream stored
// whose transaction never committed (a crash) is published again under
// the same ids, and JetStream keeps each once.
func TestCrashBeforeCommitRepublishesDeduplicated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.publisher(t)
	msgs := interleaved(t, "pi_crash", 4, 5)
	b.write(t, msgs...)
	b.sequence(t)

	natsjs.SetBeforeCommit(p, func() error { return errors.New("killed before the commit") })
	_, err := p.Publish(t.Context(), b.river)
	require.ErrorContains(t, err, "killed before the commit")
	require.EqualValues(t, len(msgs), b.backlog(t), "nothing marked published")
	require.Len(t, stored(t, b.nats.url(), natsjs.DefaultStream), len(msgs), "JetStream stored the batch")

	natsjs.SetBeforeCommit(p, nil)
	res, err := p.Publish(t.Context(), b.river)
	require.NoError(t, err)
	require.Equal(t, natsjs.Result{Messages: len(msgs), Duplicates: len(msgs)}, res, "republished, every one a duplicate")
	require.Zero(t, b.backlog(t))
	requireStream(t, stored(t, b.nats.url(), natsjs.DefaultStream), natsjs.DefaultSubjectPrefix, msgs)
}

// TestFullStreamDelaysPublishing: a stream that refuses messages (full,
// DiscardNew) holds publishing back: what it acknowledged in feed order is
// published, the rest waits, each object in order, until it has room.
func TestFullStreamDelaysPublishing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nc, err := nats.Connect(b.nats.url())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cfg := jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, Storage: jetstream.FileStorage,
		Discard: jetstream.DiscardNew, MaxMsgs: 5, Duplicates: time.Minute}
	_, err = js.CreateStream(t.Context(), cfg)
	require.NoError(t, err)
	p := b.publisher(t, func(c *natsjs.Config) { c.Stream, c.SubjectPrefix = "FULL", "full" })

	msgs := interleaved(t, "pi_full", 3, 4)
	b.write(t, msgs...)
	b.sequence(t)
	res, err := p.Publish(t.Context(), b.river)
	require.Error(t, err)
	require.EqualValues(t, len(msgs)-res.Messages, b.backlog(t))
	require.LessOrEqual(t, res.Messages, 5, "the acknowledged prefix, in feed order")
	got := stored(t, b.nats.url(), "FULL")
	require.Len(t, got, 5)

	cfg.MaxMsgs = -1
	_, err = js.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)
	res, err = p.Publish(t.Context(), b.river)
	require.NoError(t, err)
	require.Zero(t, b.backlog(t))
	requireStream(t, stored(t, b.nats.url(), "FULL"), "full", msgs)
}

// TestServerRestartMidStream: NATS stopped while messages are written and
// published, then started again on its port and store: the publisher's
// errors are retries (the job's error, never a cancel), writing never
// waits on it, and once NATS is back every message is in the stream once,
// in order per object.
func TestServerRestartMidStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.publisher(t)
	ctx := t.Context()

	const objects, perObject = 12, 40
	var (
		all         []outbox.Message
		published   atomic.Int64
		duplicates  atomic.Int64
		failures    atomic.Int64
		natsDown    = make(chan struct{})
		writersDone = make(chan struct{})
	)
	for s := 1; s <= perObject; s++ {
		for o := range objects {
			all = append(all, message(t, fmt.Sprintf("pi_restart_%d", o), int64(s), "payment.succeeded"))
		}
	}
	// The first half is written while NATS is up, the second only once
	// it is down: the test starts NATS again after the second half is
	// written, so writing that waited on NATS would never finish.
	half := len(all) / 2 / 3 * 3
	go func() {
		defer close(writersDone)
		for i := 0; i < len(all); i += 3 {
			if i == half {
				select {
				case <-natsDown:
				case <-ctx.Done():
					return
				}
			}
			if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				return outbox.WriteTx(ctx, tx, all[i:min(i+3, len(all))])
			}); err != nil {
				t.Errorf("write: %v", err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	publishing := make(chan struct{})
	stopPublishing := make(chan struct{})
	go func() {
		defer close(publishing)
		for {
			select {
			case <-stopPublishing:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := outbox.Sequence(ctx, b.pool, 100_000); err != nil {
				t.Errorf("sequence: %v", err)
				return
			}
			res, err := p.Publish(ctx, b.river)
			published.Add(int64(res.Messages))
			duplicates.Add(int64(res.Duplicates))
			if err != nil {
				failures.Add(1)
			}
		}
	}()

	require.Eventually(t, func() bool { return published.Load() > 100 }, 10*time.Second, 5*time.Millisecond)
	b.nats.stop()
	beforeStop := published.Load()
	require.Eventually(t, func() bool { return failures.Load() > 3 }, 10*time.Second, 5*time.Millisecond)

	// The job's error while NATS is down is a retry, not a cancel.
	worker := &natsjs.Worker{Publisher: p}
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read-only use
	_, err = rivertest.NewWorker(t, riverpgxv5.New(b.pool), &river.Config{}, worker).Work(ctx, t, tx, natsjs.PublishArgs{}, nil)
	require.Error(t, err)
	var cancel *river.JobCancelError
	require.False(t, errors.As(err, &cancel), "a NATS outage is retried, never cancelled: %v", err)
	require.NoError(t, tx.Rollback(ctx))

	close(natsDown)
	select {
	case <-writersDone:
	case <-time.After(60 * time.Second):
		t.Fatal("writing messages waits on NATS: the second half was not written while NATS was down")
	}
	b.nats.start(t)
	require.Eventually(t, func() bool { return b.backlog(t) == 0 }, 30*time.Second, 20*time.Millisecond)
	close(stopPublishing)
	<-publishing
	t.Logf("acknowledged: about %d before the stop, %d in all, %d of them duplicates; %d failed publishes",
		beforeStop, published.Load(), duplicates.Load(), failures.Load())
	requireStream(t, stored(t, b.nats.url(), natsjs.DefaultStream), natsjs.DefaultSubjectPrefix, all)
}

// TestAlertOncePerOutage: publishing failing for AlertAfter emails ops
// once, however often it fails after; a success ends the outage, and the
// next outage emails again.
func TestAlertOncePerOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.publisher(t, func(c *natsjs.Config) { c.AlertAfter = 200 * time.Millisecond; c.AckTimeout = 200 * time.Millisecond })
	emails := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM email_outbox
			WHERE kind = 'nats_unavailable' AND recipient = 'ops@example.com' AND status = 'pending'`).Scan(&n))
		return n
	}
	fail := func() {
		t.Helper()
		_, err := p.Publish(t.Context(), b.river)
		require.Error(t, err)
	}

	b.write(t, message(t, "pi_alert", 1, "payment.processing"))
	b.sequence(t)
	b.nats.stop()
	fail()
	st, err := p.Status(t.Context())
	require.NoError(t, err)
	require.True(t, st.Configured)
	require.NotNil(t, st.FailingSince)
	require.NotEmpty(t, st.LastError)
	require.EqualValues(t, 1, st.Backlog)
	require.Zero(t, emails(), "not before AlertAfter")

	time.Sleep(250 * time.Millisecond)
	fail()
	require.Equal(t, 1, emails())
	time.Sleep(250 * time.Millisecond)
	fail()
	fail()
	require.Equal(t, 1, emails(), "one email per outage")

	b.nats.start(t)
	require.Eventually(t, func() bool {
		_, err := p.Publish(t.Context(), b.river)
		return err == nil && b.backlog(t) == 0
	}, 10*time.Second, 50*time.Millisecond)
	st, err = p.Status(t.Context())
	require.NoError(t, err)
	require.Nil(t, st.FailingSince, "a success ends the outage")
	require.Nil(t, st.AlertedAt)

	b.nats.stop()
	b.write(t, message(t, "pi_alert", 2, "payment.succeeded"))
	b.sequence(t)
	fail()
	time.Sleep(250 * time.Millisecond)
	fail()
	require.Equal(t, 2, emails(), "the next outage emails again")
}

// TestKickQueuesOneJobWhenBehind: the relay's kick queues the publisher's
// job only when it is behind the feed, and one at a time.
func TestKickQueuesOneJobWhenBehind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.publisher(t)
	jobsQueued := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job
			WHERE kind = 'publish_nats' AND queue = 'delivery' AND state = 'available'`).Scan(&n))
		return n
	}
	require.NoError(t, p.Kick(t.Context(), b.river))
	require.Zero(t, jobsQueued(), "nothing to publish")

	b.write(t, interleaved(t, "pi_kick", 2, 2)...)
	require.NoError(t, p.Kick(t.Context(), b.river))
	require.Zero(t, jobsQueued(), "nothing placed in the feed yet")
	b.sequence(t)
	require.NoError(t, p.Kick(t.Context(), b.river))
	require.NoError(t, p.Kick(t.Context(), b.river))
	require.Equal(t, 1, jobsQueued())

	var off *natsjs.Publisher
	require.NoError(t, off.Kick(t.Context(), b.river), "publishing off")
	st, err := off.Status(t.Context())
	require.NoError(t, err)
	require.False(t, st.Configured)

	_, err = p.Publish(t.Context(), b.river)
	require.NoError(t, err)
	require.Zero(t, b.backlog(t))
}

// TestObjectOrderKeptWhenOneIsRefused: when JetStream refuses an object's
// message (here one too large for the room left) the object's next one is
// not published ahead of it, though it would fit: the stream never holds
// an object's messages out of sequence order.
func TestObjectOrderKeptWhenOneIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nc, err := nats.Connect(b.nats.url())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cfg := jetstream.StreamConfig{Name: "ROOM", Subjects: []string{"room.>"}, Storage: jetstream.FileStorage,
		Discard: jetstream.DiscardNew, MaxBytes: 2048, Duplicates: time.Minute}
	_, err = js.CreateStream(t.Context(), cfg)
	require.NoError(t, err)
	p := b.publisher(t, func(c *natsjs.Config) { c.Stream, c.SubjectPrefix = "ROOM", "room" })

	big, err := outbox.New(outbox.AggregatePayment, "pi_big", 1, "payment.processing", time.Now(),
		map[string]any{"payment": map[string]any{"id": "pi_big", "note": string(make([]byte, 4096))}})
	require.NoError(t, err)
	msgs := []outbox.Message{message(t, "pi_small", 1, "payment.processing"), big, message(t, "pi_big", 2, "payment.succeeded")}
	b.write(t, msgs...)
	b.sequence(t)
	res, err := p.Publish(t.Context(), b.river)
	require.Error(t, err)
	require.Equal(t, 1, res.Messages)
	requireStream(t, stored(t, b.nats.url(), "ROOM"), "room", msgs[:1])

	cfg.MaxBytes = -1
	_, err = js.UpdateStream(t.Context(), cfg)
	require.NoError(t, err)
	_, err = p.Publish(t.Context(), b.river)
	require.NoError(t, err)
	requireStream(t, stored(t, b.nats.url(), "ROOM"), "room", msgs)
}
