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
	q := restingQueue(batchTime, &pressure, func(d time.Duration) {
		mu.Lock()
		rests = append(rests, d)
		mu.Unlock()
	})
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
	waitIdle(t, q)
	mu.Lock()
	var rested time.Duration
	for _, d := range rests {
		require.LessOrEqual(t, d, restSlice, "a rest is slept in slices")
		rested += d
	}
	require.GreaterOrEqual(t, rested, 3*5*batchTime, "12 events in batches of 4, after each a rest of five times the batch's time")
	rests = nil
	mu.Unlock()

	pressure.Store(false)
	for _, err := range q.submitAll(context.Background(), nil, keys("free", 12)) {
		require.NoError(t, err)
	}
	waitIdle(t, q)
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, rests, "no pressure, no rest")
}

// restingQueue is a queue of one applier whose batches take batchTime,
// under pressure while pressure holds, resting five times a batch's time
// through sleep.
func restingQueue(batchTime time.Duration, pressure *atomic.Bool, sleep func(time.Duration)) *applyQueue {
	return &applyQueue{
		maxAppliers: 1, maxEvents: 4, restFactor: 5,
		pressure: pressure.Load,
		apply: func(_ context.Context, _ *river.Client[pgx.Tx], keys []inbox.Key) []error {
			time.Sleep(batchTime)
			return make([]error, len(keys))
		},
		sleep: sleep,
	}
}

// waitIdle waits until q's appliers are gone: they rest after answering.
func waitIdle(t *testing.T, q *applyQueue) {
	t.Helper()
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.appliers == 0
	}, 5*time.Second, time.Millisecond)
}

// TestApplyQueueRestEndsWithThePressure: a rest ends once the pressure has
// been off for restCalm, not when its five batches' time is up, so that
// applying picks up the events held back as soon as a burst is over; a
// dip shorter than that, as inside a burst, does not end it.
func TestApplyQueueRestEndsWithThePressure(t *testing.T) {
	t.Parallel()
	const batchTime = 40 * time.Millisecond // a rest of 200 ms, twenty slices
	rest := func(t *testing.T, pressureAfter func(slice int) bool) time.Duration {
		var (
			pressure atomic.Bool
			mu       sync.Mutex
			rested   time.Duration
			slices   int
		)
		q := restingQueue(batchTime, &pressure, func(d time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			rested += d
			slices++
			pressure.Store(pressureAfter(slices))
		})
		pressure.Store(true)
		keys := []inbox.Key{{Provider: "stripe", EventID: "evt_rest"}}
		for _, err := range q.submitAll(context.Background(), nil, keys) {
			require.NoError(t, err)
		}
		waitIdle(t, q)
		mu.Lock()
		defer mu.Unlock()
		return rested
	}
	t.Run("the burst ends", func(t *testing.T) {
		got := rest(t, func(int) bool { return false }) // off from the first slice on
		require.Equal(t, restCalm, got, "the calm only, not the whole rest of %s", 5*batchTime)
	})
	t.Run("a dip inside the burst", func(t *testing.T) {
		got := rest(t, func(slice int) bool { return slice < 2 || slice > 4 }) // off for three slices
		require.GreaterOrEqual(t, got, 5*batchTime, "the whole rest")
	})
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
