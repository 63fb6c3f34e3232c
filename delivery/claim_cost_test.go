package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	var msgs []outbox.Message
	for i := range fresh {
		m, err := outbox.New(outbox.AggregatePayment, fmt.Sprintf("pi_%d", i), 1, "payment.succeeded", time.Now(),
			map[string]any{"payment": map[string]any{"id": fmt.Sprintf("pi_%d", i)}})
		require.NoError(t, err)
		msgs = append(msgs, m)
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.WritePlacedTx(ctx, tx, msgs) }))

	var plan []struct {
		Plan planNode `json:"Plan"`
	}
	var raw []byte
	claim(func(tx pgx.Tx) {
		require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim($1, 128, 32)`, pgx.QueryExecModeSimpleProtocol, e.ID).Scan(&raw))
	})
	require.NoError(t, json.Unmarshal(raw, &plan))
	require.Len(t, plan, 1)
	claimed, read := plan[0].Plan.ActualRows, plan[0].Plan.rowsOf("deliveries")
	require.Equal(t, float64(fresh), claimed)
	require.Less(t, read, float64(2*fresh),
		"deliveries rows read to claim %d messages, with %d delivered before:\n%s", fresh, history, raw)
}

// planNode is a node of EXPLAIN's JSON plan, with what it read.
type planNode struct {
	Relation    string  `json:"Relation Name"`
	ActualRows  float64 `json:"Actual Rows"`
	ActualLoops float64 `json:"Actual Loops"`
	// Per loop, as Actual Rows.
	RemovedByFilter float64    `json:"Rows Removed by Filter"`
	Plans           []planNode `json:"Plans"`
}

// rowsOf is the rows the plan's scans of relation read, over all their
// loops: those they returned and those their filters removed.
func (n planNode) rowsOf(relation string) float64 {
	rows := 0.0
	if n.Relation == relation {
		rows += (n.ActualRows + n.RemovedByFilter) * n.ActualLoops
	}
	for _, c := range n.Plans {
		rows += c.rowsOf(relation)
	}
	return rows
}
