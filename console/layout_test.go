package console_test

import (
	"context"
	"fmt"
	"strings"
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

// seedExceptionRun records a completed run of 30 items as a day with
// exceptions makes them: Stripe's long ids, the payments' ids and, every
// other one, their orders' references; every fifth item an exception
// resolved with a long note, eight others open exceptions.
func (b *testBundle) seedExceptionRun(t *testing.T) int64 {
	t.Helper()
	id := b.seedRunOf(t, 30, `INSERT INTO reconciliation_items
			(run_id, position, status, provider_txn_id, source_id, ref, type, reporting_category, currency,
			 provider_amount, provider_fee, ledger_amount, payment_id, reference)
			SELECT $1, i, CASE WHEN i % 5 = 4 THEN 'missing_at_provider' WHEN i % 3 = 2 THEN 'amount_mismatch' ELSE 'matched' END,
			       'txn_3PqRstUvWxYz' || lpad(i::text, 10, '0'), 'ch_3PqRstUvWxYzAbCd' || lpad(i::text, 8, '0'),
			       'stripe:charge:ch_3PqRstUvWxYzAbCd' || lpad(i::text, 8, '0') || ':capture',
			       'charge', 'charge', 'usd', 123456.78, -3610.25, CASE WHEN i % 3 = 2 THEN 123456.00 ELSE 123456.78 END,
			       'pi_3PqRstUvWxYzAbCd' || lpad(i::text, 8, '0'),
			       CASE WHEN i % 2 = 0 THEN 'order-2025-03-14-' || lpad(i::text, 6, '0') END
			FROM generate_series(0, $2 - 1) AS i`,
		`jsonb_build_object('matched', $2::int - 14, 'amount_mismatch', 8, 'missing_at_provider', 6)`)
	_, err := b.pool.Exec(context.Background(), `INSERT INTO reconciliation_resolutions (item_id, resolution, note, resolved_by)
		SELECT id, 'provider_error', 'Stripe support confirmed the capture was reversed on their side; case 4711, see the thread in #finance for the details', 'token:finance-one'
		FROM reconciliation_items WHERE run_id = $1 AND status = 'missing_at_provider'`, id)
	require.NoError(t, err)
	return id
}

// TestRunOfExceptionsReadsInBrowser: at 1,400 px a run of 30 items, with
// payment ids, references and notes, is a table whose rows are a line or
// two, ids whole on one line (cut at the start when too long, never broken
// across lines), every column within the window, the Resolution column
// included; the items lead to their payments, by their reference when they
// have one; an open exception's form shows under its row once asked for.
func TestRunOfExceptionsReadsInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.seedExceptionRun(t)
	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, financeTok)
	run(t, ctx, chromedp.EmulateViewport(1400, 900))
	run(t, ctx, chromedp.Navigate(fmt.Sprintf("%s/console/reconciliation/runs/%d", b.srv.URL, id)), chromedp.WaitVisible(chromedp.CSS("#items")))
	require.Equal(t, 30, eval[int](t, ctx, `document.querySelectorAll('#items tbody tr.item-row').length`))
	require.True(t, eval[bool](t, ctx, `document.documentElement.scrollWidth <= window.innerWidth`), "no page overflow")
	require.True(t, eval[bool](t, ctx, `(() => { const s = document.querySelector('#items').closest('.scroll'); return s.scrollWidth <= s.clientWidth })()`),
		"the table fits its box: nothing to scroll to")

	// Every column is in the window and wide enough to read.
	cols := eval[[]map[string]float64](t, ctx, `[...document.querySelectorAll('#items thead th')].map(th => { const r = th.getBoundingClientRect(); return {left: r.left, right: r.right, width: r.width} })`)
	require.Len(t, cols, 11)
	for i, c := range cols {
		require.LessOrEqual(t, c["right"], 1400.0, "column %d ends in the window", i)
		require.GreaterOrEqual(t, c["width"], 60.0, "column %d is wide enough to read", i)
	}
	require.Equal(t, "Resolution", eval[string](t, ctx, `document.querySelector('#items thead th:last-child').textContent`))
	require.GreaterOrEqual(t, cols[10]["width"], 200.0, "the Resolution column has room for its badge and note")

	// Rows are a line or two: 30 items on a screen or two.
	heights := eval[[]float64](t, ctx, `[...document.querySelectorAll('#items tbody tr.item-row')].map(r => r.getBoundingClientRect().height)`)
	for i, h := range heights {
		require.LessOrEqual(t, h, 50.0, "row %d is %v px tall", i, h)
	}
	table := eval[map[string]float64](t, ctx, `(() => { const r = document.querySelector('#items').getBoundingClientRect(); return {top: r.top + scrollY, bottom: r.bottom + scrollY} })()`)
	require.LessOrEqual(t, table["bottom"], 2*900.0, "the run's 30 items end within two screens (at %v px)", table["bottom"])

	// An id sits on one line, whole in its title; one too long for its
	// column shows its end, which tells ids apart.
	lines := eval[[]int](t, ctx, `[...document.querySelectorAll('#items tbody td.tail bdi, #items a.payment-link bdi')].map(e => new Set([...e.getClientRects()].map(r => Math.round(r.top))).size)`)
	require.NotEmpty(t, lines)
	for i, n := range lines {
		require.Equal(t, 1, n, "id %d is laid out on %d lines", i, n)
	}
	first := `#items tbody tr.item-row:first-child`
	require.Equal(t, "stripe:charge:ch_3PqRstUvWxYzAbCd00000000:capture", eval[string](t, ctx, `document.querySelector('`+first+` td:nth-child(4)').title`))
	require.True(t, eval[bool](t, ctx, `(() => { const c = document.querySelector('`+first+` td:nth-child(4)'), b = c.querySelector('bdi').getBoundingClientRect(), r = c.getBoundingClientRect(); return b.width > r.width && b.right <= r.right + 1 && b.left < r.left })()`),
		"a ref longer than its column keeps its end in view")

	// The item leads to its payment: by its order reference when it has
	// one, by the payment's id when not.
	links := eval[[]map[string]string](t, ctx, `[...document.querySelectorAll('#items tbody tr.item-row')].slice(0, 2).map(r => { const a = r.querySelector('a.payment-link'); return {text: a.textContent, href: a.getAttribute('href'), title: a.title} })`)
	require.Equal(t, map[string]string{"text": "order-2025-03-14-000000", "href": "/console/payments?id=pi_3PqRstUvWxYzAbCd00000000",
		"title": "payment pi_3PqRstUvWxYzAbCd00000000 · order order-2025-03-14-000000"}, links[0])
	require.Equal(t, map[string]string{"text": "pi_3PqRstUvWxYzAbCd00000001", "href": "/console/payments?id=pi_3PqRstUvWxYzAbCd00000001",
		"title": "payment pi_3PqRstUvWxYzAbCd00000001"}, links[1])

	// The resolved ones show resolution, note and who, within their row.
	resolved := `#items tbody tr.item-row[data-state="resolved"]`
	require.Equal(t, 6, eval[int](t, ctx, `document.querySelectorAll('`+resolved+`').length`))
	res := textOf(t, ctx, resolved+" td.resolution")
	require.Contains(t, res, "provider_error")
	require.Contains(t, res, "case 4711")
	require.Contains(t, res, "token:finance-one")
	require.True(t, eval[bool](t, ctx, `(() => { const r = document.querySelector('`+resolved+` td.resolution').getBoundingClientRect(); return r.right <= innerWidth })()`))

	// An open exception's form takes no room until its Resolve… is opened.
	open := `#items tbody tr.item-row[data-state="open"]`
	require.Zero(t, eval[int](t, ctx, `[...document.querySelectorAll('#items tr.resolve-row')].filter(r => r.getBoundingClientRect().height > 0).length`))
	itemID := eval[string](t, ctx, `document.querySelector('`+open+`').dataset.item`)
	run(t, ctx, chromedp.Click(chromedp.CSS(open+" details.resolve summary")), chromedp.WaitVisible(chromedp.CSS("#resolve-"+itemID+" .resolve-note")))
	require.Equal(t, 1, eval[int](t, ctx, `[...document.querySelectorAll('#items tr.resolve-row')].filter(r => r.getBoundingClientRect().height > 0).length`))
	require.True(t, strings.HasPrefix(textOf(t, ctx, "#resolve-"+itemID), "Resolution of item #"+itemID))
}
