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
