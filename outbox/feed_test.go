package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/outbox"
)

// paymentMessage is the seq-th message of payment id, dated now.
func paymentMessage(t testing.TB, id string, seq int64) outbox.Message {
	t.Helper()
	m, err := outbox.New(outbox.AggregatePayment, id, seq, "payment.succeeded", time.Now(),
		map[string]any{"payment": map[string]any{"id": id}})
	require.NoError(t, err)
	return m
}

// insertOrder returns the n (insert order) of message id.
func insertOrder(t testing.TB, pool *pgxpool.Pool, id string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT n FROM messages WHERE id = $1`, id).Scan(&n))
	return n
}

// TestFeedPlacesALateCommitAfterTheReader: A inserts first and commits
// last; a reader that read B meanwhile, and holds B's cursor, still gets A
// on its next read. (A feed ordered by insert would hand out A's place
// behind the reader's, and the reader would never see it.)
func TestFeedPlacesALateCommitAfterTheReader(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.NewAppRole(t)

	txA, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txA.Rollback(ctx) //nolint:errcheck
	a := paymentMessage(t, "pi_a", 1)
	require.NoError(t, outbox.WriteTx(ctx, txA, []outbox.Message{a}))

	b := paymentMessage(t, "pi_b", 1)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return outbox.WriteTx(ctx, tx, []outbox.Message{b})
	}))

	placed, err := outbox.Sequence(ctx, pool, 100)
	require.NoError(t, err)
	require.Equal(t, 1, placed, "only B is committed")
	got, err := outbox.Read(ctx, pool, 0, 100, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, b.ID, got[0].ID)
	require.Equal(t, b.Body, got[0].Body)
	cursor := outbox.Cursor(got[0].Position)

	require.NoError(t, txA.Commit(ctx))
	require.Less(t, insertOrder(t, pool, a.ID), insertOrder(t, pool, b.ID), "A was inserted first")
	placed, err = outbox.Sequence(ctx, pool, 100)
	require.NoError(t, err)
	require.Equal(t, 1, placed)

	after, err := outbox.ParseCursor(cursor)
	require.NoError(t, err)
	got, err = outbox.Read(ctx, pool, after, 100, nil)
	require.NoError(t, err)
	require.Len(t, got, 1, "the message committed after the reader passed is read after its cursor")
	require.Equal(t, a.ID, got[0].ID)
	require.Greater(t, got[0].Position, after)

	got, err = outbox.Read(ctx, pool, got[0].Position, 100, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

// TestFeedNeverSkipsALateCommit: writers commit (or roll back) after random
// delays, and some hold their transaction until the feed placed a message
// inserted after theirs, so commits come out of insert order; some place
// their messages themselves (WritePlacedTx) and hold the sequencer until
// they commit or roll back; while two
// sequencers and a reader paging through the feed run all along. At the end the reader read
// every committed message exactly once and nothing rolled back, each
// object's messages in sequence order, at positions that only grow.
func TestFeedNeverSkipsALateCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.NewAppRole(t)

	const writers, txPerWriter, aggregatesPerWriter = 8, 25, 3
	var (
		mu                  sync.Mutex
		committed           = map[string]outbox.Message{}
		writing, sequencing sync.WaitGroup
		stop                atomic.Bool
	)
	// Should the reader fail, the goroutines end (t.Context is done) before
	// the database goes.
	t.Cleanup(func() { stop.Store(true); writing.Wait(); sequencing.Wait() })
	for w := range writers {
		writing.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			// The counters as committed: a rolled-back transaction's
			// sequences are written again by the next one, as the counter
			// on the payment's row would be.
			next := make([]int64, aggregatesPerWriter)
			for i := range next {
				next[i] = 1
			}
			for i := range txPerWriter {
				k := rng.IntN(aggregatesPerWriter)
				id := fmt.Sprintf("pi_w%d_%d", w, k)
				var msgs []outbox.Message
				for j := range int64(1 + rng.IntN(3)) {
					msgs = append(msgs, paymentMessage(t, id, next[k]+j))
				}
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rng.IntN(1500)) * time.Microsecond)
				// A quarter of the writers place their messages as they
				// write them, as applying does; none of them straggles
				// (holding the sequencer, it would wait for itself).
				write := outbox.WriteTx
				if w%4 == 3 {
					write = outbox.WritePlacedTx
				}
				if err := write(ctx, tx, msgs); err != nil {
					t.Error(err)
					_ = tx.Rollback(ctx)
					return
				}
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				straggler := w%2 == 0 && i == 1
				if straggler {
					// A straggler: it commits only once the feed has
					// placed a message inserted after its own, whatever
					// the timing of the machine.
					var n int64
					if err := tx.QueryRow(ctx, `SELECT max(n) FROM messages WHERE aggregate_id = $1`, id).Scan(&n); err != nil {
						t.Error(err)
					}
					if err := awaitPlacedAfter(ctx, pool, n); err != nil {
						t.Error(err)
					}
				}
				if !straggler && rng.IntN(8) == 0 {
					if err := tx.Rollback(ctx); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
				next[k] += int64(len(msgs))
				mu.Lock()
				for _, m := range msgs {
					committed[m.ID] = m
				}
				mu.Unlock()
			}
		})
	}

	for range 2 {
		sequencing.Go(func() {
			for !stop.Load() {
				if _, err := outbox.Sequence(ctx, pool, 7); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(500 * time.Microsecond)
			}
		})
	}

	var writersDone atomic.Bool
	go func() { writing.Wait(); writersDone.Store(true) }()

	var (
		read      []outbox.Message
		cursor    = outbox.Cursor(0)
		deadline  = time.Now().Add(60 * time.Second)
		lastPlace int64
	)
	for {
		require.True(t, time.Now().Before(deadline), "the reader never caught up")
		// Both before reading: once the writers are done and nothing is
		// left unplaced, whatever the read below misses was never written.
		done := writersDone.Load()
		var unplaced int64 = -1
		if done {
			var err error
			unplaced, _, err = outbox.Unplaced(ctx, pool)
			require.NoError(t, err)
		}
		_, err := outbox.Sequence(ctx, pool, 10)
		require.NoError(t, err)
		after, err := outbox.ParseCursor(cursor)
		require.NoError(t, err)
		page, err := outbox.Read(ctx, pool, after, 5, nil)
		require.NoError(t, err)
		for _, m := range page {
			require.Greater(t, m.Position, lastPlace, "positions only grow in the feed")
			lastPlace = m.Position
		}
		read = append(read, page...)
		if len(page) > 0 {
			cursor = outbox.Cursor(page[len(page)-1].Position)
			continue
		}
		if done && unplaced == 0 {
			break
		}
	}
	stop.Store(true)
	sequencing.Wait()
	require.False(t, t.Failed())

	times := map[string]int{}
	seqs := map[string][]int64{}
	for _, m := range read {
		times[m.ID]++
		seqs[m.AggregateID] = append(seqs[m.AggregateID], m.Sequence)
		want, ok := committed[m.ID]
		require.True(t, ok, "read %s (%s #%d), which was rolled back", m.ID, m.AggregateID, m.Sequence)
		require.Equal(t, want.Body, m.Body)
	}
	for id := range committed {
		require.Equal(t, 1, times[id], "message %s read %d times", id, times[id])
	}
	require.Len(t, read, len(committed))
	for agg, s := range seqs {
		for i, seq := range s {
			require.Equal(t, int64(i+1), seq, "%s: sequences in feed order %v", agg, s)
		}
	}

	// The run did commit out of insert order: else it proved nothing.
	var reordered int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*) FROM messages a JOIN messages b ON a.n < b.n AND a.position > b.position`).Scan(&reordered))
	require.Positive(t, reordered, "no commit came out of insert order")
	requireDensePositions(t, pool, len(committed))
}

// awaitPlacedAfter waits until the feed placed a message inserted after the
// n-th, which is not committed.
func awaitPlacedAfter(ctx context.Context, pool *pgxpool.Pool, n int64) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var passed bool
		err := pool.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM messages WHERE position IS NOT NULL AND n > $1)`, n).Scan(&passed)
		if err != nil {
			return err
		}
		if passed {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return fmt.Errorf("no message inserted after the %d-th was placed in 20s", n)
}

// requireDensePositions: the n messages stored hold the positions 1..n,
// each once, and the sequencer stands at n.
func requireDensePositions(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	var count, distinct, unplaced, lowest, highest, last int64
	require.NoError(t, pool.QueryRow(t.Context(), `
		SELECT count(*), count(DISTINCT position), count(*) FILTER (WHERE position IS NULL),
		       coalesce(min(position), 0), coalesce(max(position), 0),
		       (SELECT last_position FROM message_sequencer)
		FROM messages`).Scan(&count, &distinct, &unplaced, &lowest, &highest, &last))
	require.Equal(t, int64(n), count)
	require.Zero(t, unplaced, "every message is placed")
	require.Equal(t, count, distinct, "no two messages share a position")
	require.Equal(t, int64(1), lowest)
	require.Equal(t, count, highest, "no position is skipped")
	require.Equal(t, highest, last)
}

// TestConcurrentSequencersNeverShareAPosition: many callers placing the
// same backlog at once, in small steps, give every message one position of
// its own, 1..n without a gap, each object's messages in sequence order;
// and together they report each message placed once.
func TestConcurrentSequencersNeverShareAPosition(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.NewAppRole(t)

	const aggregates, perAggregate = 40, 10
	for seq := range int64(perAggregate) {
		var msgs []outbox.Message
		for a := range aggregates {
			msgs = append(msgs, paymentMessage(t, fmt.Sprintf("pi_%d", a), seq+1))
		}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.WriteTx(ctx, tx, msgs) }))
	}

	var (
		total   atomic.Int64
		callers sync.WaitGroup
		start   = make(chan struct{})
	)
	for range 8 {
		callers.Go(func() {
			<-start
			for {
				placed, err := outbox.Sequence(ctx, pool, 3)
				if err != nil {
					t.Error(err)
					return
				}
				total.Add(int64(placed))
				unplaced, _, err := outbox.Unplaced(ctx, pool)
				if err != nil {
					t.Error(err)
					return
				}
				if unplaced == 0 {
					return
				}
			}
		})
	}
	close(start)
	callers.Wait()
	require.False(t, t.Failed())

	placed, err := outbox.Sequence(ctx, pool, 100)
	require.NoError(t, err)
	require.Zero(t, placed, "nothing was left unplaced")
	require.Equal(t, int64(aggregates*perAggregate), total.Load(), "each message is reported placed once")
	requireDensePositions(t, pool, aggregates*perAggregate)

	var outOfOrder int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*) FROM messages a JOIN messages b
		ON a.aggregate_id = b.aggregate_id AND a.sequence < b.sequence AND a.position > b.position`).Scan(&outOfOrder))
	require.Zero(t, outOfOrder, "an object's messages are placed in sequence order")
}

// TestWritePlacedHoldsTheFeedUntilItEnds: messages written placed take the
// next positions at once, in the order given; until their transaction
// ends nobody places anything after them, so a reader cannot pass their
// place before it can read them; rolled back, their positions are given
// again.
func TestWritePlacedHoldsTheFeedUntilItEnds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.NewAppRole(t)

	before := paymentMessage(t, "pi_before", 1)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return outbox.WriteTx(ctx, tx, []outbox.Message{before})
	}))
	placed, err := outbox.Sequence(ctx, pool, 100)
	require.NoError(t, err)
	require.Equal(t, 1, placed)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	first, second := paymentMessage(t, "pi_placed", 1), paymentMessage(t, "pi_placed", 2)
	require.NoError(t, outbox.WritePlacedTx(ctx, tx, []outbox.Message{first, second}))
	var positions []int64
	rows, err := tx.Query(ctx, `SELECT position FROM messages WHERE aggregate_id = 'pi_placed' ORDER BY sequence`)
	require.NoError(t, err)
	positions, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{2, 3}, positions, "the next positions, in the order given")

	// Committed meanwhile, by another writer: not placed while the first
	// transaction holds the feed.
	later := paymentMessage(t, "pi_later", 1)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return outbox.WriteTx(ctx, tx, []outbox.Message{later})
	}))
	placed, err = outbox.Sequence(ctx, pool, 100)
	require.NoError(t, err)
	require.Zero(t, placed, "the feed is held")
	got, err := outbox.Read(ctx, pool, 1, 100, nil)
	require.NoError(t, err)
	require.Empty(t, got, "nothing readable after the place before")

	require.NoError(t, tx.Rollback(ctx))
	placed, err = outbox.Sequence(ctx, pool, 100)
	require.NoError(t, err)
	require.Equal(t, 1, placed)
	got, err = outbox.Read(ctx, pool, 1, 100, nil)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, later.ID, got[0].ID)
	require.Equal(t, int64(2), got[0].Position, "a rolled-back place is given again")

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return outbox.WritePlacedTx(ctx, tx, []outbox.Message{first, second})
	}))
	got, err = outbox.Read(ctx, pool, 2, 100, nil)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []string{first.ID, second.ID}, []string{got[0].ID, got[1].ID})
	require.Equal(t, []int64{3, 4}, []int64{got[0].Position, got[1].Position})
	requireDensePositions(t, pool, 4)
}

// emptyFeedKeepingPlans is a new database whose feed was analyzed while
// empty, and one connection to it that keeps the plans it makes: how a
// connection opened on a new database runs for hours.
func emptyFeedKeepingPlans(t *testing.T) (pool, one *pgxpool.Pool) {
	t.Helper()
	pool = testdb.New(t)
	_, err := pool.Exec(t.Context(), `ANALYZE messages`)
	require.NoError(t, err)
	return pool, testdb.KeepingPlans(t, pool)
}

// placeMessages places n messages at positions 1 to n, one payment's each.
func placeMessages(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `
		INSERT INTO messages (id, type, aggregate_type, aggregate_id, sequence, created_at, position, body)
		SELECT 'msg_' || i, 'payment.succeeded', 'payment', 'pi_' || i, 1, now(), i, '\x7b7d'
		FROM generate_series(1, $1::int) i`, n)
	require.NoError(t, err)
}

// TestReadGoesByPosition: reading the feed after a position costs the
// messages read, not the feed, on the statistics of an empty feed (a new
// database, until it is analyzed again), for a connection that made its
// plan then and keeps it. The NATS publisher and a feed reader read this
// way on the same connections for hours; the plan made on an empty feed
// sorted a sequential scan of every message, at every read.
func TestReadGoesByPosition(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, reader := emptyFeedKeepingPlans(t)
	for range 10 {
		_, err := outbox.Read(ctx, reader, 0, 100, nil)
		require.NoError(t, err)
	}

	const history, fresh = 20000, 20
	placeMessages(t, pool, history+fresh)
	got, err := outbox.Read(ctx, reader, history, 100, nil)
	require.NoError(t, err)
	require.Len(t, got, fresh)

	// The plan that read, as the connection keeps it.
	plan := testdb.ExplainKept(t, reader, `%FROM messages%ORDER BY position LIMIT $2`, fmt.Sprintf("%d, 100, NULL", history))
	require.Equal(t, float64(fresh), plan.ActualRows)
	read := plan.RowsOf("messages")
	require.Less(t, read, float64(2*fresh), "messages read to read %d after %d:\n%s", fresh, history, plan.Raw)
}

// TestSequenceReadsTheUnplacedOnly: placing the committed messages costs
// the messages placed, not the feed, on the statistics of an empty feed,
// for a connection that made its plan then and keeps it (the relay's,
// which places at every step while holding the sequencer's lock).
func TestSequenceReadsTheUnplacedOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool, relay := emptyFeedKeepingPlans(t)
	for range 10 {
		_, err := outbox.Sequence(ctx, relay, 10_000)
		require.NoError(t, err)
	}

	// A feed placed long ago, and fresh messages committed unplaced.
	const history, fresh = 20000, 20
	placeMessages(t, pool, history)
	_, err := pool.Exec(ctx, `UPDATE message_sequencer SET last_position = $1`, history)
	require.NoError(t, err)
	var msgs []outbox.Message
	for i := range fresh {
		msgs = append(msgs, paymentMessage(t, fmt.Sprintf("pi_fresh_%d", i), 1))
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.WriteTx(ctx, tx, msgs) }))
	placed, err := outbox.Sequence(ctx, relay, 10_000)
	require.NoError(t, err)
	require.Equal(t, fresh, placed)

	// The plan that read the unplaced, as the connection keeps it: none
	// are left, and finding that reads none.
	plan := testdb.ExplainKept(t, relay, `%FROM messages WHERE position IS NULL ORDER BY n LIMIT $1`, "10000")
	read := plan.RowsOf("messages")
	require.Less(t, read, float64(2*fresh), "messages read to find none unplaced in a feed of %d:\n%s", history+fresh, plan.Raw)
}
