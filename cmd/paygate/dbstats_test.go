package main

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
)

// TestStatementCounter: a statement is a statement and a round trip; a
// batch is one round trip of its statements; a transaction's BEGIN and
// COMMIT count, as pgbench counts them.
func TestStatementCounter(t *testing.T) {
	t.Parallel()
	_, url := testdb.NewWithURL(t)
	counter := &statementCounter{}
	pool, err := openPool(t.Context(), config{DatabaseURL: url}, 2, counter)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	_, err = pool.Exec(t.Context(), `SELECT 1`)
	require.NoError(t, err)
	b := &pgx.Batch{}
	b.Queue(`SELECT 1`)
	b.Queue(`SELECT 2`)
	b.Queue(`SELECT 3`)
	require.NoError(t, pool.SendBatch(t.Context(), b).Close())
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(t.Context(), `SELECT 4`)
		return err
	}))

	reg := prometheus.NewRegistry()
	reg.MustRegister(counter)
	families, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, families, 2)
	require.Equal(t, uint64(1+3+3), counter.statements.Load(), "SELECT 1, the batch's three, BEGIN, SELECT 4, COMMIT")
	require.Equal(t, uint64(1+1+3), counter.roundTrips.Load())
}
