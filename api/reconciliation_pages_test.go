package api_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// seedLargeRun records a finished run with n items, every seventh one
// missing_in_ledger and the rest matched, in one statement.
func (b *opsBundle) seedLargeRun(t *testing.T, day string, n int) int64 {
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
			SELECT $1, i, CASE WHEN i % 7 = 3 THEN 'missing_in_ledger' ELSE 'matched' END, 'txn_' || $1::bigint || '_' || i,
			       'charge', 'charge', 'usd', 1
			FROM generate_series(0, $2 - 1) AS i`, id, n); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE reconciliation_runs SET status = 'completed', finished_at = now(),
			report = jsonb_build_object('summary', jsonb_build_object('matched', $2::int)) WHERE id = $1`, id, n)
		return err
	}))
	return id
}

type itemsPage struct {
	Items []struct {
		Status        string `json:"status"`
		ProviderTxnID string `json:"provider_txn_id"`
	} `json:"items"`
	NextCursor      *string `json:"next_cursor"`
	ItemsNextCursor *string `json:"items_next_cursor"`
}

// TestRunItemsArePaged: a run's answer carries the first page of its items
// (100, or ?limit=) and the cursor that GET …/items continues from, null
// when that page was the last; the pages, filtered by status or not, add
// up to the items in report order, and the CSV streams every one of them.
func TestRunItemsArePaged(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	const n = 1234
	id := b.seedLargeRun(t, "2025-03-14", n)
	want, wantMissing := []string{}, []string{}
	for i := range n {
		txn := fmt.Sprintf("txn_%d_%d", id, i)
		want = append(want, txn)
		if i%7 == 3 {
			wantMissing = append(wantMissing, txn)
		}
	}

	run := decodeJSON[itemsPage](t, b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d", id), financeTok, "", ""))
	require.Equal(t, 100, len(run.Items), "the first page, not every item")
	require.NotNil(t, run.ItemsNextCursor)
	got := []string{}
	for _, it := range run.Items {
		got = append(got, it.ProviderTxnID)
	}
	for cursor := run.ItemsNextCursor; cursor != nil; {
		page := decodeJSON[itemsPage](t, b.do(t, http.MethodGet,
			fmt.Sprintf("/v1/reconciliation/runs/%d/items?limit=500&cursor=%s", id, url.QueryEscape(*cursor)), financeTok, "", ""))
		for _, it := range page.Items {
			got = append(got, it.ProviderTxnID)
		}
		cursor = page.NextCursor
	}
	require.Equal(t, want, got, "the run's page and the item pages add up to every item once, in order")

	small := decodeJSON[itemsPage](t, b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d?limit=7", id), opsTok, "", ""))
	require.Len(t, small.Items, 7)
	require.NotNil(t, small.ItemsNextCursor)
	next := decodeJSON[itemsPage](t, b.do(t, http.MethodGet,
		fmt.Sprintf("/v1/reconciliation/runs/%d/items?limit=3&cursor=%s", id, url.QueryEscape(*small.ItemsNextCursor)), opsTok, "", ""))
	require.Equal(t, want[7:10], []string{next.Items[0].ProviderTxnID, next.Items[1].ProviderTxnID, next.Items[2].ProviderTxnID})

	all := decodeJSON[itemsPage](t, b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d?limit=%d", id, n), financeTok, "", ""))
	require.Equal(t, 500, len(all.Items), "a page is at most 500")
	short := b.seedLargeRun(t, "2025-03-15", 3)
	rec := b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d", short), financeTok, "", "")
	whole := decodeJSON[map[string]any](t, rec)
	require.Contains(t, whole, "items_next_cursor")
	require.Nil(t, whole["items_next_cursor"], "null at the end")
	require.Len(t, decodeJSON[itemsPage](t, rec).Items, 3)
	requireBad := func(path string) {
		t.Helper()
		rec := b.do(t, http.MethodGet, path, financeTok, "", "")
		require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", path, rec.Body.String())
	}
	requireBad(fmt.Sprintf("/v1/reconciliation/runs/%d?limit=0", id))
	requireBad(fmt.Sprintf("/v1/reconciliation/runs/%d/items?status=lost", id))

	var missing []string
	for cursor := ""; ; {
		page := decodeJSON[itemsPage](t, b.do(t, http.MethodGet,
			fmt.Sprintf("/v1/reconciliation/runs/%d/items?status=missing_in_ledger&limit=50&cursor=%s", id, url.QueryEscape(cursor)), financeTok, "", ""))
		for _, it := range page.Items {
			require.Equal(t, "missing_in_ledger", it.Status)
			missing = append(missing, it.ProviderTxnID)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	require.Equal(t, wantMissing, missing, "a status's pages add up to its items")

	csvRec := b.do(t, http.MethodGet, fmt.Sprintf("/v1/reconciliation/runs/%d/items.csv", id), financeTok, "", "")
	require.Equal(t, http.StatusOK, csvRec.Code)
	rows, err := csv.NewReader(csvRec.Body).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, n+1, "the header and every item, across pages")
	for i, txn := range want {
		require.Equal(t, txn, rows[i+1][1])
	}
}
