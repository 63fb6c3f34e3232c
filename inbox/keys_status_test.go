package inbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
)

// TestKeyStatuses: the stored events' statuses come back by key in one
// call; absent keys are left out and a repeated key is answered once.
func TestKeyStatuses(t *testing.T) {
	t.Parallel()
	pool := stored(t, "evt_a", "evt_b", "evt_c")
	ctx := context.Background()
	require.NoError(t, inbox.SetStatusTx(ctx, pool, "stripe", "evt_b", inbox.StatusProcessed, "", false))
	require.NoError(t, inbox.SetStatusTx(ctx, pool, "stripe", "evt_c", inbox.StatusPoison, "bad", true))

	got, err := inbox.KeyStatuses(ctx, pool, []inbox.Key{
		key("evt_a"), key("evt_b"), key("evt_c"), key("evt_a"), key("evt_missing"),
		{Provider: "adyen", EventID: "evt_a"},
	})
	require.NoError(t, err)
	require.Equal(t, map[inbox.Key]inbox.Status{
		key("evt_a"): inbox.StatusReceived,
		key("evt_b"): inbox.StatusProcessed,
		key("evt_c"): inbox.StatusPoison,
	}, got)

	none, err := inbox.KeyStatuses(ctx, pool, nil)
	require.NoError(t, err)
	require.NotNil(t, none)
	require.Empty(t, none)
}
