package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
)

const (
	opsTok      = "ops-token-ops-tests"
	otherOpsTok = "ops-token-ops-tests-2"
	financeTok  = "finance-token-ops-tests"
)

type opsBundle struct {
	pool     *pgxpool.Pool
	jobs     *jobs.Client
	echo     *echo.Echo
	server   *api.Server
	registry *prometheus.Registry
}

// setupOps builds the API on a fresh database with an insert-only River
// client: jobs are inserted and counted, never worked.
func setupOps(t *testing.T, opts ...func(*api.Config)) *opsBundle {
	t.Helper()
	pool := testdb.New(t)
	jc, err := jobs.NewClient(pool, jobs.Config{InsertOnly: true})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	cfg := api.Config{Pool: pool, Jobs: jc, OpsTokens: []string{opsTok, otherOpsTok},
		FinanceTokens: []string{financeTok}, Registry: reg}
	for _, o := range opts {
		o(&cfg)
	}
	e, s := newAPI(t, cfg)
	return &opsBundle{pool: pool, jobs: jc, echo: e, server: s, registry: reg}
}

// request is one HTTP call; key "" sends no Idempotency-Key.
func (b *opsBundle) do(t testing.TB, method, path, token, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	} else {
		rd = strings.NewReader("")
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	if token != "" {
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+token)
	}
	if key != "" {
		req.Header.Set(api.HeaderIdempotencyKey, key)
	}
	rec := httptest.NewRecorder()
	b.echo.ServeHTTP(rec, req)
	return rec
}

func decodeJSON[T any](t testing.TB, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v), rec.Body.String())
	return v
}

func (b *opsBundle) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

type seedOpts struct {
	provider   string // default stripe
	typ        string
	status     inbox.Status
	lastError  string
	receivedAt time.Time
	payload    string
}

// seed stores an event as the ingest path does (inbox row and its job in one
// transaction), then moves it to a status the way the worker does.
func (b *opsBundle) seed(t testing.TB, id string, o seedOpts) {
	t.Helper()
	ctx := context.Background()
	if o.typ == "" {
		o.typ = "charge.succeeded"
	}
	if o.provider == "" {
		o.provider = "stripe"
	}
	if o.status == "" {
		o.status = inbox.StatusPoison
	}
	if o.payload == "" {
		o.payload = fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"data":{"object":{"id":"ch_%s","currency":"zzz"}}}`, id, o.typ, id)
	}
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		created, err := inbox.InsertTx(ctx, tx, inbox.Event{Provider: o.provider, EventID: id, Type: o.typ, Payload: []byte(o.payload)})
		require.True(t, created)
		if err != nil {
			return err
		}
		if err := b.jobs.InsertProcessEventTx(ctx, tx, o.provider, id); err != nil {
			return err
		}
		if o.status != inbox.StatusReceived {
			if err := inbox.SetStatusTx(ctx, tx, o.provider, id, o.status, o.lastError, true); err != nil {
				return err
			}
		}
		if !o.receivedAt.IsZero() {
			err = testdb.Backdate(ctx, tx, id, o.receivedAt)
		}
		return err
	}))
}

// failJobs records failed attempts on an event's job rows as River does.
func (b *opsBundle) failJobs(t testing.TB, id string, msgs ...string) {
	t.Helper()
	var errs []string
	for i, m := range msgs {
		raw, err := json.Marshal(map[string]any{"at": time.Now().Add(time.Duration(i) * time.Second).UTC(), "attempt": i + 1, "error": m, "trace": ""})
		require.NoError(t, err)
		errs = append(errs, string(raw))
	}
	_, err := b.pool.Exec(context.Background(),
		`UPDATE river_job SET errors = $2::jsonb[] WHERE kind = 'process_event' AND args->>'event_id' = $1`, id, errs)
	require.NoError(t, err)
}

func (b *opsBundle) status(t testing.TB, id string) inbox.Status {
	t.Helper()
	ev, err := inbox.Get(context.Background(), b.pool, "stripe", id)
	require.NoError(t, err)
	return ev.Status
}

func (b *opsBundle) jobCount(t testing.TB, id string) int {
	return b.count(t, `SELECT count(*) FROM river_job WHERE kind = 'process_event' AND args->>'event_id' = $1`, id)
}

func (b *opsBundle) auditCount(t testing.TB, id string) int {
	return b.count(t, `SELECT count(*) FROM ops_audit_log WHERE event_id = $1`, id)
}

type poisonPage struct {
	Events []struct {
		Provider    string     `json:"provider"`
		EventID     string     `json:"event_id"`
		Type        string     `json:"type"`
		Status      string     `json:"status"`
		Attempts    int        `json:"attempts"`
		LastError   *string    `json:"last_error"`
		ReceivedAt  time.Time  `json:"received_at"`
		ProcessedAt *time.Time `json:"processed_at"`
		Errors      []struct {
			JobID   int64     `json:"job_id"`
			Attempt int       `json:"attempt"`
			At      time.Time `json:"at"`
			Error   string    `json:"error"`
		} `json:"errors"`
	} `json:"events"`
	NextCursor *string `json:"next_cursor"`
}

func (p poisonPage) ids() []string {
	var out []string
	for _, e := range p.Events {
		out = append(out, e.EventID)
	}
	return out
}

func TestPoisonQueueListsNewestFirstWithFiltersAndCursor(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	base := time.Date(2024, 6, 20, 12, 0, 0, 0, time.UTC)
	// evt_p0 is the oldest; evt_p6 the newest. evt_p2 and evt_p3 share a
	// received_at, so the cursor must break ties by id.
	at := []time.Time{base, base.Add(time.Minute), base.Add(2 * time.Minute), base.Add(2 * time.Minute),
		base.Add(3 * time.Minute), base.Add(4 * time.Minute), base.Add(5 * time.Minute)}
	for i, ts := range at {
		typ := "charge.succeeded"
		if i%2 == 1 {
			typ = "refund.updated"
		}
		b.seed(t, fmt.Sprintf("evt_p%d", i), seedOpts{typ: typ, lastError: fmt.Sprintf("Unknown currency ZZZ (case %d)", i), receivedAt: ts})
	}
	b.seed(t, "evt_done", seedOpts{status: inbox.StatusProcessed})
	b.seed(t, "evt_gone", seedOpts{status: inbox.StatusDiscarded, lastError: "unknown currency"})
	b.failJobs(t, "evt_p6", "first: database is down", "second: unknown currency zzz")

	var all []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		path := "/v1/ops/poison?limit=3"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		rec := b.do(t, http.MethodGet, path, opsTok, "", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		page := decodeJSON[poisonPage](t, rec)
		require.LessOrEqual(t, len(page.Events), 3)
		all = append(all, page.ids()...)
		if page.NextCursor == nil {
			require.Contains(t, rec.Body.String(), `"next_cursor": null`)
			break
		}
		cursor = *page.NextCursor
	}
	require.Equal(t, []string{"evt_p6", "evt_p5", "evt_p4", "evt_p3", "evt_p2", "evt_p1", "evt_p0"}, all,
		"every poison event once, newest first; processed and discarded ones are not in the queue")

	rec := b.do(t, http.MethodGet, "/v1/ops/poison?limit=1", opsTok, "", "")
	page := decodeJSON[poisonPage](t, rec)
	require.Len(t, page.Events, 1)
	top := page.Events[0]
	require.Equal(t, "stripe", top.Provider)
	require.Equal(t, "poison", top.Status)
	require.Equal(t, 1, top.Attempts)
	require.Equal(t, "Unknown currency ZZZ (case 6)", *top.LastError)
	require.Equal(t, at[6], top.ReceivedAt)
	require.Len(t, top.Errors, 2, "every attempt's error from River's job rows")
	require.Equal(t, "first: database is down", top.Errors[0].Error)
	require.Equal(t, "second: unknown currency zzz", top.Errors[1].Error)
	require.Equal(t, 2, top.Errors[1].Attempt)
	require.NotZero(t, top.Errors[0].JobID)
	for _, key := range []string{`"provider"`, `"event_id"`, `"type"`, `"status"`, `"attempts"`, `"last_error"`, `"received_at"`, `"processed_at"`, `"errors"`} {
		require.Contains(t, rec.Body.String(), key)
	}
	require.NotContains(t, rec.Body.String(), `"payload"`, "lists leave the payload out")

	filter := func(q string) []string {
		t.Helper()
		rec := b.do(t, http.MethodGet, "/v1/ops/poison?"+q, opsTok, "", "")
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", q, rec.Body.String())
		return decodeJSON[poisonPage](t, rec).ids()
	}
	require.Equal(t, []string{"evt_p5", "evt_p3", "evt_p1"}, filter("type=refund.updated"))
	require.Equal(t, []string{"evt_p4"}, filter("error="+url.QueryEscape("CASE 4")), "case-insensitive substring")
	require.Len(t, filter("error=unknown+currency"), 7)
	for _, hostile := range []string{"%", "_", "' OR '1'='1", "%' --", `\`, "); DROP TABLE inbox_events; --"} {
		require.Empty(t, filter("error="+url.QueryEscape(hostile)), hostile)
	}
	require.Equal(t, 9, b.count(t, `SELECT count(*) FROM inbox_events`), "hostile filters change nothing")
	require.Equal(t, []string{"evt_p6", "evt_p5"}, filter("received_after="+url.QueryEscape(at[4].Format(time.RFC3339))))
	require.Equal(t, []string{"evt_p1", "evt_p0"}, filter("received_before="+url.QueryEscape(at[2].Format(time.RFC3339))))
	require.Equal(t, []string{"evt_p3"}, filter("type=refund.updated&received_after="+url.QueryEscape(at[1].Format(time.RFC3339))+
		"&received_before="+url.QueryEscape(at[4].Format(time.RFC3339))))
	require.Equal(t, []string{"evt_p3", "evt_p2"}, filter("received_after=2024-06-20T13:01:30%2B01:00&received_before=2024-06-20T12:03:00Z"),
		"offsets are honoured")

	for _, bad := range []string{"limit=0", "limit=abc", "cursor=not-a-cursor", "cursor=" + url.QueryEscape("ZTE6eDox"), "received_after=yesterday", "received_before=2024-06-20"} {
		rec := b.do(t, http.MethodGet, "/v1/ops/poison?"+bad, opsTok, "", "")
		require.Equal(t, http.StatusBadRequest, rec.Code, bad)
		require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType), bad)
	}
}

func TestEventShowsStoredPayloadToOpsOnly(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	payload := `{"id":"evt_pretty","object":"event","type":"charge.succeeded","data":{"object":{"amount":100}}}`
	b.seed(t, "evt_pretty", seedOpts{payload: payload})

	rec := b.do(t, http.MethodGet, "/v1/events/stripe/evt_pretty", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	v := decodeJSON[map[string]any](t, rec)
	require.Equal(t, "evt_pretty", v["payload"].(map[string]any)["id"])
	require.Contains(t, rec.Body.String(), "\"event_id\": \"evt_pretty\",\n", "the event's fields are indented")
	require.Contains(t, rec.Body.String(), "\n  \"payload\": "+payload+"\n}\n", "the payload is as stored, not re-indented")

	rec = b.do(t, http.MethodGet, "/v1/events/stripe/evt_pretty", financeTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.NotContains(t, rec.Body.String(), "payload", "finance never sees payloads")
}

type eventBody struct {
	Provider    string     `json:"provider"`
	EventID     string     `json:"event_id"`
	Type        string     `json:"type"`
	Status      string     `json:"status"`
	Attempts    int        `json:"attempts"`
	LastError   *string    `json:"last_error"`
	ReceivedAt  time.Time  `json:"received_at"`
	ProcessedAt *time.Time `json:"processed_at"`
}

type auditPage struct {
	Entries []struct {
		ID             int64     `json:"id"`
		At             time.Time `json:"at"`
		Actor          string    `json:"actor"`
		Action         string    `json:"action"`
		Provider       *string   `json:"provider"`
		EventID        *string   `json:"event_id"`
		Reason         *string   `json:"reason"`
		IdempotencyKey *string   `json:"idempotency_key"`
	} `json:"entries"`
	NextCursor *string `json:"next_cursor"`
}

func TestReplayAndDiscardAPoisonEvent(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_rd", seedOpts{lastError: "unknown currency zzz"})
	require.Equal(t, 1, b.jobCount(t, "evt_rd"))

	rec := b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_rd/discard", opsTok, "k-discard-0", `{}`)
	require.Equal(t, http.StatusBadRequest, rec.Code, "a discard needs a reason")
	require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType))
	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_rd/discard", opsTok, "k-discard-0b", `{"reason":"   "}`)
	require.Equal(t, http.StatusBadRequest, rec.Code, "a blank reason is no reason")
	require.Equal(t, inbox.StatusPoison, b.status(t, "evt_rd"))
	require.Zero(t, b.auditCount(t, "evt_rd"))

	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_rd/discard", opsTok, "k-discard-1", `{"reason":"test event from a sandbox account"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	ev := decodeJSON[eventBody](t, rec)
	require.Equal(t, "discarded", ev.Status)
	require.Equal(t, "evt_rd", ev.EventID)
	require.Equal(t, inbox.StatusDiscarded, b.status(t, "evt_rd"))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE args->>'event_id' = 'evt_rd' AND state = 'cancelled'`),
		"the event's pending job is cancelled: nothing applies it behind the operator's back")

	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_rd/replay", opsTok, "k-replay-1", "")
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	ev = decodeJSON[eventBody](t, rec)
	require.Equal(t, "received", ev.Status, "a discarded event can be replayed")
	require.Equal(t, 1, ev.Attempts, "attempts keep counting")
	require.Equal(t, "unknown currency zzz", *ev.LastError)
	require.Equal(t, 2, b.jobCount(t, "evt_rd"), "a new process_event job")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE args->>'event_id' = 'evt_rd' AND state = 'available'`))

	rec = b.do(t, http.MethodGet, "/v1/ops/audit", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	audit := decodeJSON[auditPage](t, rec)
	require.Len(t, audit.Entries, 2)
	require.Nil(t, audit.NextCursor)
	replay, discard := audit.Entries[0], audit.Entries[1]
	require.Equal(t, "replay", replay.Action, "newest first")
	require.Equal(t, "discard", discard.Action)
	require.Equal(t, "test event from a sandbox account", *discard.Reason)
	require.Nil(t, replay.Reason)
	require.Equal(t, "k-discard-1", *discard.IdempotencyKey)
	require.Equal(t, "k-replay-1", *replay.IdempotencyKey)
	require.Equal(t, "stripe", *replay.Provider)
	require.Equal(t, "evt_rd", *replay.EventID)
	require.True(t, strings.HasPrefix(replay.Actor, "token:"), "the actor is the token's identity, never the token: %s", replay.Actor)
	require.NotContains(t, rec.Body.String(), opsTok)
	require.Greater(t, replay.ID, discard.ID)

	require.Equal(t, 1.0, actionCount(t, b.registry, "replay"))
	require.Equal(t, 1.0, actionCount(t, b.registry, "discard"))

	// A processed event can be replayed (applying is idempotent) but not
	// discarded (its effects are in the ledger).
	b.seed(t, "evt_ok", seedOpts{status: inbox.StatusProcessed})
	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_ok/discard", opsTok, "k-discard-ok", `{"reason":"oops"}`)
	require.Equal(t, http.StatusConflict, rec.Code, rec.Body.String())
	require.Equal(t, inbox.StatusProcessed, b.status(t, "evt_ok"))
	require.Zero(t, b.auditCount(t, "evt_ok"))
	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_ok/replay", opsTok, "k-replay-ok", `{"reason":"ledger fix deployed"}`)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	require.Equal(t, inbox.StatusReceived, b.status(t, "evt_ok"))
	ev = decodeJSON[eventBody](t, rec)
	require.Nil(t, ev.ProcessedAt, "received again: not processed until the job runs")

	// Unknown events: 404, nothing recorded, and the key stays free.
	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_nope/replay", opsTok, "k-404", "")
	require.Equal(t, http.StatusNotFound, rec.Code)
	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_nope/discard", opsTok, "k-404b", `{"reason":"x"}`)
	require.Equal(t, http.StatusNotFound, rec.Code)
	require.Zero(t, b.auditCount(t, "evt_nope"))
	require.Zero(t, b.count(t, `SELECT count(*) FROM idempotency_keys WHERE key IN ('k-404', 'k-404b')`))

	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_rd/discard", opsTok, "k-bad-json", `{"reason":`)
	require.Equal(t, http.StatusBadRequest, rec.Code)
	rec = b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_rd/discard", opsTok, "k-unknown-field", `{"reasn":"typo"}`)
	require.Equal(t, http.StatusBadRequest, rec.Code)
}

func actionCount(t *testing.T, reg *prometheus.Registry, action string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "paygate_ops_actions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "action" && l.GetValue() == action {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestBulkReplayDryRunThenReplay(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	base := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	for i := range 4 {
		b.seed(t, fmt.Sprintf("evt_cur%d", i), seedOpts{lastError: "unknown currency zzz", receivedAt: base.Add(time.Duration(i) * time.Minute)})
	}
	b.seed(t, "evt_neg", seedOpts{typ: "refund.updated", lastError: "negative amount"})
	b.seed(t, "evt_disc", seedOpts{status: inbox.StatusDiscarded, lastError: "unknown currency zzz"})
	b.seed(t, "evt_done", seedOpts{status: inbox.StatusProcessed})
	jobsBefore := b.count(t, `SELECT count(*) FROM river_job`)

	body := fmt.Sprintf(`{"status":"poison","type":"charge.succeeded","error":"CURRENCY","received_after":%q,"dry_run":true}`,
		base.Add(30*time.Second).Format(time.RFC3339))
	rec := b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "bulk-dry", body)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"matched":3,"replayed":0,"dry_run":true}`, rec.Body.String())
	require.Equal(t, jobsBefore, b.count(t, `SELECT count(*) FROM river_job`), "a dry run changes nothing")
	require.Zero(t, b.count(t, `SELECT count(*) FROM ops_audit_log`))
	require.Equal(t, 5, b.count(t, `SELECT count(*) FROM inbox_events WHERE status = 'poison'`))

	body = strings.Replace(body, `"dry_run":true`, `"dry_run":false,"reason":"currency table fixed"`, 1)
	rec = b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "bulk-real", body)
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"matched":3,"replayed":3,"dry_run":false}`, rec.Body.String())
	for _, id := range []string{"evt_cur1", "evt_cur2", "evt_cur3"} {
		require.Equal(t, inbox.StatusReceived, b.status(t, id), id)
		require.Equal(t, 2, b.jobCount(t, id), id)
	}
	require.Equal(t, inbox.StatusPoison, b.status(t, "evt_cur0"), "received before the filter's time")
	require.Equal(t, inbox.StatusPoison, b.status(t, "evt_neg"))
	require.Equal(t, jobsBefore+3, b.count(t, `SELECT count(*) FROM river_job`))
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM ops_audit_log WHERE action = 'bulk_replay'
		AND reason = 'currency table fixed' AND idempotency_key = 'bulk-real' AND actor LIKE 'token:%'`),
		"one audit entry per replayed event")

	// The same request again is the same answer, not a second replay.
	rec = b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "bulk-real", body)
	require.Equal(t, http.StatusAccepted, rec.Code)
	require.Equal(t, "true", rec.Header().Get(api.HeaderIdempotentReplayed))
	require.Equal(t, jobsBefore+3, b.count(t, `SELECT count(*) FROM river_job`))

	rec = b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "bulk-disc", `{"status":"discarded","dry_run":true}`)
	require.JSONEq(t, `{"matched":1,"replayed":0,"dry_run":true}`, rec.Body.String())
	rec = b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "bulk-default", `{"error":"unknown currency","dry_run":true}`)
	require.JSONEq(t, `{"matched":1,"replayed":0,"dry_run":true}`, rec.Body.String(), "status defaults to poison")

	for name, bad := range map[string]string{
		"status":  `{"status":"lost"}`,
		"time":    `{"received_after":"yesterday"}`,
		"unknown": `{"statuss":"poison"}`,
		"json":    `[`,
	} {
		rec := b.do(t, http.MethodPost, "/v1/ops/replay", opsTok, "bulk-bad-"+name, bad)
		require.Equal(t, http.StatusBadRequest, rec.Code, name)
	}
}

func TestAuditLogPagesNewestFirstAndIsAppendOnly(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	for i := range 5 {
		id := fmt.Sprintf("evt_a%d", i)
		b.seed(t, id, seedOpts{})
		rec := b.do(t, http.MethodPost, "/v1/ops/events/stripe/"+id+"/replay", opsTok, "audit-"+id, "")
		require.Equal(t, http.StatusAccepted, rec.Code)
	}
	var ids []int64
	var events []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 4)
		path := "/v1/ops/audit?limit=2"
		if cursor != "" {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		rec := b.do(t, http.MethodGet, path, opsTok, "", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		page := decodeJSON[auditPage](t, rec)
		for _, e := range page.Entries {
			ids = append(ids, e.ID)
			events = append(events, *e.EventID)
		}
		if page.NextCursor == nil {
			require.Len(t, page.Entries, 1)
			break
		}
		require.Len(t, page.Entries, 2)
		cursor = *page.NextCursor
	}
	require.Equal(t, []string{"evt_a4", "evt_a3", "evt_a2", "evt_a1", "evt_a0"}, events)
	for i := 1; i < len(ids); i++ {
		require.Greater(t, ids[i-1], ids[i])
	}

	rec := b.do(t, http.MethodGet, "/v1/ops/audit?event_id=evt_a2", opsTok, "", "")
	page := decodeJSON[auditPage](t, rec)
	require.Len(t, page.Entries, 1)
	require.Equal(t, "evt_a2", *page.Entries[0].EventID)

	rec = b.do(t, http.MethodGet, "/v1/ops/audit?cursor=bogus", opsTok, "", "")
	require.Equal(t, http.StatusBadRequest, rec.Code)

	ctx := context.Background()
	for _, sql := range []string{
		`UPDATE ops_audit_log SET reason = 'rewritten'`,
		`UPDATE ops_audit_log SET actor = 'someone' WHERE false`,
		`DELETE FROM ops_audit_log`,
		`TRUNCATE ops_audit_log`,
	} {
		_, err := b.pool.Exec(ctx, sql)
		require.ErrorContains(t, err, "append-only", sql)
	}
	require.Equal(t, 5, b.count(t, `SELECT count(*) FROM ops_audit_log`))
}

func TestOpsRoutesRefuseMissingWrongAndFinanceTokens(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_auth", seedOpts{})
	routes := []struct {
		method, path, body string
	}{
		{http.MethodGet, "/v1/ops/stats", ""},
		{http.MethodGet, "/v1/ops/poison", ""},
		{http.MethodGet, "/v1/ops/audit", ""},
		{http.MethodPost, "/v1/ops/events/stripe/evt_auth/replay", ""},
		{http.MethodPost, "/v1/ops/events/stripe/evt_auth/discard", `{"reason":"r"}`},
		{http.MethodPost, "/v1/ops/replay", `{"status":"poison","dry_run":true}`},
	}
	for _, r := range routes {
		for _, key := range []string{"", "auth-key"} {
			if r.method == http.MethodGet && key != "" {
				continue
			}
			name := fmt.Sprintf("%s %s key=%q", r.method, r.path, key)
			rec := b.do(t, r.method, r.path, "", key, r.body)
			require.Equal(t, http.StatusUnauthorized, rec.Code, "no token: "+name)
			require.Equal(t, "application/problem+json", rec.Header().Get(echo.HeaderContentType), name)
			require.NotEmpty(t, rec.Header().Get(echo.HeaderWWWAuthenticate), name)
			rec = b.do(t, r.method, r.path, "not-a-token", key, r.body)
			require.Equal(t, http.StatusUnauthorized, rec.Code, "wrong token: "+name)
			rec = b.do(t, r.method, r.path, financeTok, key, r.body)
			require.Equal(t, http.StatusForbidden, rec.Code, "finance token: "+name)
		}
	}
	require.Equal(t, inbox.StatusPoison, b.status(t, "evt_auth"))
	require.Equal(t, 1, b.jobCount(t, "evt_auth"))
	require.Zero(t, b.count(t, `SELECT count(*) FROM ops_audit_log`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM idempotency_keys`), "refused requests hold no key")

	for _, r := range routes {
		rec := b.do(t, r.method, r.path, opsTok, "ops-"+r.path, r.body)
		require.Less(t, rec.Code, 300, "ops token: %s %s: %s", r.method, r.path, rec.Body.String())
	}
}

// TestPoisonGaugeCountsPoisonEvents: the collector behind
// paygate_inbox_events{status="poison"} follows replays and discards.
func TestPoisonGaugeCountsPoisonEvents(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	b.seed(t, "evt_g1", seedOpts{})
	b.seed(t, "evt_g2", seedOpts{})
	reg := prometheus.NewRegistry()
	reg.MustRegister(jobs.NewQueueCollector(b.pool))
	poison := func() string {
		t.Helper()
		var buf bytes.Buffer
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "paygate_inbox_events" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "poison" {
					fmt.Fprint(&buf, m.GetGauge().GetValue())
				}
			}
		}
		return buf.String()
	}
	require.Equal(t, "2", poison())
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_g1/discard", opsTok, "g1", `{"reason":"dup"}`).Code)
	require.Equal(t, "1", poison())
	require.Equal(t, http.StatusAccepted, b.do(t, http.MethodPost, "/v1/ops/events/stripe/evt_g2/replay", opsTok, "g2", ``).Code)
	require.Equal(t, "0", poison())
}

// TestEventRoutesTakeTheProvider: the event view, replay, discard and the
// audit filter find an event by its provider and id, ids with colons
// included (Adyen's), and never another provider's event of the same id.
func TestEventRoutesTakeTheProvider(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	const id = "8816000000000001:CAPTURE:true"
	b.seed(t, id, seedOpts{provider: "adyen", typ: "CAPTURE", payload: `{"pspReference":"8816000000000001","eventCode":"CAPTURE"}`})
	b.seed(t, "msg_1", seedOpts{provider: "polar", typ: "order.paid", payload: `{"type":"order.paid"}`})

	rec := b.do(t, http.MethodGet, "/v1/events/adyen/"+id, opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), `"provider": "adyen"`)
	for _, path := range []string{"/v1/events/stripe/" + id, "/v1/events/polar/" + id, "/v1/events/adyen/msg_1"} {
		require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, path, opsTok, "", "").Code, path)
	}
	rec = b.do(t, http.MethodPost, "/v1/ops/events/adyen/"+id+"/discard", opsTok, "k-adyen-discard", `{"reason":"test item"}`)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	rec = b.do(t, http.MethodPost, "/v1/ops/events/polar/msg_1/replay", opsTok, "k-polar-replay", "")
	require.Equal(t, http.StatusAccepted, rec.Code, rec.Body.String())

	rec = b.do(t, http.MethodGet, "/v1/ops/audit?provider=adyen&event_id="+url.QueryEscape(id), opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var page struct {
		Entries []struct {
			Provider, EventID, Action string
		} `json:"entries"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &page))
	require.Len(t, page.Entries, 1)
	require.Equal(t, "adyen", page.Entries[0].Provider)
	require.Equal(t, "discard", page.Entries[0].Action)
	rec = b.do(t, http.MethodGet, "/v1/ops/audit?event_id="+url.QueryEscape(id), opsTok, "", "")
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &page))
	require.Empty(t, page.Entries, "without provider, an event id is Stripe's")
}
