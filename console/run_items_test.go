package console_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// seedRun records a completed run with n items, every fifth one
// missing_in_ledger and the others matched.
func (b *testBundle) seedRun(t *testing.T, n int) int64 {
	return b.seedRunOf(t, n, `
		INSERT INTO reconciliation_items
			(run_id, position, status, provider_txn_id, type, reporting_category, currency, provider_amount)
		SELECT $1, i, CASE WHEN i % 5 = 4 THEN 'missing_in_ledger' ELSE 'matched' END, 'txn_' || i,
		       'charge', 'charge', 'usd', 1
		FROM generate_series(0, $2 - 1) AS i`,
		`jsonb_build_object('matched', $2::int - $2::int / 5, 'missing_in_ledger', $2::int / 5)`)
}

// seedRunOf records a run, its n items inserted by items ($1 the run, $2
// n), then completes it with the summary summary (a jsonb expression of
// $2).
func (b *testBundle) seedRunOf(t *testing.T, n int, items, summary string) int64 {
	t.Helper()
	ctx := context.Background()
	var id int64
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO reconciliation_runs (date, trigger, requested_by) VALUES ('2025-03-14', 'api', 'test')
			RETURNING id`).Scan(&id); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, items, id, n); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE reconciliation_runs SET status = 'completed', finished_at = now(),
			report = jsonb_build_object('summary', `+summary+`)
			WHERE id = $1`, id, n)
		return err
	}))
	return id
}

// TestRunItemsPagesInBrowser: a run's page shows its first page of items
// and follows the API's cursor to the next ones, with or without a status
// filter; the CSV still holds every item.
func TestRunItemsPagesInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.seedRun(t, 230)
	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, financeTok)
	rows := func() []string {
		return eval[[]string](t, ctx, `[...document.querySelectorAll('#items tbody tr.item-row')].map(r => r.cells[1].textContent)`)
	}
	want := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, "txn_"+strconv.Itoa(i))
		}
		return out
	}

	run(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/console/reconciliation/runs/%d", b.srv.URL, id)), chromedp.WaitVisible(chromedp.CSS("#items")))
	require.Equal(t, want(0, 100), rows(), "the first page")
	run(t, ctx, chromedp.Click(chromedp.CSS("#items-next")), chromedp.WaitVisible(chromedp.CSS("#items-first")))
	require.Equal(t, want(100, 200), rows())
	run(t, ctx, chromedp.Click(chromedp.CSS("#items-next")), chromedp.WaitVisible(chromedp.CSS("#items-first")))
	require.Equal(t, want(200, 230), rows(), "the last page")
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#items-next').length`), "nothing after the last page")
	require.Equal(t, "230", eval[string](t, ctx, `document.querySelector('.tiles').dataset.total`), "the summary counts every item")

	run(t, ctx, chromedp.Click(chromedp.CSS(`a.tile[href="?status=missing_in_ledger"]`)), chromedp.WaitVisible(chromedp.CSS("#items")))
	var missing []string
	for i := 4; i < 230; i += 5 {
		missing = append(missing, "txn_"+strconv.Itoa(i))
	}
	got := rows()
	for eval[int](t, ctx, `document.querySelectorAll('#items-next').length`) > 0 {
		run(t, ctx, chromedp.Click(chromedp.CSS("#items-next")), chromedp.WaitVisible(chromedp.CSS("#items-first")))
		require.Contains(t, eval[string](t, ctx, `location.search`), "status=missing_in_ledger", "the filter follows the pages")
		got = append(got, rows()...)
	}
	require.Equal(t, missing, got, "the status's items, every one, across pages")

	// The download goes through the console, streamed from the API.
	download := downloader(t, ctx)
	csv := download("#csv", fmt.Sprintf("reconciliation-2025-03-14-run-%d.csv", id))
	lines := strings.Split(strings.TrimSuffix(string(csv), "\n"), "\n")
	require.Len(t, lines, 231, "the header and every item")
	require.True(t, strings.HasPrefix(lines[230], "missing_in_ledger,txn_229,"), lines[230])
}

// TestOlderRunsLinkInBrowser: the runs list's link to its next page keeps
// its query as a query (cursor=…, not cursor%3D…), so following it shows
// the older runs.
func TestOlderRunsLinkInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 55 {
		b.seedRun(t, 0)
	}
	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, financeTok)
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/reconciliation"), chromedp.WaitVisible(chromedp.CSS("#runs-next")))
	require.Equal(t, 50, eval[int](t, ctx, `document.querySelectorAll('#runs tr.run-row').length`))
	href := eval[string](t, ctx, `document.querySelector('#runs-next').getAttribute('href')`)
	require.Contains(t, href, "?cursor=", href)
	run(t, ctx, chromedp.Click(chromedp.CSS("#runs-next")), chromedp.WaitVisible(chromedp.CSS("#runs")))
	require.Equal(t, []string{"5", "4", "3", "2", "1"},
		eval[[]string](t, ctx, `[...document.querySelectorAll('#runs tr.run-row')].map(r => r.dataset.run)`), "the oldest runs")
}
