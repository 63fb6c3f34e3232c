package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
)

// eventPages follows next_cursor from path to the end, two events a page.
func (b *opsBundle) eventPages(t *testing.T, path string) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for range 20 {
		u := path + "&limit=2"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		rec := b.do(t, http.MethodGet, u, opsTok, "", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		p := decodeJSON[poisonPage](t, rec)
		require.LessOrEqual(t, len(p.Events), 2)
		ids = append(ids, p.ids()...)
		if p.NextCursor == nil {
			return ids
		}
		cursor = *p.NextCursor
	}
	t.Fatal("the pages never end")
	return nil
}

// namePayment records, as processing does, that payment pi was told about
// by facts, a ledger transaction and history rows from the given events.
func (b *opsBundle) namePayment(t *testing.T, pi, factEvent, ledgerEvent, historyEvent string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO payments (id, provider, currency) VALUES ($1, 'stripe', 'usd')`, pi); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO payment_facts (payment_id, key, kind, event_id, occurred_at)
			VALUES ($1, 'capture', 'capture', $2, now())`, pi, factEvent); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO payment_history (payment_id, to_status, event_id) VALUES ($1, 'succeeded', $2)`,
			pi, historyEvent); err != nil {
			return err
		}
		amt := decimal.RequireFromString("10.00")
		_, err := ledger.PostTx(ctx, tx, ledger.Transaction{Ref: "capture:" + pi, Kind: ledger.KindCapture, Currency: "usd",
			OccurredAt: time.Now(), PaymentID: pi, EventID: ledgerEvent,
			Entries: []ledger.Entry{ledger.Debit(ledger.AccountProviderBalance, amt), ledger.Credit(ledger.AccountSales, amt)}})
		return err
	}))
}

func TestEventListFiltersAndPages(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	base := time.Now().Add(-time.Hour).UTC()
	for i, e := range []struct {
		id, provider, typ string
		status            inbox.Status
	}{
		{"evt_l1", "stripe", "charge.succeeded", inbox.StatusProcessed},
		{"evt_l2", "stripe", "charge.refunded", inbox.StatusProcessed},
		{"evt_l3", "adyen", "AUTHORISATION", inbox.StatusIgnored},
		{"evt_l4", "stripe", "charge.succeeded", inbox.StatusPoison},
		{"evt_l5", "stripe", "charge.succeeded", inbox.StatusReceived},
		{"evt_l6", "stripe", "payment_intent.succeeded", inbox.StatusProcessed},
	} {
		b.seed(t, e.id, seedOpts{provider: e.provider, typ: e.typ, status: e.status, receivedAt: base.Add(time.Duration(i) * time.Minute)})
	}
	b.failJobs(t, "evt_l4", "boom")
	b.namePayment(t, "pi_named", "evt_l1", "evt_l2", "evt_l6")

	require.Equal(t, []string{"evt_l6", "evt_l5", "evt_l4", "evt_l3", "evt_l2", "evt_l1"}, b.eventPages(t, "/v1/events?"), "newest first, every status")
	require.Equal(t, []string{"evt_l6", "evt_l2", "evt_l1"}, b.eventPages(t, "/v1/events?status=processed"))
	require.Equal(t, []string{"evt_l3"}, b.eventPages(t, "/v1/events?provider=adyen"))
	require.Equal(t, []string{"evt_l5", "evt_l4", "evt_l1"}, b.eventPages(t, "/v1/events?provider=stripe&type=charge.succeeded"))
	require.Equal(t, []string{"evt_l6", "evt_l2", "evt_l1"}, b.eventPages(t, "/v1/events?payment_id=pi_named"),
		"the events of the payment's facts, ledger transactions and history")
	require.Equal(t, []string{"evt_l2"}, b.eventPages(t, "/v1/events?payment_id=pi_named&type=charge.refunded"))
	require.Empty(t, b.eventPages(t, "/v1/events?payment_id=pi_named&provider=adyen"))
	require.Empty(t, b.eventPages(t, "/v1/events?payment_id=pi_unknown"))

	rec := b.do(t, http.MethodGet, "/v1/events?status=poison", opsTok, "", "")
	p := decodeJSON[poisonPage](t, rec)
	require.Len(t, p.Events, 1)
	require.Len(t, p.Events[0].Errors, 1, "the same event objects as the poison queue")
	require.Equal(t, "boom", p.Events[0].Errors[0].Error)

	for _, bad := range []string{"/v1/events?status=lost", "/v1/events?cursor=nope", "/v1/events?limit=0"} {
		rec := b.do(t, http.MethodGet, bad, opsTok, "", "")
		require.Equal(t, http.StatusBadRequest, rec.Code, bad)
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	}
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodGet, "/v1/events", financeTok, "", "").Code)
	require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, "/v1/events", "", "", "").Code)
}

// explain is the plan of sql with sequential scans and sorts priced out, so
// that a plan still holding either has no index to use instead.
func (b *opsBundle) explain(t *testing.T, sql string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SET enable_sort = off`)
	require.NoError(t, err)
	rows, err := conn.Query(ctx, `EXPLAIN `+sql)
	require.NoError(t, err)
	var plan string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan += line + "\n"
	}
	require.NoError(t, rows.Err())
	return plan
}

// TestEventListIsIndexed: every event newest first is read in index order,
// and the payment_id filter reads each table by an index, never a scan.
func TestEventListIsIndexed(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	plan := b.explain(t, `SELECT id FROM inbox_events WHERE (received_at, id) < (now(), 1)
		ORDER BY received_at DESC, id DESC LIMIT 51`)
	require.NotContains(t, plan, "Seq Scan", plan)
	// A Merge Append of the partitions' indexes keeps index order; a Sort
	// node would read them all.
	require.NotContains(t, plan, "Sort  (", plan)
	plan = b.explain(t, `SELECT p.provider, coalesce(array(
			SELECT event_id FROM payment_facts WHERE payment_id = p.id
			UNION SELECT event_id FROM ledger_transactions WHERE payment_id = p.id AND event_id IS NOT NULL
			UNION SELECT event_id FROM payment_history WHERE payment_id = p.id), '{}')
		FROM payments p WHERE p.id = 'pi_x'`)
	require.NotContains(t, plan, "Seq Scan", plan)
	plan = b.explain(t, `SELECT id FROM inbox_events WHERE provider = 'stripe' AND event_id = ANY('{evt_1,evt_2}'::text[])`)
	require.NotContains(t, plan, "Seq Scan", plan)
}

type paymentPage struct {
	Payments []struct {
		ID        string    `json:"id"`
		Status    string    `json:"status"`
		Currency  string    `json:"currency"`
		Amount    string    `json:"amount"`
		CreatedAt time.Time `json:"created_at"`
		History   any       `json:"history"`
		Emails    any       `json:"emails"`
	} `json:"payments"`
	NextCursor *string `json:"next_cursor"`
}

// allPages follows next_cursor from path (which has a query) to the end,
// two items a page, and returns each page's body.
func (b *opsBundle) allPages(t *testing.T, path, token string) [][]byte {
	t.Helper()
	var pages [][]byte
	cursor := ""
	for range 50 {
		u := path + "&limit=2"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		rec := b.do(t, http.MethodGet, u, token, "", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		pages = append(pages, rec.Body.Bytes())
		var p struct {
			NextCursor *string `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
		if p.NextCursor == nil {
			return pages
		}
		cursor = *p.NextCursor
	}
	t.Fatal("the pages never end")
	return nil
}

func (b *opsBundle) paymentIDs(t *testing.T, path string) []string {
	t.Helper()
	var ids []string
	for _, body := range b.allPages(t, path, financeTok) {
		var p paymentPage
		require.NoError(t, json.Unmarshal(body, &p))
		require.LessOrEqual(t, len(p.Payments), 2)
		for _, pm := range p.Payments {
			require.Nil(t, pm.History, "the list leaves history to the payment's own route")
			require.Nil(t, pm.Emails)
			ids = append(ids, pm.ID)
		}
	}
	return ids
}

func TestPaymentListFiltersAndPagesNewestFirst(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).UTC()
	for i, p := range []struct{ id, status, currency, amount string }{
		{"pi_a", "succeeded", "usd", "10.5"},
		{"pi_b", "refunded", "eur", "20"},
		{"pi_c", "succeeded", "eur", "30"},
		{"pi_d", "succeeded", "usd", "40"},
		{"pi_e", "processing", "jpy", "5000"},
	} {
		_, err := b.pool.Exec(ctx, `INSERT INTO payments (id, provider, status, currency, amount, created_at, updated_at)
			VALUES ($1, 'stripe', $2, $3, $4, $5, $6)`, p.id, p.status, p.currency, p.amount,
			base.Add(time.Duration(i)*time.Minute), base.Add(time.Duration(10-i)*time.Minute))
		require.NoError(t, err)
	}
	// Two payments first seen in the same microsecond still page apart.
	_, err := b.pool.Exec(ctx, `UPDATE payments SET created_at = $1 WHERE id IN ('pi_a', 'pi_b')`, base)
	require.NoError(t, err)

	require.Equal(t, []string{"pi_e", "pi_d", "pi_c", "pi_b", "pi_a"}, b.paymentIDs(t, "/v1/payments?"))
	require.Equal(t, []string{"pi_d", "pi_c", "pi_a"}, b.paymentIDs(t, "/v1/payments?status=succeeded"))
	require.Equal(t, []string{"pi_c", "pi_b"}, b.paymentIDs(t, "/v1/payments?currency=eur"))
	require.Equal(t, []string{"pi_d", "pi_a"}, b.paymentIDs(t, "/v1/payments?status=succeeded&currency=usd"))

	rec := b.do(t, http.MethodGet, "/v1/payments?currency=usd&limit=1", opsTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	p := decodeJSON[paymentPage](t, rec)
	require.Equal(t, "40.00", p.Payments[0].Amount, "amounts at the currency's scale")
	require.NotNil(t, p.NextCursor)

	for _, bad := range []string{"/v1/payments?status=paid", "/v1/payments?currency=USD", "/v1/payments?cursor=abc",
		"/v1/payments?cursor=" + url.QueryEscape(*p.NextCursor+"x")} {
		rec := b.do(t, http.MethodGet, bad, opsTok, "", "")
		require.Equal(t, http.StatusBadRequest, rec.Code, bad)
		require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	}
	require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, "/v1/payments", "", "", "").Code)
}

// TestPaymentListIsIndexed: each filter of GET /v1/payments is served by an
// index in the order the list is read.
func TestPaymentListIsIndexed(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	for _, where := range []string{"true", "status = 'succeeded'", "currency = 'usd'", "reference = 'ord_1'", "customer = 'cus_1'"} {
		plan := b.explain(t, `SELECT id FROM payments WHERE `+where+
			` AND (created_at, id) < (now(), 'x') ORDER BY created_at DESC, id DESC LIMIT 51`)
		require.NotContains(t, plan, "Seq Scan", plan)
		require.NotContains(t, plan, "Sort", plan)
	}
	// A search is one lookup per index, whatever the role: its few
	// payments are sorted, never the table.
	for _, q := range []string{
		"id = 'x' OR reference = 'x' OR customer = 'x'",
		"id = 'x' OR reference = 'x' OR customer = 'x' OR (lower(receipt_email) = lower('x') AND receipt_email IS NOT NULL AND receipt_email <> '')",
	} {
		plan := b.explain(t, `SELECT id FROM payments WHERE (`+q+`) ORDER BY created_at DESC, id DESC LIMIT 51`)
		require.NotContains(t, plan, "Seq Scan", plan)
		require.Contains(t, plan, "Index", plan)
	}
}

// seedRun records a finished run of day with n matched items.
func (b *opsBundle) seedRun(t *testing.T, day string, n int) int64 {
	t.Helper()
	return b.seedRunItems(t, day, n, false)
}

// seedRunItems records a finished run of day with n items in one
// statement, as the runner leaves them: items while running, then the
// outcome. With missing, every seventh item (from the fourth) is
// missing_in_ledger and the rest are matched.
func (b *opsBundle) seedRunItems(t *testing.T, day string, n int, missing bool) int64 {
	t.Helper()
	ctx := context.Background()
	var id int64
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO reconciliation_runs (date, trigger, requested_by) VALUES ($1, 'api', 'test')
			RETURNING id`, day).Scan(&id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO reconciliation_items
			(run_id, position, status, provider_txn_id, type, reporting_category, currency, provider_amount)
			SELECT $1, i, CASE WHEN $3 AND i % 7 = 3 THEN 'missing_in_ledger' ELSE 'matched' END, 'txn_' || $1::bigint || '_' || i,
			       'charge', 'charge', 'usd', 1
			FROM generate_series(0, $2 - 1) AS i`, id, n, missing); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE reconciliation_runs SET status = 'completed', finished_at = now(),
			report = jsonb_build_object('summary', jsonb_build_object('matched', $2::int)) WHERE id = $1`, id, n)
		return err
	}))
	return id
}

func TestReconciliationRunListAndItemPages(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	r1 := b.seedRun(t, "2025-03-13", 0)
	r2 := b.seedRun(t, "2025-03-14", 5)
	r3 := b.seedRun(t, "2025-03-14", 1)
	r4 := b.seedRun(t, "2025-03-15", 2)

	runIDs := func(path, token string) []int64 {
		var ids []int64
		for _, body := range b.allPages(t, path, token) {
			var p struct {
				Runs []struct {
					ID      int64          `json:"id"`
					Date    string         `json:"date"`
					Status  string         `json:"status"`
					Summary map[string]int `json:"summary"`
					Items   any            `json:"items"`
				} `json:"runs"`
			}
			require.NoError(t, json.Unmarshal(body, &p))
			for _, r := range p.Runs {
				require.Equal(t, "completed", r.Status)
				require.Contains(t, r.Summary, "missing_in_ledger", "every item status counted")
				require.Nil(t, r.Items)
				ids = append(ids, r.ID)
			}
		}
		return ids
	}
	require.Equal(t, []int64{r4, r3, r2, r1}, runIDs("/v1/reconciliation/runs?", financeTok))
	require.Equal(t, []int64{r3, r2}, runIDs("/v1/reconciliation/runs?date=2025-03-14", opsTok))
	require.Empty(t, runIDs("/v1/reconciliation/runs?date=2025-03-16", financeTok))

	var txns []string
	for _, body := range b.allPages(t, fmt.Sprintf("/v1/reconciliation/runs/%d/items?", r2), financeTok) {
		var p struct {
			Items []struct {
				ProviderTxnID string `json:"provider_txn_id"`
			} `json:"items"`
		}
		require.NoError(t, json.Unmarshal(body, &p))
		for _, it := range p.Items {
			txns = append(txns, it.ProviderTxnID)
		}
	}
	var want []string
	for i := range 5 {
		want = append(want, fmt.Sprintf("txn_%d_%d", r2, i))
	}
	require.Equal(t, want, txns, "every item once, in report order")

	rec := b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d", r2), financeTok, "", "")
	require.Equal(t, http.StatusOK, rec.Code)
	require.Len(t, decodeJSON[struct {
		Items []any `json:"items"`
	}](t, rec).Items, 5, "the run's own answer keeps every item")

	runCursor := decodeJSON[struct {
		NextCursor *string `json:"next_cursor"`
	}](t, b.do(t, http.MethodGet, "/v1/reconciliation/runs?limit=1", financeTok, "", "")).NextCursor
	require.NotNil(t, runCursor)
	for _, bad := range []string{
		"/v1/reconciliation/runs?date=14-03-2025",
		"/v1/reconciliation/runs?cursor=bad",
		fmt.Sprintf("/v1/reconciliation/runs/%d/items?cursor=%s", r2, url.QueryEscape(*runCursor)),
	} {
		rec := b.do(t, http.MethodGet, bad, financeTok, "", "")
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", bad, rec.Body.String())
	}
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/reconciliation/runs/999999/items", financeTok, "", "").Code)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d/items", r2), opsTok, "", "").Code,
		"ops read runs too")
}
