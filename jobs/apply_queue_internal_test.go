package jobs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
)

// TestApplyQueueRestsUnderPressure: while ingest is under pressure, an
// applier rests after each batch for restFactor times what the batch took,
// and goes on applying (the pressure never lets up here, and every event is
// still applied); once the pressure is off it does not rest at all.
func TestApplyQueueRestsUnderPressure(t *testing.T) {
	t.Parallel()
	const batchTime = 3 * time.Millisecond
	var (
		pressure atomic.Bool
		mu       sync.Mutex
		rests    []time.Duration
	)
	q := &applyQueue{
		maxAppliers: 1, maxEvents: 4, restFactor: 5,
		pressure: pressure.Load,
		apply: func(_ context.Context, _ *river.Client[pgx.Tx], keys []inbox.Key) []error {
			time.Sleep(batchTime)
			return make([]error, len(keys))
		},
		sleep: func(d time.Duration) {
			mu.Lock()
			rests = append(rests, d)
			mu.Unlock()
		},
	}
	keys := func(prefix string, n int) []inbox.Key {
		out := make([]inbox.Key, n)
		for i := range out {
			out[i] = inbox.Key{Provider: "stripe", EventID: fmt.Sprintf("%s_%d", prefix, i)}
		}
		return out
	}

	pressure.Store(true)
	for _, err := range q.submitAll(context.Background(), nil, keys("pressed", 12)) {
		require.NoError(t, err)
	}
	// The applier rests after it has answered its batch's callers: the
	// last rest may begin after submitAll returns.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(rests) >= 3
	}, 10*time.Second, time.Millisecond)
	mu.Lock()
	require.Len(t, rests, 3, "12 events in batches of 4, a rest after each")
	for _, d := range rests {
		require.GreaterOrEqual(t, d, 5*batchTime, "five times the batch's time")
	}
	rests = nil
	mu.Unlock()

	pressure.Store(false)
	for _, err := range q.submitAll(context.Background(), nil, keys("free", 12)) {
		require.NoError(t, err)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, rests, "no pressure, no rest")
}

// TestApplyQueueSubmitAllKeepsOrder: the keys of one submitAll are applied
// in their order and each caller's outcome is its own key's.
func TestApplyQueueSubmitAllKeepsOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var applied []string
	q := &applyQueue{maxAppliers: 2, maxEvents: 3, apply: func(_ context.Context, _ *river.Client[pgx.Tx], keys []inbox.Key) []error {
		out := make([]error, len(keys))
		mu.Lock()
		defer mu.Unlock()
		for i, k := range keys {
			applied = append(applied, k.EventID)
			out[i] = fmt.Errorf("outcome of %s", k.EventID)
		}
		return out
	}}
	ks := []inbox.Key{{Provider: "stripe", EventID: "a"}, {Provider: "stripe", EventID: "b"}, {Provider: "stripe", EventID: "c"}}
	outcomes := q.submitAll(context.Background(), nil, ks)
	for i, k := range ks {
		require.EqualError(t, outcomes[i], "outcome of "+k.EventID)
	}
	require.Equal(t, []string{"a", "b", "c"}, applied, "one batch, in order")
}
