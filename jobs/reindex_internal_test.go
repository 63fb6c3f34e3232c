package jobs

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
)

// TestMayReindexOnlyAsOwner: River's nightly REINDEX is left on for the
// tables' owner and turned off for the app role, which may not run it.
func TestMayReindexOnlyAsOwner(t *testing.T) {
	t.Parallel()
	owner, url := testdb.NewWithURL(t)
	require.True(t, mayReindex(owner))

	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET ROLE paygate_app`)
		return err
	}
	app, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer app.Close()
	require.False(t, mayReindex(app))
	_, err = app.Exec(t.Context(), `REINDEX INDEX CONCURRENTLY river_job_kind`)
	require.ErrorContains(t, err, "must be owner", "what River's reindexer would meet every night")
}
