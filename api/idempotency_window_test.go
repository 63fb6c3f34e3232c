package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
)

// ageKey moves a key's row back in time, as if it had been claimed and
// answered that long ago and the hourly purge had not run yet.
func ageKey(t *testing.T, b *opsBundle, key string, age time.Duration) {
	t.Helper()
	tag, err := b.pool.Exec(context.Background(), `
		UPDATE idempotency_keys SET
			created_at = now() - make_interval(secs => $2),
			claimed_at = now() - make_interval(secs => $2),
			completed_at = now() - make_interval(secs => $2)
		WHERE key = $1`, key, age.Seconds())
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// TestIdempotencyKeyPastItsWindowIsNew: a finished key older than 24 hours
// is not replayed, even before the purge removes it: the request runs again
// (and under another body too), and its answer becomes the key's.
func TestIdempotencyKeyPastItsWindowIsNew(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_idem", seedOpts{})

	first := b.do(t, http.MethodPost, replayPath, opsTok, "aged", `{"reason":"monday"}`)
	require.Equal(t, http.StatusAccepted, first.Code, first.Body.String())
	ageKey(t, b, "aged", 25*time.Hour)

	again := b.do(t, http.MethodPost, replayPath, opsTok, "aged", `{"reason":"monday"}`)
	require.Equal(t, http.StatusAccepted, again.Code, again.Body.String())
	require.Empty(t, again.Header().Get(api.HeaderIdempotentReplayed), "an expired key is not replayed")
	require.Equal(t, 3, b.jobCount(t, "evt_idem"), "the seed's job and one per run")
	require.Equal(t, 2, b.auditCount(t, "evt_idem"))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM idempotency_keys WHERE key = 'aged' AND created_at > now() - interval '1 minute'`),
		"the new claim replaced the expired row, and its window starts now")

	replay := b.do(t, http.MethodPost, replayPath, opsTok, "aged", `{"reason":"monday"}`)
	require.Equal(t, "true", replay.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, again.Body.String(), replay.Body.String(), "the fresh answer is the one stored")

	ageKey(t, b, "aged", 25*time.Hour)
	other := b.do(t, http.MethodPost, replayPath, opsTok, "aged", `{"reason":"tuesday"}`)
	require.Equal(t, http.StatusAccepted, other.Code, "another body under an expired key is a new request, not a reuse: %s", other.Body.String())
	require.Empty(t, other.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, 3, b.auditCount(t, "evt_idem"))
}

// TestIdempotencyKeyWithinItsWindowReplays: at 23 hours a key still
// answers as it did.
func TestIdempotencyKeyWithinItsWindowReplays(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_idem", seedOpts{})

	first := b.do(t, http.MethodPost, replayPath, opsTok, "young", `{"reason":"monday"}`)
	require.Equal(t, http.StatusAccepted, first.Code, first.Body.String())
	ageKey(t, b, "young", 23*time.Hour)

	rec := b.do(t, http.MethodPost, replayPath, opsTok, "young", `{"reason":"monday"}`)
	require.Equal(t, http.StatusAccepted, rec.Code)
	require.Equal(t, "true", rec.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, first.Body.String(), rec.Body.String())
	rec = b.do(t, http.MethodPost, replayPath, opsTok, "young", `{"reason":"tuesday"}`)
	requireIdempotencyProblem(t, rec, http.StatusUnprocessableEntity, "another body within the window")
	require.Equal(t, 2, b.jobCount(t, "evt_idem"))
	require.Equal(t, 1, b.auditCount(t, "evt_idem"))
}

// TestIdempotencyExpiredKeyRaceHasOneWinner: requests racing for one
// expired key are decided by the database: one replaces the row and runs
// (held mid-transaction here by a lock on the event), every other is told
// the key is in use; none replays the expired answer.
func TestIdempotencyExpiredKeyRaceHasOneWinner(t *testing.T) {
	t.Parallel()
	for round := range 3 {
		b := setupOps(t)
		b.seed(t, "evt_idem", seedOpts{})
		rec := b.do(t, http.MethodPost, replayPath, opsTok, "stale", "")
		require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
		ageKey(t, b, "stale", 25*time.Hour)
		release := holdEvent(t, b, "evt_idem")

		const n = 10
		answers := make(chan *httptest.ResponseRecorder, n)
		start := make(chan struct{})
		for range n {
			go func() {
				<-start
				answers <- b.do(t, http.MethodPost, replayPath, opsTok, "stale", "")
			}()
		}
		close(start)
		// While the winner is held, every other request has its answer;
		// a second winner would be held too and never answer.
		for i := range n - 1 {
			select {
			case rec := <-answers:
				require.Equal(t, http.StatusConflict, rec.Code, "round %d, answer %d: %s", round, i, rec.Body.String())
				requireIdempotencyProblem(t, rec, http.StatusConflict)
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: only %d of %d requests answered while one runs: two are running", round, i, n-1)
			}
		}
		release()
		winner := <-answers
		require.Equal(t, http.StatusAccepted, winner.Code, "round %d: %s", round, winner.Body.String())
		require.Empty(t, winner.Header().Get(api.HeaderIdempotentReplayed))
		require.Equal(t, 3, b.jobCount(t, "evt_idem"), "round %d: the seed's, the first run's and exactly one more", round)
		require.Equal(t, 2, b.auditCount(t, "evt_idem"), "round %d", round)
	}
}
