package api_test

import (
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

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
	id := b.seedRunItems(t, "2025-03-14", n, true)
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
	short := b.seedRunItems(t, "2025-03-15", 3, true)
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
