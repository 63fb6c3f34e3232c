package console_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/ledger"
)

// post records ledger transactions as the workers would.
func (b *testBundle) post(t *testing.T, txs ...ledger.Transaction) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := ledger.PostManyTx(ctx, tx, txs)
		return err
	}))
}

// seedExceptions records a completed run of 2025-03-14 with a matched
// capture, a capture Stripe booked for 100.50 and the ledger for 100.00
// (payment pi_2), and a capture Stripe does not have; it returns the run
// and the mismatch's item id.
func (b *testBundle) seedExceptions(t *testing.T) (run, mismatch int64) {
	t.Helper()
	ctx := context.Background()
	at := time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)
	_, err := b.pool.Exec(ctx, `INSERT INTO payments (id, provider, status, currency, amount, amount_captured)
		VALUES ('pi_1', 'stripe', 'succeeded', 'usd', 40, 40), ('pi_2', 'stripe', 'succeeded', 'usd', 100, 100),
		       ('pi_3', 'stripe', 'succeeded', 'usd', 15, 15)`)
	require.NoError(t, err)
	b.post(t,
		ledger.NewCapture("stripe:charge:ch_1:capture", "pi_1", "evt_1", "usd", decimal.RequireFromString("40.00"), at),
		ledger.NewCapture("stripe:charge:ch_2:capture", "pi_2", "evt_2", "usd", decimal.RequireFromString("100.00"), at),
		ledger.NewCapture("stripe:charge:ch_3:capture", "pi_3", "evt_3", "usd", decimal.RequireFromString("15.00"), at))
	run = b.seedRunOf(t, 3, `INSERT INTO reconciliation_items
			(run_id, position, status, provider_txn_id, source_id, ref, type, reporting_category, currency, ledger_currency,
			 provider_amount, provider_fee, ledger_amount, payment_id)
		SELECT $1, v.pos, v.status, v.txn, v.src, v.ref, v.typ, 'charge', 'usd', 'usd', v.pamt, v.pfee, v.lamt, v.pay
		FROM (VALUES (0, 'matched', 'txn_1', 'ch_1', 'stripe:charge:ch_1:capture', 'charge', 40.00, 1.46, 40.00, 'pi_1'),
		             (1, 'amount_mismatch', 'txn_2', 'ch_2', 'stripe:charge:ch_2:capture', 'charge', 100.50, 3.20, 100.00, 'pi_2'),
		             (2, 'missing_at_provider', NULL, NULL, 'stripe:charge:ch_3:capture', 'capture', NULL, NULL, 15.00, 'pi_3'))
		     AS v(pos, status, txn, src, ref, typ, pamt, pfee, lamt, pay)
		WHERE $2 = 3`,
		`jsonb_build_object('matched', $2::int - 2, 'amount_mismatch', 1, 'missing_at_provider', 1, 'currency_mismatch', 0,
			'missing_in_ledger', 0, 'fee_posted', 0)`)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM reconciliation_items WHERE run_id = $1 AND position = 1`, run).Scan(&mismatch))
	return run, mismatch
}

func signOut(t *testing.T, ctx context.Context) {
	t.Helper()
	run(t, ctx, chromedp.Click(chromedp.CSS("form.who button")), chromedp.WaitVisible(chromedp.CSS("#token")))
}

// TestResolveAnExceptionInBrowser: finance filters a run to its open
// exceptions, follows one to its payment and the payment's events, and
// writes it off with a note; the run shows it resolved, the ledger holds
// the write-off, and ops find the resolution, note and all, in the audit
// log, which leads back to the item.
func TestResolveAnExceptionInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, mismatch := b.seedExceptions(t)
	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, financeTok)
	runPage := fmt.Sprintf("%s/console/reconciliation/runs/%d", b.srv.URL, id)
	row := fmt.Sprintf("#item-%d", mismatch)
	states := func() []string {
		return eval[[]string](t, ctx, `[...document.querySelectorAll('#items tr.item-row')].map(r => r.dataset.status + ':' + r.dataset.state)`)
	}

	run(t, ctx, chromedp.Navigate(runPage), chromedp.WaitVisible(chromedp.CSS("#items")))
	require.Equal(t, []string{"matched:", "amount_mismatch:open", "missing_at_provider:open"}, states())
	require.Equal(t, "2 open", textOf(t, ctx, "#filter-open"))
	run(t, ctx, chromedp.Click(chromedp.CSS("#filter-open")), chromedp.WaitVisible(chromedp.CSS("#items-all")))
	require.Equal(t, []string{"amount_mismatch:open", "missing_at_provider:open"}, states(), "the open exceptions only")

	// The item leads to its payment, read-only for finance, and to the
	// payment's events.
	require.Equal(t, "/console/payments?id=pi_2#history", eval[string](t, ctx,
		`document.querySelector('`+row+` a.events-link').getAttribute('href')`))
	run(t, ctx, chromedp.Click(chromedp.CSS(row+" a.payment-link")), chromedp.WaitVisible(chromedp.CSS("#payment-status")))
	require.Contains(t, textOf(t, ctx, "h1"), "pi_2")
	require.Equal(t, 1, eval[int](t, ctx, `document.querySelectorAll('#history').length`))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('#refund-form').length`))
	run(t, ctx, chromedp.Navigate(runPage+"?state=open"), chromedp.WaitVisible(chromedp.CSS(row)))

	// Resolve it: a write-off, with a note.
	const note = "Stripe booked 0.50 more; written off per FIN-7"
	form := fmt.Sprintf("#resolve-%d", mismatch)
	run(t, ctx,
		chromedp.Click(chromedp.CSS(row+" details.resolve summary")),
		chromedp.WaitVisible(chromedp.CSS(form+" .resolve-note")),
		chromedp.SetValue(chromedp.CSS(form+" .resolve-resolution"), "write_off"),
		chromedp.SendKeys(chromedp.CSS(form+" .resolve-note"), note),
		chromedp.Click(chromedp.CSS(form+" .resolve-submit")),
		chromedp.WaitVisible(chromedp.CSS(".flash.ok")),
	)
	require.Contains(t, textOf(t, ctx, ".flash.ok"), "posted to the ledger as reconciliation:write_off:stripe:charge:ch_2:capture")
	require.Contains(t, eval[string](t, ctx, `location.search`), "state=open", "back on the page it was resolved from")
	require.Equal(t, []string{"missing_at_provider:open"}, states(), "no longer open")
	require.Equal(t, "1 open", textOf(t, ctx, "#filter-open"))
	run(t, ctx, chromedp.Click(chromedp.CSS("#filter-resolved")), chromedp.WaitVisible(chromedp.CSS(row)))
	resolved := textOf(t, ctx, row+" td.resolution")
	require.Contains(t, resolved, "write_off")
	require.Contains(t, resolved, note)
	require.Contains(t, resolved, "reconciliation:write_off:stripe:charge:ch_2:capture")
	require.Contains(t, b.apiGet(t, financeTok, "/v1/ledger/trial-balance"), `"account": "reconciliation_adjustments"`)

	// The other, from its own page, comes back there.
	var dropped int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT id FROM reconciliation_items WHERE run_id = $1 AND position = 2`, id).Scan(&dropped))
	other := fmt.Sprintf("#resolve-%d", dropped)
	run(t, ctx,
		chromedp.Navigate(fmt.Sprintf("%s/console/reconciliation/items/%d", b.srv.URL, dropped)),
		chromedp.WaitVisible(chromedp.CSS("#single-item")),
		chromedp.WaitVisible(chromedp.CSS(other+" .resolve-note")), // open on the item's own page
		chromedp.SetValue(chromedp.CSS(other+" .resolve-resolution"), "provider_error"),
		chromedp.SendKeys(chromedp.CSS(other+" .resolve-note"), "Stripe support case 4711"),
		chromedp.Click(chromedp.CSS(other+" .resolve-submit")),
		chromedp.WaitVisible(chromedp.CSS(".flash.ok")),
	)
	require.Equal(t, fmt.Sprintf("/console/reconciliation/items/%d", dropped), eval[string](t, ctx, `location.pathname`))
	require.Equal(t, []string{"missing_at_provider:resolved"}, states())
	require.Equal(t, "0 open", textOf(t, ctx, "#filter-open"))

	// Ops find it in the audit log, and follow it back to the item.
	signOut(t, ctx)
	signIn(t, ctx, b.srv.URL, opsTok)
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/audit"), chromedp.WaitVisible(chromedp.CSS("#audit")))
	entry := fmt.Sprintf(`tr.audit-row[data-action="reconciliation_resolve"][data-event="%d"]`, mismatch)
	audited := textOf(t, ctx, entry)
	require.Contains(t, audited, note)
	require.Contains(t, audited, "write_off of reconciliation item")
	require.Contains(t, audited, "token:", "the finance token's identity")
	run(t, ctx, chromedp.Click(chromedp.CSS(entry+" a.id")), chromedp.WaitVisible(chromedp.CSS("#single-item")))
	require.Equal(t, []string{"amount_mismatch:resolved"}, states())
	require.Contains(t, textOf(t, ctx, row+" td.resolution"), note)
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('form.resolve-form, tr.resolve-row').length`), "ops read, finance resolves")
	require.Equal(t, "/console/events?payment_id=pi_2", eval[string](t, ctx,
		`document.querySelector('`+row+` a.events-link').getAttribute('href')`), "ops search the payment's events")
}

// balancedJournals parses a generic journal export and checks that each
// journal's debits equal its credits; it returns the journals' count. An
// export by transaction names each transaction's order (reference).
func balancedJournals(t *testing.T, body []byte, byTransaction bool) int {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
	require.NoError(t, err)
	header := []string{"date", "journal", "account", "account_code", "currency", "debit", "credit", "description"}
	if byTransaction {
		header = append(header, "reference")
	}
	require.Equal(t, header, rows[0])
	debits, credits := map[string]decimal.Decimal{}, map[string]decimal.Decimal{}
	for _, r := range rows[1:] {
		for _, side := range []struct {
			cell string
			sum  map[string]decimal.Decimal
		}{{r[5], debits}, {r[6], credits}} {
			if side.cell == "" {
				continue
			}
			d, err := decimal.NewFromString(side.cell)
			require.NoError(t, err, side.cell)
			side.sum[r[1]] = side.sum[r[1]].Add(d)
		}
	}
	require.NotEmpty(t, debits)
	for j, d := range debits {
		require.True(t, d.Equal(credits[j]), "journal %s: debits %s, credits %s", j, d, credits[j])
	}
	require.Len(t, credits, len(debits))
	return len(debits)
}

// TestCloseAMonthInBrowser: finance reads the trial balance as of the end
// of a day, closes a month after its confirmation, and downloads the
// month's frozen journal export (a CSV of balanced journals, the bytes the
// API serves) and a range's; ops read the books without any of it.
func TestCloseAMonthInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	oct := func(day int) time.Time { return time.Date(2026, 10, day, 9, 0, 0, 0, time.UTC) }
	b.post(t,
		ledger.NewCapture("stripe:charge:ch_a:capture", "pi_a", "evt_a", "usd", decimal.RequireFromString("1299.00"), oct(5)),
		ledger.NewFee("stripe:fee:txn_a", "pi_a", "evt_a", "usd", decimal.RequireFromString("37.97"), oct(5)),
		ledger.NewCapture("stripe:charge:ch_b:capture", "pi_b", "evt_b", "eur", decimal.RequireFromString("45.00"), oct(20)),
		ledger.NewCapture("stripe:charge:ch_c:capture", "pi_c", "evt_c", "usd", decimal.RequireFromString("10.00"), time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)))
	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, financeTok)

	// As of the end of 5 October: the first payment and its fee only.
	run(t, ctx,
		chromedp.Navigate(b.srv.URL+"/console/books"),
		chromedp.WaitVisible(chromedp.CSS("#as-of-date")),
		chromedp.SetValue(chromedp.CSS("#as-of-date"), "2026-10-05"),
		chromedp.Click(chromedp.CSS("#as-of button")),
		chromedp.WaitVisible(chromedp.CSS("#as-of-instant")),
	)
	require.Equal(t, "2026-10-05 23:59:59 UTC", textOf(t, ctx, "#as-of-instant"))
	require.Equal(t, []string{"usd $1,336.97 $1,336.97 balanced"}, eval[[]string](t, ctx,
		`[...document.querySelectorAll('#trial-balance tbody tr')].map(r => [...r.cells].map(c => c.textContent.trim()).join(' '))`),
		"amounts as people read them")
	require.Equal(t, "-$1,299.00", textOf(t, ctx, `#accounts tr[data-account="sales"][data-currency="usd"] td:last-child`))

	// October is the month to close; closing asks first.
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/books"), chromedp.WaitVisible(chromedp.CSS("#periods")))
	require.Equal(t, []string{"2026-12:open", "2026-11:open", "2026-10:open"}, eval[[]string](t, ctx,
		`[...document.querySelectorAll('#periods tr.period-row')].map(r => r.dataset.period + ':' + r.dataset.status)`))
	require.Equal(t, []string{"close-2026-10"}, eval[[]string](t, ctx, `[...document.querySelectorAll('a.close-period')].map(a => a.id)`),
		"only the month that has ended and is next")
	run(t, ctx, chromedp.Click(chromedp.CSS("#close-2026-10")), chromedp.WaitVisible(chromedp.CSS("#close-confirm")))
	require.Contains(t, textOf(t, ctx, "#close-trial-balance"), "€45.00")
	require.Contains(t, b.apiGet(t, financeTok, "/v1/ledger/periods/2026-10"), `"status": "open"`, "asking is not closing")
	run(t, ctx, chromedp.Click(chromedp.CSS("#close-confirm-button")), chromedp.WaitVisible(chromedp.CSS(".flash.ok")))
	require.Contains(t, textOf(t, ctx, ".flash.ok"), "2026-10 is closed")
	require.Equal(t, "closed", eval[string](t, ctx, `document.querySelector('#period-2026-10').dataset.status`))
	require.Contains(t, b.apiGet(t, financeTok, "/v1/ledger/periods/2026-10"), `"status": "closed"`)
	require.Equal(t, []string{"close-2026-11"}, eval[[]string](t, ctx, `[...document.querySelectorAll('a.close-period')].map(a => a.id)`))

	// Its export, frozen: balanced journals, the bytes the API serves.
	download := downloader(t, ctx)
	export := download(`#period-2026-10 a.export[data-format="generic"]`, "paygate-journal-2026-10-generic.csv")
	require.Equal(t, 2, balancedJournals(t, export, false), "one journal per day and currency: 5 Oct usd, 20 Oct eur")
	require.Contains(t, string(export), "2026-10-05,")
	require.NotContains(t, string(export), "2026-11-03", "November is not October's")
	require.Equal(t, b.apiGet(t, financeTok, "/v1/ledger/periods/2026-10/journal.csv"), string(export))
	xero := download(`#period-2026-10 a.export[data-format="xero"]`, "paygate-journal-2026-10-xero.csv")
	require.True(t, strings.HasPrefix(string(xero), "Narration,Date,Description,AccountCode,TaxRate,Amount\n"), string(xero))

	// A range of days, as it stands.
	run(t, ctx,
		chromedp.SetValue(chromedp.CSS("#journal-from"), "2026-10-01"),
		chromedp.SetValue(chromedp.CSS("#journal-to"), "2026-11-30"),
		chromedp.SetValue(chromedp.CSS("#journal-granularity"), "transaction"),
	)
	ranged := download("#journal-range button", "paygate-journal-2026-10-01-2026-11-30-generic-transaction.csv")
	require.Equal(t, 4, balancedJournals(t, ranged, true), "one journal per transaction")

	// The confirmation is the server's, not the page's: a close posted
	// without it is sent to the confirmation.
	c := client(t)
	require.Equal(t, http.StatusSeeOther, postForm(t, c, b.srv.URL+"/console/signin", url.Values{"token": {financeTok}}).StatusCode)
	page := getPage(t, c, b.srv.URL+"/console/books/periods/2026-11/close")
	csrfToken := regexp.MustCompile(`name="csrf" value="([^"]*)"`).FindStringSubmatch(page)[1]
	resp := postForm(t, c, b.srv.URL+"/console/books/periods/2026-11/close", url.Values{"csrf": {csrfToken}, "idempotency_key": {"k"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/books/periods/2026-11/close", resp.Header.Get("Location"))
	require.Contains(t, b.apiGet(t, financeTok, "/v1/ledger/periods/2026-11"), `"status": "open"`)

	// Ops read the books, and neither close nor export.
	signOut(t, ctx)
	signIn(t, ctx, b.srv.URL, opsTok)
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/books"), chromedp.WaitVisible(chromedp.CSS("#periods")))
	require.Equal(t, "closed", eval[string](t, ctx, `document.querySelector('#period-2026-10').dataset.status`))
	require.Zero(t, eval[int](t, ctx, `document.querySelectorAll('a.close-period, a.export, #journal-range').length`))
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/books/periods/2026-10/journal.csv"))
	require.Contains(t, textOf(t, ctx, "#refused"), "not available to your role")
}
