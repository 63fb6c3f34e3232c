package inbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/testdb"
)

// TestLookupsByKeyReadOnePartition: reading events by key (as applying
// locks each batch's events) reads each event in the one partition its key
// names, and nothing else, whichever plan PostgreSQL prefers. Joined as
// tables, the keys and the events were planned as the statistics went:
// events first (as on make bench's database), every key was probed in
// every partition, each month's, the months ahead and the DEFAULT one; and
// where the planner would rather read tables whole (as a plan made while
// they were small does, and keeps as they grow), every call read every
// partition: 41,154 rows of a partition of 5,000 events in eight calls.
// Counted by PostgreSQL (pg_stat_xact_user_tables: rows read by scans and
// fetched by probes), with events in two partitions.
func TestLookupsByKeyReadOnePartition(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	_, err := inbox.EnsurePartitions(ctx, pool, time.Now())
	require.NoError(t, err)
	body := strings.Repeat("x", 1200)
	for chunk := range 20 {
		events := make([]inbox.Event, 250)
		for i := range events {
			id := fmt.Sprintf("evt_%02d_%03d", chunk, i)
			events[i] = inbox.Event{Provider: "stripe", EventID: id, Type: "charge.succeeded", APIVersion: "2024-06-20",
				Payload: []byte(`{"id":"` + id + `","object":"event","padding":"` + body + `"}`)}
		}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := inbox.InsertManyTx(ctx, tx, events)
			return err
		}))
	}
	_, err = pool.Exec(ctx, `ANALYZE`)
	require.NoError(t, err)
	// One event of the batch arrived next month (as far as the inbox knows).
	now := time.Now().UTC()
	require.NoError(t, testdb.Backdate(ctx, pool, "evt_00_000", time.Date(now.Year(), now.Month()+1, 2, 0, 0, 0, 0, time.UTC)))

	ids, keys := make([]string, 130), make([]inbox.Key, 130)
	for i := range keys {
		ids[i] = fmt.Sprintf("evt_00_%03d", i)
		keys[i] = key(ids[i])
	}
	held := map[string]int64{}
	rows, err := pool.Query(ctx, `SELECT tableoid::regclass::text, count(*) FROM inbox_events
		WHERE provider = 'stripe' AND event_id = ANY($1) GROUP BY 1`, ids)
	require.NoError(t, err)
	var (
		partition string
		n         int64
	)
	_, err = pgx.ForEachRow(rows, []any{&partition, &n}, func() error { held[partition] = n; return nil })
	require.NoError(t, err)
	require.Len(t, held, 2, "the batch's events are in two partitions")

	const rounds = 4
	for _, planner := range []string{
		"SELECT 1",                        // as the server is set
		"SET LOCAL enable_nestloop = off", // a planner that would read tables whole
		"SET LOCAL plan_cache_mode = force_generic_plan", // the plan a connection keeps
	} {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, planner); err != nil {
				return err
			}
			for range rounds {
				locked, err := inbox.LockManyTx(ctx, tx, keys)
				require.NoError(t, err)
				require.Len(t, locked, len(keys))
				statuses, err := inbox.KeyStatuses(ctx, tx, keys)
				require.NoError(t, err)
				require.Len(t, statuses, len(keys))
			}
			rows, err := tx.Query(ctx, `
				SELECT s.relname, s.seq_tup_read + coalesce(s.idx_tup_fetch, 0)
				FROM pg_inherits i JOIN pg_stat_xact_user_tables s ON s.relid = i.inhrelid
				WHERE i.inhparent = 'inbox_events'::regclass`)
			require.NoError(t, err)
			var read int64
			_, err = pgx.ForEachRow(rows, []any{&partition, &read}, func() error {
				// Each call reads its events in their partitions (a few
				// times at most: a row locked is read again), never the
				// partition whole.
				require.LessOrEqual(t, read, 3*2*rounds*held[partition],
					"%s: partition %s, holding %d of the events, %d rows read", planner, partition, held[partition], read)
				return nil
			})
			return err
		}))
	}
}
