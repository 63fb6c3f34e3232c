package jobs

import (
	"context"
	mrand "math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
)

// TestBatchStatementsDoNotGrowWithRefunds: a batch runs the same statements
// however many refunds it reports. Refunds made at the provider name no
// request of paygate's, and most refunds are; looking for their requests
// one statement each made every refund a round trip inside the batch's
// transaction, under its locks.
func TestBatchStatementsDoNotGrowWithRefunds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, url := testdb.NewWithURL(t)
	counter := &testdb.StatementCounter{}
	pool := testdb.TracedPool(t, url, counter)
	client, err := NewClient(pool, Config{InsertOnly: true})
	require.NoError(t, err)
	w := &applyWorld{pool: pool, rc: client.River, applier: newApplier(pool, "ops@example.test", nil, nil)}

	// Every payment refunded in full: its six events report the refund
	// three times.
	events := stripesim.New(stripesim.Config{Seed: 11}).PayMix(mrand.New(mrand.NewPCG(11, 11)), 14, 1)
	require.Len(t, events, 84)
	keys := w.store(t, events)

	statements := func(batch int, from, to int) int64 {
		before := counter.Statements()
		for i, err := range w.applier.apply(ctx, w.rc, keys[from:to]) {
			require.NoError(t, err, "batch %d, event %d", batch, from+i)
		}
		return counter.Statements() - before
	}
	// Not the first batch: River asks the server's version before its first
	// insert, and tells of new jobs at most once in a while.
	statements(1, 0, 12)
	small := statements(2, 12, 36) // four payments
	large := statements(3, 36, 84)
	require.Equal(t, small, large, "statements of a batch of 4 refunded payments, and of 8")

	var refunded, processed int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE amount_refunded = amount_captured AND amount_captured > 0),
		(SELECT count(*) FROM inbox_events WHERE status = 'processed') FROM payments`).Scan(&refunded, &processed))
	require.Equal(t, 14, refunded)
	require.Equal(t, 84, processed)
}
