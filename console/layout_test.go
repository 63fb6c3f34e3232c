package console_test

import (
	"fmt"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// seedWideRun records a completed run with n items carrying ids as long as
// Stripe's and refs as long as paygate's, in several currencies, fees and
// refunds negative: what makes a run's table wide.
func (b *testBundle) seedWideRun(t *testing.T, n int) int64 {
	return b.seedRunOf(t, n, `INSERT INTO reconciliation_items
			(run_id, position, status, provider_txn_id, source_id, ref, type, reporting_category, currency,
			 provider_amount, provider_fee, ledger_amount)
			SELECT $1, i, (ARRAY['matched', 'amount_mismatch', 'missing_in_ledger', 'fee_posted'])[i % 4 + 1],
			       'txn_3PqRstUvWxYz' || lpad(i::text, 10, '0'), 'ch_3PqRstUvWxYzAbCd' || lpad(i::text, 8, '0'),
			       'stripe:charge:ch_3PqRstUvWxYzAbCd' || lpad(i::text, 8, '0') || ':capture',
			       'charge', 'charge', c.cur, c.amount, c.fee, c.amount
			FROM generate_series(0, $2 - 1) AS i,
			     LATERAL (SELECT (ARRAY['usd', 'eur', 'jpy', 'kwd'])[i % 4 + 1] AS cur,
			                     (ARRAY[123456.78, -45.00, 500, 1234.567])[i % 4 + 1] AS amount,
			                     (ARRAY[-3610.25, -1.61, -15, -0.123])[i % 4 + 1] AS fee) AS c`,
		`jsonb_build_object('matched', $2::int / 4, 'amount_mismatch', $2::int / 4,
				'missing_in_ledger', $2::int / 4, 'fee_posted', $2::int / 4)`)
}

// TestRunPageFitsInBrowser: at 1,400 px the run page of a run with many
// wide items has no horizontal page overflow, measured in the browser; the
// amounts read as Stripe writes them, the ISO code in its own column.
func TestRunPageFitsInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.seedWideRun(t, 200)
	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, financeTok)
	run(t, ctx, chromedp.EmulateViewport(1400, 900))
	fits := func(page string) {
		t.Helper()
		require.True(t, eval[bool](t, ctx, `document.documentElement.scrollWidth <= window.innerWidth`),
			"%s overflows: %d px wide in a %d px window", page,
			eval[int](t, ctx, `document.documentElement.scrollWidth`), eval[int](t, ctx, `window.innerWidth`))
	}
	run(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/console/reconciliation/runs/%d", b.srv.URL, id)), chromedp.WaitVisible(chromedp.CSS("#items")))
	require.Equal(t, 1400, eval[int](t, ctx, `window.innerWidth`))
	require.Equal(t, 100, eval[int](t, ctx, `document.querySelectorAll('#items tbody tr.item-row').length`))
	fits("the run page")
	cells := func(row int) []string {
		return eval[[]string](t, ctx, fmt.Sprintf(`[...document.querySelectorAll('#items tbody tr.item-row')[%d].cells].map(c => c.textContent)`, row))
	}
	for row, want := range [][]string{
		{"usd", "$123,456.78", "-$3,610.25", "$123,456.78"},
		{"eur", "-€45.00", "-€1.61", "-€45.00"},
		{"jpy", "¥500", "-¥15", "¥500"},
		{"kwd", "1,234.567 KWD", "-0.123 KWD", "1,234.567 KWD"},
	} {
		require.Equal(t, want, cells(row)[5:9], "row %d: the currency's column, then its amounts", row)
	}

	for _, page := range []string{"/console/reconciliation", "/console/payments", "/console/books"} {
		run(t, ctx, chromedp.Navigate(b.srv.URL+page), chromedp.WaitVisible(chromedp.CSS("main h1")))
		fits(page)
	}
}
