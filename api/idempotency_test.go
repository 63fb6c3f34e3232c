package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/jobs"
)

const replayPath = "/v1/ops/events/stripe/evt_idem/replay"

func requireIdempotencyProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, status, rec.Code, append(msgAndArgs, rec.Body.String())...)
	require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType), msgAndArgs...)
	var p api.Problem
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	require.Equal(t, status, p.Status)
	require.Equal(t, "https://github.com/paygate/paygate/blob/main/docs/api.md#idempotency", p.Type)
	require.NotEmpty(t, p.Title)
	require.NotEmpty(t, p.Detail)
	require.Empty(t, rec.Header().Get(api.HeaderIdempotentReplayed))
}

// TestIdempotencyConcurrentRequestsHaveOneEffect: ten copies of one request
// racing with one key make one job and one audit entry; every other copy is
// told the key is busy (409) or gets the first answer replayed byte for byte.
func TestIdempotencyConcurrentRequestsHaveOneEffect(t *testing.T) {
	t.Parallel()
	for round := range 3 {
		b := setupOps(t)
		b.seed(t, "evt_idem", seedOpts{lastError: "boom"})

		const n = 10
		recs := make([]*httptest.ResponseRecorder, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				recs[i] = b.do(t, http.MethodPost, replayPath, opsTok, "race-key", `{"reason":"race"}`)
			}()
		}
		close(start)
		wg.Wait()

		var first *httptest.ResponseRecorder
		var replays, busy int
		for _, rec := range recs {
			switch {
			case rec.Code == http.StatusAccepted && rec.Header().Get(api.HeaderIdempotentReplayed) == "":
				require.Nil(t, first, "round %d: two requests did the work", round)
				first = rec
			case rec.Code == http.StatusAccepted:
				replays++
			case rec.Code == http.StatusConflict:
				requireIdempotencyProblem(t, rec, http.StatusConflict)
				busy++
			default:
				t.Fatalf("round %d: unexpected answer %d: %s", round, rec.Code, rec.Body.String())
			}
		}
		require.NotNil(t, first, "round %d: one request did the work", round)
		for _, rec := range recs {
			if rec.Header().Get(api.HeaderIdempotentReplayed) == "true" {
				require.Equal(t, first.Body.String(), rec.Body.String(), "a replay is the stored body")
				require.Equal(t, first.Header().Get(echo.HeaderContentType), rec.Header().Get(echo.HeaderContentType))
			}
		}
		require.Equal(t, n-1, replays+busy)
		require.Equal(t, 2, b.jobCount(t, "evt_idem"), "round %d: the seed's job and exactly one replay job", round)
		require.Equal(t, 1, b.auditCount(t, "evt_idem"), "round %d: one audit entry", round)
		t.Logf("round %d: 1 effect, %d replays, %d busy", round, replays, busy)

		// Once finished, every later copy is a replay.
		rec := b.do(t, http.MethodPost, replayPath, opsTok, "race-key", `{"reason":"race"}`)
		require.Equal(t, http.StatusAccepted, rec.Code)
		require.Equal(t, "true", rec.Header().Get(api.HeaderIdempotentReplayed))
		require.Equal(t, first.Body.String(), rec.Body.String())
	}
}

func TestIdempotencyKeyErrors(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_idem", seedOpts{})
	b.seed(t, "evt_other", seedOpts{})

	rec := b.do(t, http.MethodPost, replayPath, opsTok, "", "")
	requireIdempotencyProblem(t, rec, http.StatusBadRequest, "missing key")

	for name, key := range map[string]string{
		"too long":         strings.Repeat("k", 256),
		"quoted too long":  `"` + strings.Repeat("k", 256) + `"`,
		"empty quoted":     `""`,
		"unclosed quote":   `"abc`,
		"text after quote": `"abc"def`,
		"bad escape":       `"a\bc"`,
		"space in bare":    "a b",
		"non-ASCII":        "clé-1",
		"control":          "a\x01b",
		"list":             "a, b",
		"params":           "abc;x=1",
	} {
		rec := b.do(t, http.MethodPost, replayPath, opsTok, key, "")
		requireIdempotencyProblem(t, rec, http.StatusBadRequest, name)
	}
	req := httptest.NewRequest(http.MethodPost, replayPath, nil)
	req.Header.Set(echo.HeaderAuthorization, "Bearer "+opsTok)
	req.Header.Add(api.HeaderIdempotencyKey, "one")
	req.Header.Add(api.HeaderIdempotencyKey, "two")
	rec = httptest.NewRecorder()
	b.echo.ServeHTTP(rec, req)
	requireIdempotencyProblem(t, rec, http.StatusBadRequest, "two keys")
	require.Equal(t, 1, b.jobCount(t, "evt_idem"), "no refused request had an effect")
	require.Zero(t, b.count(t, `SELECT count(*) FROM idempotency_keys`))

	// 255 characters is the limit; the quoted and bare forms of one key are
	// the same key.
	long := strings.Repeat("k", 255)
	rec = b.do(t, http.MethodPost, replayPath, opsTok, long, "")
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	rec = b.do(t, http.MethodPost, replayPath, opsTok, `"`+long+`"`, "")
	require.Equal(t, http.StatusAccepted, rec.Code)
	require.Equal(t, "true", rec.Header().Get(api.HeaderIdempotentReplayed), "the quoted form names the same key")

	const uuid = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	rec = b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, `"`+uuid+`"`, `{"status":"poison","type":"charge.succeeded","dry_run":true}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	firstBody := rec.Body.String()
	rec = b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, uuid, "{\n  \"dry_run\": true,\n  \"type\": \"charge.succeeded\",  \"status\":\"poison\"\n}")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "true", rec.Header().Get(api.HeaderIdempotentReplayed), "the same JSON document, spaced and ordered differently")
	require.Equal(t, firstBody, rec.Body.String())
	require.Equal(t, echo.MIMEApplicationJSON, rec.Header().Get(echo.HeaderContentType))

	rec = b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, uuid, `{"status":"poison","type":"refund.updated","dry_run":true}`)
	requireIdempotencyProblem(t, rec, http.StatusUnprocessableEntity, "another body")
	rec = b.do(t, http.MethodPost, replayPath, opsTok, uuid, `{"status":"poison","type":"charge.succeeded","dry_run":true}`)
	requireIdempotencyProblem(t, rec, http.StatusUnprocessableEntity, "the same key and body on another route")
	rec = b.do(t, http.MethodPost, replayPath, opsTok, long, `{"reason":"x"}`)
	requireIdempotencyProblem(t, rec, http.StatusUnprocessableEntity, "the same route with another body")
	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_other/replay", opsTok, long, "")
	requireIdempotencyProblem(t, rec, http.StatusUnprocessableEntity, "the same key and body on another event")
	require.Equal(t, 1, b.jobCount(t, "evt_other"))

	// Keys belong to the caller: another token's identical key is its own.
	rec = b.do(t, http.MethodPost, replayPath, otherOpsTok, long, "")
	require.Equal(t, http.StatusAccepted, rec.Code)
	require.Empty(t, rec.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, 3, b.jobCount(t, "evt_idem"), "seed + 255-char key + the other caller's")

	// GETs need no key and ignore one.
	rec = b.do(t, http.MethodGet, "/v1/ops/poison", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
}

// TestIdempotencyStoredAnswersIncludeClientErrors: a 4xx the handler
// answers (not a failure) is stored and replayed like any answer; a handler
// error releases the key.
func TestIdempotencyStoredAnswersIncludeClientErrors(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_done", seedOpts{status: inbox.StatusProcessed})
	path := "/v1/ops/events/stripe/evt_done/discard"
	rec := b.do(t, http.MethodPost, path, opsTok, "k409", `{"reason":"r"}`)
	require.Equal(t, http.StatusConflict, rec.Code)
	rec2 := b.do(t, http.MethodPost, path, opsTok, "k409", `{"reason":"r"}`)
	require.Equal(t, http.StatusConflict, rec2.Code)
	require.Equal(t, "true", rec2.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, "application/problem+json", rec2.Header().Get(echo.HeaderContentType))
	require.Equal(t, rec.Body.String(), rec2.Body.String())

	// 404 is an error: the key is released, and a retry once the event
	// exists does the work.
	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_late/replay", opsTok, "k-late", "")
	require.Equal(t, http.StatusNotFound, rec.Code)
	b.seed(t, "evt_late", seedOpts{})
	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_late/replay", opsTok, "k-late", "")
	require.Equal(t, http.StatusAccepted, rec.Code)
	require.Empty(t, rec.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, 2, b.jobCount(t, "evt_late"))
}

// holdEvent locks an event's inbox row until the returned func is called,
// so that a replay of it blocks mid-transaction with its key claimed.
func holdEvent(t *testing.T, b *opsBundle, id string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = inbox.LockTx(ctx, tx, "stripe", id)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { require.NoError(t, tx.Rollback(ctx)) }) }
	t.Cleanup(release)
	return release
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(5 * time.Millisecond)
	}
}

func TestIdempotencyKeyStillRunningIs409(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_idem", seedOpts{})
	release := holdEvent(t, b, "evt_idem")

	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- b.do(t, http.MethodPost, replayPath, opsTok, "slow", "") }()
	waitFor(t, "the claim", func() bool { return b.count(t, `SELECT count(*) FROM idempotency_keys WHERE key = 'slow'`) == 1 })

	rec := b.do(t, http.MethodPost, replayPath, opsTok, "slow", "")
	requireIdempotencyProblem(t, rec, http.StatusConflict, "same key while the first is running")
	rec = b.do(t, http.MethodPost, replayPath, opsTok, "slow", `{"reason":"other"}`)
	requireIdempotencyProblem(t, rec, http.StatusUnprocessableEntity, "another body under a running key")

	release()
	first := <-done
	require.Equal(t, http.StatusAccepted, first.Code, first.Body.String())
	rec = b.do(t, http.MethodPost, replayPath, opsTok, "slow", "")
	require.Equal(t, http.StatusAccepted, rec.Code)
	require.Equal(t, "true", rec.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, first.Body.String(), rec.Body.String())
	require.Equal(t, 2, b.jobCount(t, "evt_idem"))
}

// TestIdempotencyAbandonedClaimIsTakenOver: a claim whose holder went
// silent past the lease (a crash) is taken over by the next request; if the
// first holder was only slow, its effects roll back, so there is still one
// effect.
func TestIdempotencyAbandonedClaimIsTakenOver(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_idem", seedOpts{})
	release := holdEvent(t, b, "evt_idem")

	slow := make(chan *httptest.ResponseRecorder)
	go func() { slow <- b.do(t, http.MethodPost, replayPath, opsTok, "crashy", "") }()
	waitFor(t, "the claim", func() bool { return b.count(t, `SELECT count(*) FROM idempotency_keys WHERE key = 'crashy'`) == 1 })
	_, err := b.pool.Exec(context.Background(), `UPDATE idempotency_keys SET claimed_at = now() - interval '2 minutes' WHERE key = 'crashy'`)
	require.NoError(t, err)

	taker := make(chan *httptest.ResponseRecorder)
	go func() { taker <- b.do(t, http.MethodPost, replayPath, opsTok, "crashy", "") }()
	waitFor(t, "the takeover", func() bool {
		return b.count(t, `SELECT count(*) FROM idempotency_keys WHERE key = 'crashy' AND claimed_at > now() - interval '1 minute'`) == 1
	})
	release()
	a, c := <-slow, <-taker
	codes := []int{a.Code, c.Code}
	require.ElementsMatch(t, []int{http.StatusAccepted, http.StatusConflict}, codes, "%s / %s", a.Body.String(), c.Body.String())
	require.Equal(t, http.StatusAccepted, c.Code, "the request holding the claim at the end did the work")
	require.Equal(t, 2, b.jobCount(t, "evt_idem"), "one effect")
	require.Equal(t, 1, b.auditCount(t, "evt_idem"))

	rec := b.do(t, http.MethodPost, replayPath, opsTok, "crashy", "")
	require.Equal(t, "true", rec.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, c.Body.String(), rec.Body.String())
}

// TestIdempotencyKeysArePurgedAfter24Hours runs the purge job's worker: a
// key older than a day is gone (and the same key with another body is a new
// request), a younger one stays, and a clock a day ahead purges everything.
func TestIdempotencyKeysArePurgedAfter24Hours(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_idem", seedOpts{})
	ctx := context.Background()
	rec := b.do(t, http.MethodPost, replayPath, opsTok, "daily", `{"reason":"monday"}`)
	require.Equal(t, http.StatusAccepted, rec.Code)
	rec = b.do(t, http.MethodPost, replayPath, opsTok, "daily", `{"reason":"tuesday"}`)
	require.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	rec = b.do(t, http.MethodPost, replayPath, opsTok, "recent", ``)
	require.Equal(t, http.StatusAccepted, rec.Code)
	_, err := b.pool.Exec(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '24 hours 1 minute' WHERE key = 'daily'`)
	require.NoError(t, err)

	workPurge(t, b, &jobs.IdempotencyPurgeWorker{Pool: b.pool})
	require.Equal(t, []string{"recent"}, b.keys(t))

	rec = b.do(t, http.MethodPost, replayPath, opsTok, "daily", `{"reason":"tuesday"}`)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	require.Empty(t, rec.Header().Get(api.HeaderIdempotentReplayed), "a purged key is a new request")
	require.Equal(t, 4, b.jobCount(t, "evt_idem"))

	workPurge(t, b, &jobs.IdempotencyPurgeWorker{Pool: b.pool, Now: func() time.Time { return time.Now().Add(25 * time.Hour) }})
	require.Empty(t, b.keys(t))
}

func (b *opsBundle) keys(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT key FROM idempotency_keys ORDER BY key`)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return keys
}

func workPurge(t *testing.T, b *opsBundle, w *jobs.IdempotencyPurgeWorker) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	res, err := rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{}, w).Work(ctx, t, tx, jobs.IdempotencyPurgeArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, river.EventKindJobCompleted, res.EventKind)
	require.Equal(t, "idempotency_purge", res.Job.Kind)
}

// TestIdempotencyFailureRollsBackEffectsAndReleasesKey: when the action
// fails half-way (here the audit insert, after the status change and the job
// insert), nothing of it commits, the key is free, and a retry with the same
// key does the whole action once.
func TestIdempotencyFailureRollsBackEffectsAndReleasesKey(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_idem", seedOpts{})
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `
		CREATE FUNCTION fail_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'simulated outage'; END $$;
		CREATE TRIGGER fail_audit BEFORE INSERT ON ops_audit_log FOR EACH ROW EXECUTE FUNCTION fail_audit();`)
	require.NoError(t, err)

	rec := b.do(t, http.MethodPost, replayPath, opsTok, "retry-me", "")
	require.Equal(t, http.StatusInternalServerError, rec.Code)
	require.NotContains(t, rec.Body.String(), "simulated outage", "internal errors are not shown")
	require.Equal(t, inbox.StatusPoison, b.status(t, "evt_idem"), "the status change rolled back")
	require.Equal(t, 1, b.jobCount(t, "evt_idem"), "the job insert rolled back")
	require.Empty(t, b.keys(t), "the claim is released")

	_, err = b.pool.Exec(ctx, `DROP TRIGGER fail_audit ON ops_audit_log`)
	require.NoError(t, err)
	rec = b.do(t, http.MethodPost, replayPath, opsTok, "retry-me", "")
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	require.Empty(t, rec.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, 2, b.jobCount(t, "evt_idem"))
	require.Equal(t, 1, b.auditCount(t, "evt_idem"))
	var stored int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT response_status FROM idempotency_keys WHERE key = 'retry-me'`).Scan(&stored))
	require.Equal(t, http.StatusAccepted, stored)
}

// TestIdempotencyModel is a property test: any sequence of POSTs drawn from
// a few keys, routes and bodies behaves like the model — the first use of a
// key acts once, a repeat of the same request replays its stored answer
// byte for byte, anything else under that key is 422 — and the effects
// (jobs, audit entries) are exactly one per key that acted.
func TestIdempotencyModel(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	round := 0
	rapid.Check(t, func(rt *rapid.T) {
		round++
		events := []string{fmt.Sprintf("evt_m%d_a", round), fmt.Sprintf("evt_m%d_b", round)}
		for _, id := range events {
			b.seed(t, id, seedOpts{})
		}
		routes := []string{
			"/v1/ops/events/stripe/" + events[0] + "/replay",
			"/v1/ops/events/stripe/" + events[1] + "/replay",
		}
		bodies := []string{``, `{"reason":"a"}`, `{ "reason" : "a" }`, `{"reason":"b"}`}
		canonical := map[string]string{``: ``, `{"reason":"a"}`: `a`, `{ "reason" : "a" }`: `a`, `{"reason":"b"}`: `b`}
		type first struct {
			request string
			body    string
		}
		seen := map[string]first{}
		effects := map[string]int{}
		steps := rapid.IntRange(1, 12).Draw(rt, "steps")
		for range steps {
			key := fmt.Sprintf("m%d-%s", round, rapid.SampledFrom([]string{"k1", "k2", "k3"}).Draw(rt, "key"))
			route := rapid.IntRange(0, 1).Draw(rt, "route")
			body := rapid.SampledFrom(bodies).Draw(rt, "body")
			request := fmt.Sprintf("%d|%s", route, canonical[body])
			rec := b.do(t, http.MethodPost, routes[route], opsTok, key, body)
			prev, used := seen[key]
			switch {
			case !used:
				if rec.Code != http.StatusAccepted || rec.Header().Get(api.HeaderIdempotentReplayed) != "" {
					rt.Fatalf("first use of %s: %d %s", key, rec.Code, rec.Body.String())
				}
				seen[key] = first{request: request, body: rec.Body.String()}
				effects[events[route]]++
			case prev.request == request:
				if rec.Code != http.StatusAccepted || rec.Header().Get(api.HeaderIdempotentReplayed) != "true" || rec.Body.String() != prev.body {
					rt.Fatalf("repeat of %s: %d replayed=%q", key, rec.Code, rec.Header().Get(api.HeaderIdempotentReplayed))
				}
			default:
				if rec.Code != http.StatusUnprocessableEntity {
					rt.Fatalf("reuse of %s for %s (first %s): %d", key, request, prev.request, rec.Code)
				}
			}
		}
		for _, id := range events {
			if got := b.jobCount(t, id) - 1; got != effects[id] {
				rt.Fatalf("%s: %d replay jobs, want %d", id, got, effects[id])
			}
			if got := b.auditCount(t, id); got != effects[id] {
				rt.Fatalf("%s: %d audit entries, want %d", id, got, effects[id])
			}
		}
	})
}
