package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/ledger"
)

// TestChecksProbeWhateverTheStatistics: the database's own checks of a
// posting (the entries' count per statement, and the count and balance at
// commit) look the transaction's entries up by its id, whatever statistics
// the session planned them on. A session keeps a trigger's plans: planned
// while ledger_entries was empty, or analyzed empty, they scanned every
// entry for each transaction posted, on every posting, as the ledger grew,
// until the next ANALYZE (for good on a server without autovacuum). The
// count is the database's own, for the posting's transaction.
func TestChecksProbeWhateverTheStatistics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(b.ctx, `ANALYZE ledger_transactions, ledger_entries`)
	require.NoError(t, err)

	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	batch := func(prefix string, n int) []ledger.Transaction {
		ts := make([]ledger.Transaction, n)
		for i := range ts {
			ref := fmt.Sprintf("%s:%d", prefix, i)
			ts[i] = ledger.NewCapture(ref, "pi_"+ref, "evt_"+ref, "usd", decimal.NewFromInt(int64(100+i)), at)
		}
		return ts
	}
	post := func(db interface {
		Begin(context.Context) (pgx.Tx, error)
	}, ts []ledger.Transaction) {
		require.NoError(t, pgx.BeginFunc(b.ctx, db, func(tx pgx.Tx) error {
			_, err := ledger.PostManyTx(b.ctx, tx, ts)
			return err
		}))
	}
	post(conn, batch("first", 10)) // the session plans its checks now
	for i := range 30 {
		post(b.pool, batch(fmt.Sprintf("fill%d", i), 100)) // other sessions: conn is held
	}

	const n = 20
	require.NoError(t, pgx.BeginFunc(b.ctx, conn, func(tx pgx.Tx) error {
		_, err := ledger.PostManyTx(b.ctx, tx, batch("measured", n))
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, `SET CONSTRAINTS ALL IMMEDIATE`) // the commit's checks, now
		require.NoError(t, err)
		var scanned int64
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT pg_stat_get_xact_tuples_returned('ledger_entries'::regclass)`).Scan(&scanned))
		require.Less(t, scanned, int64(10*n), "entries scanned to check %d postings in a ledger of 6,000 entries", n)
		return nil
	}))
}
