package testdb_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/migrations"
)

func TestNewIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := testdb.New(t)
	b := testdb.New(t)

	ok, err := migrations.Applied(ctx, a)
	require.NoError(t, err)
	require.True(t, ok)

	_, err = a.Exec(ctx, `INSERT INTO inbox_events (provider, event_id, type, payload) VALUES ('stripe', 'evt_1', 't', '{}')`)
	require.NoError(t, err)
	var n int
	require.NoError(t, b.QueryRow(ctx, `SELECT count(*) FROM inbox_events`).Scan(&n))
	require.Zero(t, n, "a clone must not see another test's rows")
}

func TestMigrateTwiceIsSafe(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	require.NoError(t, migrations.Migrate(context.Background(), pool, nil))
	require.NoError(t, migrations.Migrate(context.Background(), pool, nil))
}
