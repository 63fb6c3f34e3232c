package inbox_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/testdb"
)

// trueCounts counts the rows, the way Counts must agree with.
func trueCounts(t *testing.T, pool *pgxpool.Pool) map[inbox.Status]int64 {
	t.Helper()
	out := map[inbox.Status]int64{}
	for _, s := range inbox.Statuses {
		out[s] = 0
	}
	rows, err := pool.Query(t.Context(), `SELECT status, count(*) FROM inbox_events GROUP BY status`)
	require.NoError(t, err)
	for rows.Next() {
		var s inbox.Status
		var n int64
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func requireCountsTrue(t *testing.T, pool *pgxpool.Pool, step string) {
	t.Helper()
	got, err := inbox.Counts(t.Context(), pool)
	require.NoError(t, err)
	require.Equal(t, trueCounts(t, pool), got, "after %s", step)
}

// TestCountsFollowEveryChange: the kept counts equal a count of the rows
// after every way rows change (new events and duplicates, applying,
// poison, replay one and many, discard, a rolled-back transaction, and
// concurrent ingest from many connections), and reading them never
// touches inbox_events: the same cost at ten rows or ten million.
func TestCountsFollowEveryChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.NewAppRole(t)
	requireCountsTrue(t, pool, "nothing")

	insert := func(ids ...string) {
		events := make([]inbox.Event, len(ids))
		for i, id := range ids {
			events[i] = ev(id)
		}
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := inbox.InsertManyTx(ctx, tx, events)
			return err
		}))
	}
	insert("evt_1", "evt_2", "evt_3", "evt_4", "evt_1")
	requireCountsTrue(t, pool, "insert with a repeat")
	insert("evt_2", "evt_5")
	requireCountsTrue(t, pool, "a duplicate and a new one")

	require.NoError(t, inbox.SetStatusManyTx(ctx, pool, []inbox.StatusUpdate{
		{Key: key("evt_1"), Status: inbox.StatusProcessed},
		{Key: key("evt_2"), Status: inbox.StatusIgnored},
		{Key: key("evt_3"), Status: inbox.StatusPoison, LastError: "boom", Attempt: true},
		{Key: key("evt_4"), Status: inbox.StatusPoison},
		{Key: key("evt_4"), Status: inbox.StatusProcessed},
	}))
	requireCountsTrue(t, pool, "applying")

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := inbox.ReplayTx(ctx, tx, "stripe", "evt_3"); err != nil {
			return err
		}
		_, err := inbox.DiscardTx(ctx, tx, "stripe", "evt_5")
		return err
	}))
	requireCountsTrue(t, pool, "replay and discard")

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := inbox.ReplayMatchingTx(ctx, tx, inbox.Filter{Status: inbox.StatusDiscarded})
		return err
	}))
	requireCountsTrue(t, pool, "bulk replay")

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = inbox.InsertManyTx(ctx, tx, []inbox.Event{ev("evt_rolled_back")})
	require.NoError(t, err)
	require.NoError(t, inbox.SetStatusTx(ctx, tx, "stripe", "evt_1", inbox.StatusPoison, "x", true))
	require.NoError(t, tx.Rollback(ctx))
	requireCountsTrue(t, pool, "a rollback")

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				// Every goroutine sends the same events too: duplicates race.
				insert(fmt.Sprintf("evt_g%d_%d", g, i), fmt.Sprintf("evt_shared_%d", i))
				if i%3 == 0 {
					_ = inbox.SetStatusTx(ctx, pool, "stripe", fmt.Sprintf("evt_shared_%d", i), inbox.StatusProcessed, "", false)
				}
			}
		})
	}
	wg.Wait()
	requireCountsTrue(t, pool, "concurrent ingest and applying")

	var plan []string
	rows, err := pool.Query(ctx, `EXPLAIN SELECT status, sum(n)::bigint FROM inbox_status_counts GROUP BY status`)
	require.NoError(t, err)
	plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotContains(t, strings.Join(plan, "\n"), "inbox_events")
	requireCountsReadNoInboxRows(t, pool)
}

// requireCountsReadNoInboxRows: Counts, as it runs, reads not one block of
// inbox_events, its partitions or their indexes (the transaction's own
// block statistics, which count every block it touches, hit or read).
func requireCountsReadNoInboxRows(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		fetched := func() int64 {
			var n int64
			require.NoError(t, tx.QueryRow(ctx, `
				SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(oid)), 0)::bigint
				FROM pg_class WHERE relname LIKE 'inbox_events%'`).Scan(&n))
			return n
		}
		before := fetched()
		for range 5 {
			if _, err := inbox.Counts(ctx, tx); err != nil {
				return err
			}
		}
		require.Equal(t, before, fetched(), "Counts read inbox_events")
		return nil
	}))
}

// month is the first instant of a UTC month.
func month(year int, m time.Month) time.Time { return time.Date(year, m, 1, 0, 0, 0, 0, time.UTC) }

// storeAt writes events as the ingest statement would have on day at:
// their key and their row, in the partition of that month. (Only the
// tests date events: ingest takes the database's clock.)
func storeAt(t *testing.T, owner *pgxpool.Pool, at time.Time, status inbox.Status, ids ...string) {
	t.Helper()
	_, err := owner.Exec(t.Context(), `
		WITH keys AS (
			INSERT INTO inbox_event_keys (provider, event_id, received_at)
			SELECT 'stripe', id, $2 FROM unnest($1::text[]) AS id RETURNING *)
		INSERT INTO inbox_events (provider, event_id, type, payload, status, received_at)
		SELECT provider, event_id, 'charge.succeeded', '{}', $3, received_at FROM keys`, ids, at, status)
	require.NoError(t, err)
}

// TestPayloadRetention: partitions past the retention are dropped with
// their rows and their counts, by the app role; a partition still holding
// an event waiting for ops is kept and named; the dedupe keys outlive the
// payloads, so a provider retrying a dropped event gets a duplicate, not a
// second application; a partition inside the retention is never touched.
func TestPayloadRetention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	owner, url := testdb.NewWithURL(t)
	app := testdb.AppRole(t, url)

	// Months ahead, as the upkeep makes them, then events dated in them.
	created, err := inbox.EnsurePartitions(ctx, app, time.Now().AddDate(0, 12, 0))
	require.NoError(t, err)
	require.Len(t, created, inbox.PartitionsAhead)
	again, err := inbox.EnsurePartitions(ctx, app, time.Now().AddDate(0, 12, 0))
	require.NoError(t, err)
	require.Empty(t, again, "ensuring twice creates nothing")

	parts, err := inbox.Partitions(ctx, app)
	require.NoError(t, err)
	var months []inbox.Partition
	for _, p := range parts {
		if !p.From.IsZero() {
			months = append(months, p)
		}
	}
	require.GreaterOrEqual(t, len(months), 4)
	old, poisoned, recent := months[0], months[1], months[len(months)-1]
	storeAt(t, owner, old.From.Add(36*time.Hour), inbox.StatusProcessed, "evt_old_1", "evt_old_2", "evt_old_3")
	storeAt(t, owner, old.From.Add(48*time.Hour), inbox.StatusIgnored, "evt_old_4")
	storeAt(t, owner, poisoned.From.Add(time.Hour), inbox.StatusProcessed, "evt_mid_1")
	storeAt(t, owner, poisoned.From.Add(2*time.Hour), inbox.StatusPoison, "evt_mid_poison")
	storeAt(t, owner, recent.From.Add(time.Hour), inbox.StatusProcessed, "evt_recent")
	_, err = owner.Exec(ctx, `INSERT INTO inbox_attempts (provider, event_id, job_id, attempt, error)
		VALUES ('stripe', 'evt_old_1', 1, 1, 'timeout')`)
	require.NoError(t, err)
	requireCountsTrue(t, app, "dated events")

	// Keep from the start of the most recent month: every older month is
	// past the retention.
	expired, err := inbox.DropExpired(ctx, app, recent.From)
	require.ErrorIs(t, err, inbox.ErrPartitionOpen)
	byName := map[string]inbox.Expired{}
	for _, e := range expired {
		byName[e.Name] = e
	}
	require.Equal(t, int64(4), byName[old.Name].Dropped)
	require.Equal(t, int64(1), byName[poisoned.Name].Open, "the partition with a poison event is kept")
	require.Zero(t, byName[poisoned.Name].Dropped)
	require.NotContains(t, byName, recent.Name)
	requireCountsTrue(t, app, "dropping")

	after, err := inbox.Partitions(ctx, app)
	require.NoError(t, err)
	names := map[string]bool{}
	for _, p := range after {
		names[p.Name] = true
	}
	require.False(t, names[old.Name], "dropped")
	require.True(t, names[poisoned.Name], "kept")
	require.True(t, names[recent.Name], "inside the retention")

	_, err = inbox.Get(ctx, app, "stripe", "evt_old_1")
	require.ErrorIs(t, err, inbox.ErrNotFound, "the payload is gone")
	var attempts int
	require.NoError(t, app.QueryRow(ctx, `SELECT count(*) FROM inbox_attempts WHERE event_id = 'evt_old_1'`).Scan(&attempts))
	require.Equal(t, 1, attempts, "the attempt history stays")
	require.NoError(t, pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		news, err := inbox.InsertManyTx(ctx, tx, []inbox.Event{ev("evt_old_1"), ev("evt_mid_poison"), ev("evt_new")})
		require.Equal(t, []bool{false, false, true}, news, "a retried event past the retention is still a duplicate")
		return err
	}))

	// Once ops resolve the poison event, the next run drops its month.
	require.NoError(t, pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		_, err := inbox.DiscardTx(ctx, tx, "stripe", "evt_mid_poison")
		return err
	}))
	expired, err = inbox.DropExpired(ctx, app, recent.From)
	require.NoError(t, err)
	require.Len(t, expired, 1)
	require.Equal(t, int64(2), expired[0].Dropped)
	requireCountsTrue(t, app, "dropping the resolved month")

	// The keys are kept by construction, for the owner too.
	_, err = owner.Exec(ctx, `DELETE FROM inbox_event_keys WHERE event_id = 'evt_old_2'`)
	require.ErrorContains(t, err, "kept forever")
	_, err = app.Exec(ctx, `DELETE FROM inbox_event_keys WHERE event_id = 'evt_old_2'`)
	require.ErrorContains(t, err, "permission denied")

	// A partition holding events received after the cut is refused by the
	// database itself, whoever asks.
	_, err = app.Exec(ctx, `SELECT paygate_inbox_partition_drop($1, $2)`, recent.Name, recent.From)
	require.ErrorContains(t, err, "holds events received on or after")
	_, err = app.Exec(ctx, `SELECT paygate_inbox_partition_drop('inbox_events_default', now() + interval '100 years')`)
	require.ErrorContains(t, err, "default partition is never dropped")
	_, err = app.Exec(ctx, `SELECT paygate_inbox_partition_create(date_trunc('month', now())::date)`)
	require.ErrorContains(t, err, "has begun")
	_, err = app.Exec(ctx, `DROP TABLE `+recent.Name)
	require.ErrorContains(t, err, "must be owner")
}

// TestLookupsVisitOnePartition: reading, locking and updating an event by
// its key plans to visit only the partition its key names, however many
// months the inbox holds.
func TestLookupsVisitOnePartition(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	owner := testdb.New(t)
	_, err := inbox.EnsurePartitions(ctx, owner, time.Now().AddDate(0, 12, 0))
	require.NoError(t, err)
	parts, err := inbox.Partitions(ctx, owner)
	require.NoError(t, err)
	// Every partition holds rows, the first and the DEFAULT one too: the
	// planner reads an empty index's metapage whenever it plans, so an
	// empty partition would be read however well lookups prune.
	var (
		ids  []string
		last time.Time
	)
	for i, p := range parts {
		at := p.From
		switch {
		case p.Default:
			at = last.AddDate(0, 1, 0)
		case p.From.IsZero():
			at = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
		default:
			last = p.To
		}
		// Enough rows that the planner reaches each event through the
		// indexes, as it does at any real size.
		month := make([]string, 2000)
		for j := range month {
			month[j] = fmt.Sprintf("evt_month_%d_%d", i, j)
		}
		storeAt(t, owner, at.Add(time.Hour), inbox.StatusReceived, month...)
		ids = append(ids, month[0])
	}
	require.GreaterOrEqual(t, len(ids), 4)
	_, err = owner.Exec(ctx, `ANALYZE inbox_events, inbox_event_keys`)
	require.NoError(t, err)

	// touched runs op in a transaction and returns the partitions whose
	// blocks (heap or index) it fetched, from the transaction's own block
	// statistics. One connection runs them all, once unmeasured first:
	// the first plan of a statement in a backend reads each partition's
	// index metapage to fill its cache, as any planning does.
	conn, err := owner.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	touched := func(op func(tx pgx.Tx) error) []string {
		var names []string
		require.NoError(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			const fetched = `
				SELECT coalesce(x.indrelid, c.oid)::regclass::text AS part,
					sum(pg_stat_get_xact_blocks_fetched(c.oid)) AS n
				FROM pg_class c
				LEFT JOIN pg_index x ON x.indexrelid = c.oid
				WHERE coalesce(x.indrelid, c.oid) IN (
					SELECT inhrelid FROM pg_inherits WHERE inhparent = 'inbox_events'::regclass)
				GROUP BY 1`
			read := func() map[string]int64 {
				rows, err := tx.Query(ctx, fetched)
				require.NoError(t, err)
				out := map[string]int64{}
				for rows.Next() {
					var part string
					var n int64
					require.NoError(t, rows.Scan(&part, &n))
					out[part] = n
				}
				require.NoError(t, rows.Err())
				return out
			}
			before := read()
			if err := op(tx); err != nil {
				return err
			}
			for part, n := range read() {
				if n > before[part] {
					names = append(names, part)
				}
			}
			return nil
		}))
		return names
	}
	for i, id := range ids {
		for name, op := range map[string]func(tx pgx.Tx) error{
			"Get": func(tx pgx.Tx) error { _, err := inbox.Get(ctx, tx, "stripe", id); return err },
			"LockManyTx": func(tx pgx.Tx) error {
				_, err := inbox.LockManyTx(ctx, tx, []inbox.Key{key(id), key("evt_absent")})
				return err
			},
			"SetStatusManyTx": func(tx pgx.Tx) error {
				return inbox.SetStatusManyTx(ctx, tx, []inbox.StatusUpdate{{Key: key(id), Status: inbox.StatusPoison}})
			},
			"ReplayTx":  func(tx pgx.Tx) error { _, err := inbox.ReplayTx(ctx, tx, "stripe", id); return err },
			"DiscardTx": func(tx pgx.Tx) error { _, err := inbox.DiscardTx(ctx, tx, "stripe", id); return err },
		} {
			if parts := touched(op); i > 0 {
				require.Len(t, parts, 1, "%s of an event of month %d reads one partition", name, i)
			}
		}
	}
}
