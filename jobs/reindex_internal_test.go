package jobs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
)

// TestMayReindexOnlyAsOwner: River's nightly REINDEX is left on for the
// tables' owner and turned off for the app role, which may not run it.
func TestMayReindexOnlyAsOwner(t *testing.T) {
	t.Parallel()
	owner, url := testdb.NewWithURL(t)
	require.True(t, mayReindex(owner))

	app := testdb.AppRole(t, url)
	require.False(t, mayReindex(app))
	_, err := app.Exec(t.Context(), `REINDEX INDEX CONCURRENTLY river_job_kind`)
	require.ErrorContains(t, err, "must be owner", "what River's reindexer would meet every night")
}

// TestRiverJobIndexes: river_job keeps no GIN index (migration
// 0015_river_job_gin_indexes.sql: their pending-list merges stalled ingest
// batches), and every index River's reindexer is given exists, so that it
// never warns of a missing one every night.
func TestRiverJobIndexes(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	rows, err := pool.Query(t.Context(), `
		SELECT i.relname, am.amname
		FROM pg_index x
		JOIN pg_class i ON i.oid = x.indexrelid
		JOIN pg_am am ON am.oid = i.relam
		WHERE x.indrelid = 'river_job'::regclass`)
	require.NoError(t, err)
	methods := map[string]string{}
	for rows.Next() {
		var name, method string
		require.NoError(t, rows.Scan(&name, &method))
		methods[name] = method
	}
	require.NoError(t, rows.Err())
	for name, method := range methods {
		require.NotEqual(t, "gin", method, "river_job index %s", name)
	}
	for _, name := range reindexedIndexes() {
		require.Contains(t, methods, name, "an index River's reindexer is given")
	}
	require.Contains(t, methods, "river_job_prioritized_fetching_index", "River's fetch index stays")
}
