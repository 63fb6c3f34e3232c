package delivery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/outbox"
)

// TestFeedClaimReadsWhatItClaims: reading an endpoint's next messages from
// the feed costs the messages read, not the deliveries the endpoint has
// had (a month of them are kept), on whatever statistics PostgreSQL has:
// none (a new database, until it is analyzed); those of a deliveries
// table analyzed while empty; or those of a table analyzed when another
// endpoint's deliveries were all it held (an endpoint added since:
// autovacuum analyzes again only once a tenth of the table changed). The
// check "not handed to it yet" was once planned as a scan of all the
// endpoint's deliveries for each message read: by its (endpoint_id,
// message_id) key without statistics, as a sequential scan on those of an
// empty table, and in make bench, for the second endpoint, by (endpoint_id,
// position) with the message as a filter. The rows counted are the
// database's own, those a scan of deliveries returned and those its filter
// removed.
func TestFeedClaimReadsWhatItClaims(t *testing.T) {
	for _, stats := range []string{"none", "empty", "another endpoint's"} {
		t.Run(stats, func(t *testing.T) { feedClaimCost(t, stats) })
	}
}

func feedClaimCost(t *testing.T, stats string) {
	ctx := context.Background()
	pool := testdb.New(t)
	store := NewStore(pool, GuardConfig{AllowPrivate: true})
	switch stats {
	case "empty":
		_, err := pool.Exec(ctx, `ANALYZE deliveries, delivery_attempts, messages`)
		require.NoError(t, err)
	case "another endpoint's":
		other, err := store.Create(ctx, NewEndpoint{URL: "http://127.0.0.1:9/other", EventTypes: []string{AllTypes}})
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `
			INSERT INTO deliveries (endpoint_id, message_id, message_created_at, type, aggregate, sequence, position,
				status, attempts, next_attempt_at)
			SELECT $1, 'msg_other_' || i, now(), 'payment.succeeded', 'payment/pi_other_' || i, 1, -i, 'succeeded', 1, now()
			FROM generate_series(1, 5000) i`, other.ID)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `ANALYZE deliveries, delivery_attempts, messages`)
		require.NoError(t, err)
	}
	e, err := store.Create(ctx, NewEndpoint{URL: "http://127.0.0.1:9/hook", EventTypes: []string{AllTypes}})
	require.NoError(t, err)

	// The claim as a dispatcher's connection runs it from the start,
	// when the endpoint had no deliveries: PostgreSQL keeps the plan of a
	// statement run that often and uses it from then on.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Conn().Prepare(ctx, "claim", feedClaim)
	require.NoError(t, err)
	// As a claim runs it: after probeSQL, in one transaction.
	claim := func(f func(tx pgx.Tx)) {
		require.NoError(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, probeSQL)
			require.NoError(t, err)
			f(tx)
			return nil
		}))
	}
	for range 10 {
		claim(func(tx pgx.Tx) {
			rows, err := tx.Query(ctx, "claim", e.ID, 128, 32)
			require.NoError(t, err)
			rows.Close()
			require.NoError(t, rows.Err())
		})
	}

	const history = 5000
	_, err = pool.Exec(ctx, `
		INSERT INTO deliveries (endpoint_id, message_id, message_created_at, type, aggregate, sequence, position,
			status, attempts, next_attempt_at)
		SELECT $1, 'msg_old_' || i, now(), 'payment.succeeded', 'payment/pi_old_' || i, 1, -i, 'succeeded', 1, now()
		FROM generate_series(1, $2::int) i`, e.ID, history)
	require.NoError(t, err)

	const fresh = 20
	placeFresh(t, pool, fresh)

	var raw []byte
	claim(func(tx pgx.Tx) {
		require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim($1, 128, 32)`, pgx.QueryExecModeSimpleProtocol, e.ID).Scan(&raw))
	})
	plan := testdb.ParsePlan(t, raw)
	claimed, read := plan.ActualRows, plan.RowsOf("deliveries")
	require.Equal(t, float64(fresh), claimed)
	require.Less(t, read, float64(2*fresh),
		"deliveries rows read to claim %d messages, with %d delivered before:\n%s", fresh, history, raw)
}

// TestKickReadsWhatItLooksAt: the relay's look for endpoints with messages
// to send (Kick, at every step: ten times a second under load) costs the
// messages it looks at, not the feed, on whatever statistics PostgreSQL
// has: none, or those of a feed analyzed while it was small. The relay's
// connection keeps the plan it made then; once made as a sequential scan
// of every partition of messages, sorted by position, it read the whole
// feed at every step (4.9 ms a step in make bench on a cluster whose
// autovacuum analyzed the feed early, tens of thousands of messages; a
// month's feed would take seconds).
func TestKickReadsWhatItLooksAt(t *testing.T) {
	for _, stats := range []string{"none", "empty", "small"} {
		t.Run(stats, func(t *testing.T) { kickCost(t, stats) })
	}
}

func kickCost(t *testing.T, stats string) {
	ctx := context.Background()
	pool := testdb.New(t)
	store := NewStore(pool, GuardConfig{AllowPrivate: true})
	_, err := store.Create(ctx, NewEndpoint{URL: "http://127.0.0.1:9/hook", EventTypes: []string{AllTypes}})
	require.NoError(t, err)
	// fill places n messages in the feed, created an hour ago (before the
	// endpoint: it looks at them and passes them by), the endpoint's place
	// moved past them all.
	fill := func(n int) {
		_, err := pool.Exec(ctx, `
			WITH top AS (SELECT last_position FROM message_sequencer)
			INSERT INTO messages (id, type, aggregate_type, aggregate_id, sequence, created_at, position, body)
			SELECT 'msg_old_' || (top.last_position + i), 'payment.succeeded', 'payment', 'pi_old_' || (top.last_position + i), 1,
				now() - interval '1 hour', top.last_position + i, '\x7b7d'
			FROM top, generate_series(1, $1::int) i`, n)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE message_sequencer SET last_position = (SELECT max(position) FROM messages)`)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE endpoints SET handed_through = (SELECT last_position FROM message_sequencer)`)
		require.NoError(t, err)
	}
	switch stats {
	case "empty":
		_, err := pool.Exec(ctx, `ANALYZE messages, deliveries, endpoints`)
		require.NoError(t, err)
	case "small":
		fill(200)
		_, err := pool.Exec(ctx, `ANALYZE messages, deliveries, endpoints`)
		require.NoError(t, err)
	}

	// Kick as the relay runs it from the start, on a connection that
	// keeps its plans.
	relayPool := testdb.KeepingPlans(t, pool)
	for range 10 {
		require.NoError(t, Kick(ctx, relayPool, nil)) // nothing to send: no dispatcher queued
	}

	// The feed grows, and fresh messages come after the endpoint's place.
	const history, fresh = 20000, 20
	fill(history)
	placeFresh(t, pool, fresh)

	// The plan the relay's connection runs Kick's statement with now.
	plan := testdb.ExplainKept(t, relayPool, kickSQL, fmt.Sprint(kickLookahead))
	require.Equal(t, float64(1), plan.ActualRows, "the endpoint has messages to send:\n%s", plan.Raw)
	read := plan.RowsOf("messages")
	require.Less(t, read, float64(2*fresh),
		"messages read to find %d after the endpoint's place, %d before it:\n%s", fresh, history, plan.Raw)
}

// TestReleaseReadsThePendingOnly: letting go the messages held behind
// settled ones (the relay's sweep every ten seconds, and each record that
// held some) costs the pending deliveries, not the month of settled ones
// kept, on the statistics of an empty deliveries table, for a connection
// that made its plan then and keeps it. Planned on them, it hashed every
// delivery, twice.
func TestReleaseReadsThePendingOnly(t *testing.T) {
	ctx := context.Background()
	pool := testdb.New(t)
	store := NewStore(pool, GuardConfig{AllowPrivate: true})
	e, err := store.Create(ctx, NewEndpoint{URL: "http://127.0.0.1:9/hook", EventTypes: []string{AllTypes}})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE deliveries`)
	require.NoError(t, err)

	relayPool := testdb.KeepingPlans(t, pool)
	for range 10 {
		require.NoError(t, Release(ctx, relayPool, nil))
	}

	// A month of settled deliveries, and objects with two pending each:
	// the first due, the second held behind it.
	const history, objects = 20000, 10
	_, err = pool.Exec(ctx, `
		INSERT INTO deliveries (endpoint_id, message_id, message_created_at, type, aggregate, sequence, position,
			status, attempts, next_attempt_at)
		SELECT $1, 'msg_old_' || i, now(), 'payment.succeeded', 'payment/pi_old_' || i, 1, i, 'succeeded', 1, now()
		FROM generate_series(1, $2::int) i`, e.ID, history)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
		INSERT INTO deliveries (endpoint_id, message_id, message_created_at, type, aggregate, sequence, position,
			status, attempts, next_attempt_at)
		SELECT $1, 'msg_' || i || '_' || s, now(), 'payment.succeeded', 'payment/pi_' || i, s, $2::int + 2 * i + s, 'pending', 0,
			CASE WHEN s = 1 THEN now() + interval '1 hour' ELSE 'infinity' END
		FROM generate_series(1, $3::int) i, generate_series(1, 2) s`, e.ID, history, objects)
	require.NoError(t, err)
	// And objects whose first pending message is held, the one before it
	// settled: those go now.
	const freed = 5
	_, err = pool.Exec(ctx, `
		INSERT INTO deliveries (endpoint_id, message_id, message_created_at, type, aggregate, sequence, position,
			status, attempts, next_attempt_at)
		SELECT $1, 'msg_freed_' || i, now(), 'payment.succeeded', 'payment/pi_freed_' || i, 2, -i, 'pending', 0, 'infinity'
		FROM generate_series(1, $2::int) i`, e.ID, freed)
	require.NoError(t, err)
	require.NoError(t, Release(ctx, relayPool, nil))
	var due int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries
		WHERE message_id LIKE 'msg_freed_%' AND next_attempt_at <= now()`).Scan(&due))
	require.Equal(t, freed, due, "a held head goes")

	plan := testdb.ExplainKept(t, relayPool, releaseHeads, "NULL, NULL")
	read := plan.RowsOf("deliveries")
	require.Less(t, read, float64(4*(2*objects+freed)),
		"deliveries read to release the heads of %d objects among %d settled deliveries:\n%s", objects, history, plan.Raw)
	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM deliveries WHERE next_attempt_at = 'infinity'`).Scan(&held))
	require.Equal(t, objects, held, "each object's second message stays held behind its first")
}

// placeFresh writes n new messages, each the first of its payment, placed
// in the feed.
func placeFresh(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	var msgs []outbox.Message
	for i := range n {
		m, err := outbox.New(outbox.AggregatePayment, fmt.Sprintf("pi_%d", i), 1, "payment.succeeded", time.Now(),
			map[string]any{"payment": map[string]any{"id": fmt.Sprintf("pi_%d", i)}})
		require.NoError(t, err)
		msgs = append(msgs, m)
	}
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error { return outbox.WritePlacedTx(t.Context(), tx, msgs) }))
}
