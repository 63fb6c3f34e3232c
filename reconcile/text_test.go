package reconcile_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/reconcile"
)

// TestRunTextReadsItemsPageByPage: the summary written from the database a
// page at a time is the one written from the items in memory, and lists
// every item not matched.
func TestRunTextReadsItemsPageByPage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for i := range 3 {
		b.sim.Pay(stripesim.PayOpts{Amount: int64(1000 + i)})
	}
	b.sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Type: stripesim.TxnCharge, Source: "ch_ghost", Amount: 900})
	b.deliver(t)
	run, items := b.run(t, day)

	var fromItems, fromDB bytes.Buffer
	require.NoError(t, reconcile.WriteText(&fromItems, run, items))
	require.NoError(t, reconcile.WriteRunText(context.Background(), b.world.Pool, &fromDB, run))
	require.Equal(t, fromItems.String(), fromDB.String())
	out := fromDB.String()
	require.Contains(t, out, "Items not matched")
	require.Equal(t, 3, strings.Count(out, "\n  fee_posted  "), out)
	require.Contains(t, out, "\n  missing_in_ledger  ", out)
	require.True(t, strings.HasSuffix(out, "/items.csv)\n"), out)
}
