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
// locks each batch's events) looks each event up in the one partition its
// key names, under the plan made for the keys given and the one a
// connection keeps for any keys. Joined as tables, the keys and the events
// were planned either way round as the statistics went; events first (as
// on make bench's database), every key was probed in every partition: each
// month's, the months ahead and the DEFAULT one, as many lookups an event
// as partitions kept. Counted by PostgreSQL (pg_stat_xact_user_tables),
// with events in two partitions.
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

	keys := make([]inbox.Key, 130)
	for i := range keys {
		keys[i] = key(fmt.Sprintf("evt_00_%03d", i))
	}
	held := map[string]int64{}
	rows, err := pool.Query(ctx, `SELECT tableoid::regclass::text, count(*) FROM inbox_events
		WHERE provider = 'stripe' AND event_id LIKE 'evt\_00\_%' AND event_id < 'evt_00_130' GROUP BY 1`)
	require.NoError(t, err)
	var (
		partition string
		n         int64
	)
	_, err = pgx.ForEachRow(rows, []any{&partition, &n}, func() error { held[partition] = n; return nil })
	require.NoError(t, err)
	require.Len(t, held, 2, "the batch's events are in two partitions")

	const rounds = 4
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			if _, err := tx.Exec(ctx, `SELECT set_config('plan_cache_mode', $1, true)`, mode); err != nil {
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
		}
		rows, err := tx.Query(ctx, `
			SELECT s.relname, s.seq_scan + coalesce(s.idx_scan, 0)
			FROM pg_inherits i JOIN pg_stat_xact_user_tables s ON s.relid = i.inhrelid
			WHERE i.inhparent = 'inbox_events'::regclass`)
		require.NoError(t, err)
		read := map[string]int64{}
		var scans int64
		if _, err := pgx.ForEachRow(rows, []any{&partition, &scans}, func() error { read[partition] = scans; return nil }); err != nil {
			return err
		}
		for partition, scans := range read {
			// Each call reads each event once, in its partition (and may
			// open a partition once, to no purpose, as its plan starts).
			calls := int64(2 * 2 * rounds)
			require.LessOrEqual(t, scans, calls*(held[partition]+1),
				"partition %s, holding %d of the events, read %d times", partition, held[partition], scans)
		}
		return nil
	}))
}
