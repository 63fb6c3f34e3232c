package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/testdb"
)

func ev(id string) inbox.Event {
	return inbox.Event{Provider: "stripe", EventID: id, Type: "charge.succeeded", APIVersion: "2024-06-20",
		Payload: []byte(`{"id":"` + id + `"}`)}
}

// TestInsertManyTx: one statement stores the new events byte for byte,
// reports the ones the inbox already had as duplicates, and reports only the
// first of two copies in one call as new.
func TestInsertManyTx(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	created, err := inbox.InsertTx(ctx, tx, ev("evt_old"))
	require.NoError(t, err)
	require.True(t, created)
	require.NoError(t, tx.Commit(ctx))

	withTime := ev("evt_a")
	withTime.ProviderCreatedAt = &at
	withTime.Livemode = true
	events := []inbox.Event{withTime, ev("evt_old"), ev("evt_b"), ev("evt_a"), {Provider: "other", EventID: "evt_a", Type: "t", Payload: []byte("x")}}
	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	got, err := inbox.InsertManyTx(ctx, tx, events)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, []bool{true, false, true, false, true}, got)

	a, err := inbox.Get(ctx, pool, "stripe", "evt_a")
	require.NoError(t, err)
	require.Equal(t, withTime.Payload, a.Payload)
	require.True(t, a.Livemode)
	require.Equal(t, "2024-06-20", a.APIVersion)
	require.NotNil(t, a.ProviderCreatedAt)
	require.True(t, at.Equal(*a.ProviderCreatedAt))
	require.Equal(t, inbox.StatusReceived, a.Status)
	b, err := inbox.Get(ctx, pool, "stripe", "evt_b")
	require.NoError(t, err)
	require.Nil(t, b.ProviderCreatedAt)

	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox_events`).Scan(&n))
	require.Equal(t, 4, n)

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	got, err = inbox.InsertManyTx(ctx, tx, nil)
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, tx.Rollback(ctx))
}

// TestInsertManyTxOverlappingSetsDoNotDeadlock: transactions inserting the
// same ids in opposite orders at once all commit, and each id is new in
// exactly one of them.
func TestInsertManyTxOverlappingSetsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	const ids, txs = 50, 8
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fresh = map[string]int{}
		start = make(chan struct{})
	)
	for w := range txs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var events []inbox.Event
			for i := range ids {
				j := i
				if w%2 == 1 {
					j = ids - 1 - i
				}
				events = append(events, ev(fmt.Sprintf("evt_%02d", j)))
			}
			<-start
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer tx.Rollback(ctx)
			got, err := inbox.InsertManyTx(ctx, tx, events)
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(5 * time.Millisecond) // hold the locks while others queue
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for i, c := range got {
				if c {
					fresh[events[i].EventID]++
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Len(t, fresh, ids)
	for id, n := range fresh {
		require.Equal(t, 1, n, id)
	}
}
