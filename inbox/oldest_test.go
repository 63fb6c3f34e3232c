package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/testdb"
)

// TestOldestReceived: the age of the oldest event still received, zero
// when every event has moved on (applied, poison), whatever else the inbox
// holds.
func TestOldestReceived(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	empty, err := inbox.OldestReceived(ctx, testdb.New(t))
	require.NoError(t, err)
	require.Zero(t, empty)

	pool := stored(t, "evt_old", "evt_other")
	time.Sleep(50 * time.Millisecond)
	age, err := inbox.OldestReceived(ctx, pool)
	require.NoError(t, err)
	require.GreaterOrEqual(t, age, 50*time.Millisecond)
	require.Less(t, age, time.Minute)

	require.NoError(t, inbox.SetStatusTx(ctx, pool, "stripe", "evt_old", inbox.StatusProcessed, "", false))
	age, err = inbox.OldestReceived(ctx, pool)
	require.NoError(t, err)
	require.Positive(t, age, "evt_other still waits")
	require.NoError(t, inbox.SetStatusTx(ctx, pool, "stripe", "evt_other", inbox.StatusPoison, "bad", true))
	age, err = inbox.OldestReceived(ctx, pool)
	require.NoError(t, err)
	require.Zero(t, age, "a poison event is not waiting to be applied: it waits for ops")
}
