package console_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/ledger"
)

// TestBooksImportCheck: before importing into Xero or QuickBooks, finance
// asks the Books page about a range of days or a closed month; it says
// how many movements the exports leave out (not yet settled into the
// books currency), in which currencies, and which (at most 50 of them,
// each with its payment's page and order reference, the others in the
// generic export), and offers each part of the Xero export, whose
// downloads are the API's parts; ops see no check.
func TestBooksImportCheck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := decimal.RequireFromString
	at := func(day, s int) time.Time { return time.Date(2026, 10, day, 9, 0, s, 0, time.UTC) }
	var txs []ledger.Transaction
	for i := range 160 {
		txs = append(txs, ledger.NewCapture(fmt.Sprintf("stripe:charge:ch_%d:capture", i), fmt.Sprintf("pi_%d", i), "evt", "usd", d("2.00"), at(5, i)))
	}
	txs = append(txs,
		ledger.NewCapture("stripe:charge:ch_eur:capture", "pi_eur", "evt", "eur", d("45.00"), at(6, 0)),
		ledger.NewCapture("stripe:charge:ch_gbp:capture", "pi_gbp", "evt", "gbp", d("129.00"), at(7, 0)),
		ledger.NewCapture("stripe:charge:ch_jpy:capture", "pi_jpy", "evt", "jpy", d("500"), at(7, 1)),
		ledger.NewCapture("stripe:charge:ch_gbp2:capture", "pi_gbp2", "evt", "gbp", d("34.00"), at(8, 0)))
	legs := ledger.NewSettlement(func(c string) string { return "stripe:fx:txn_eur:" + c }, "pi_eur", "evt",
		ledger.Money{Amount: d("45.00"), Currency: "eur"}, ledger.Money{Amount: d("48.83"), Currency: "usd"}, d("1.085"), at(6, 0))
	// November: more movements left out than the page lists.
	for i := range 53 {
		txs = append(txs, ledger.NewCapture(fmt.Sprintf("stripe:charge:ch_n%d:capture", i), fmt.Sprintf("pi_n%d", i), "evt", "jpy",
			d("800"), time.Date(2026, 11, 2, 9, 0, i, 0, time.UTC)))
	}
	b.post(t, append(txs, legs[:]...)...)
	worldtest.LearnReference(t, b.pool, "pi_gbp", "ord-7001")

	c := client(t)
	require.Equal(t, http.StatusSeeOther, postForm(t, c, b.srv.URL+"/console/signin", url.Values{"token": {financeTok}}).StatusCode)
	page := getPage(t, c, b.srv.URL+"/console/books")
	require.Contains(t, page, `id="import-range"`)
	require.NotContains(t, page, `id="import-check"`, "nothing is checked until finance asks")

	page = getPage(t, c, b.srv.URL+"/console/books?import_from=2026-10-01&import_to=2026-10-31&import_granularity=transaction")
	require.Contains(t, page, `id="import-unconverted" data-count="3"`, "the captures in pounds and yen")
	require.Equal(t, map[string]string{"gbp": "2", "jpy": "1"}, attrPairs(page, `<li data-currency="([a-z]+)" data-count="([0-9]+)"`))
	require.Equal(t, []string{"gbp", "jpy", "gbp"}, unconvertedRows(page), "each movement left out, in posting order")
	require.NotContains(t, page, `id="import-more"`, "all of them listed")
	require.Contains(t, page, `id="import-xero" data-parts="2"`, "161 journals of two lines")
	parts := regexp.MustCompile(`<a href="([^"]+)" class="xero-part" data-part="([0-9]+)"`).FindAllStringSubmatch(page, -1)
	require.Len(t, parts, 2)
	var lines []string
	for i, p := range parts {
		require.Equal(t, fmt.Sprint(i+1), p[2])
		resp, body := download(t, c, b.srv.URL+html.UnescapeString(p[1]))
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, "2", resp.Header.Get(api.HeaderParts))
		require.Equal(t, "3", resp.Header.Get(api.HeaderUnconvertedMovements))
		require.Equal(t, b.apiGet(t, financeTok, "/v1/ledger/journal.csv?from=2026-10-01&to=2026-10-31&granularity=transaction&format=xero&part="+p[2]), body,
			"part %s is the API's", p[2])
		rows := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
		require.Equal(t, "Narration,Date,Description,AccountCode,TaxRate,Amount", rows[0])
		require.LessOrEqual(t, len(rows)-1, 300)
		lines = append(lines, rows[1:]...)
	}
	require.Len(t, lines, 322, "the parts hold every journal")
	require.Contains(t, strings.Join(lines, "\n"), "eur 45.00 at 1.085")
	qb := regexp.MustCompile(`<a href="([^"]+)" id="import-quickbooks"`).FindStringSubmatch(page)
	require.NotNil(t, qb)
	resp, body := download(t, c, b.srv.URL+html.UnescapeString(qb[1]))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(body, "Journal No,Journal Date,Account Name,Debits,Credits,Description\n"))
	gbp := regexp.MustCompile(`<li data-currency="gbp"[^>]*>.*?<a href="([^"]+)"`).FindStringSubmatch(page)
	require.NotNil(t, gbp)
	_, body = download(t, c, b.srv.URL+html.UnescapeString(gbp[1]))
	require.Contains(t, body, "capture stripe:charge:ch_gbp:capture payment pi_gbp", "the movements in pounds, as they are")
	require.NotContains(t, body, "usd")

	// A closed month: its frozen parts.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/ledger/periods/2026-10/close", nil)
	req.Header.Set("Authorization", "Bearer "+financeTok)
	req.Header.Set(api.HeaderIdempotencyKey, "close-october")
	b.echo.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	page = getPage(t, c, b.srv.URL+"/console/books")
	require.Contains(t, page, `href="/console/books?import_period=2026-10#import-check"`)
	page = getPage(t, c, b.srv.URL+"/console/books?import_period=2026-10")
	require.Contains(t, page, `data-period="2026-10"`)
	require.Contains(t, page, `id="import-unconverted" data-count="3"`)
	require.Contains(t, page, `id="import-xero" data-parts="1"`, "by day, October is one part")
	require.Equal(t, []string{"gbp", "jpy", "gbp"}, unconvertedRows(page))
	part := regexp.MustCompile(`<a href="([^"]+)" class="xero-part" data-part="1"`).FindStringSubmatch(page)
	require.NotNil(t, part)
	require.Contains(t, html.UnescapeString(part[1]), "/console/books/periods/2026-10/journal.csv?")
	resp, body = download(t, c, b.srv.URL+html.UnescapeString(part[1]))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.NotEmpty(t, resp.Header.Get("Repr-Digest"))
	require.Equal(t, b.apiGet(t, financeTok, "/v1/ledger/periods/2026-10/journal.csv?format=xero"), body)

	page = getPage(t, c, b.srv.URL+"/console/books?import_period=2026-13")
	require.Contains(t, page, `id="import-error"`)

	// In the browser: the rows as people read them, each payment a link to
	// its page; a month of 53 left out lists 50 and says where the others
	// are.
	ctx := startBrowser(t)
	signIn(t, ctx, b.srv.URL, financeTok)
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/books?import_from=2026-10-01&import_to=2026-10-31#import-check"),
		chromedp.WaitVisible(chromedp.CSS("#import-movements")))
	const cells = `[...document.querySelectorAll('#import-movements tbody tr')].map(r => [...r.cells].map(c => c.innerText.trim().replace(/\s+/g, ' ')).join(' | '))`
	require.Equal(t, []string{
		"2026-10-07 09:00:00 UTC | capture | gbp | £129.00 | pi_gbp ord-7001",
		"2026-10-07 09:00:01 UTC | capture | jpy | ¥500 | pi_jpy",
		"2026-10-08 09:00:00 UTC | capture | gbp | £34.00 | pi_gbp2",
	}, eval[[]string](t, ctx, cells))
	run(t, ctx, chromedp.Click(chromedp.CSS("#import-movements tbody tr:first-child a.unconverted-payment")),
		chromedp.WaitVisible(chromedp.CSS("#payment-reference")))
	require.Contains(t, textOf(t, ctx, "#payment-reference"), "ord-7001", "the payment's page")
	run(t, ctx, chromedp.Navigate(b.srv.URL+"/console/books?import_from=2026-11-01&import_to=2026-11-30#import-check"),
		chromedp.WaitVisible(chromedp.CSS("#import-movements")))
	require.Equal(t, "53", eval[string](t, ctx, `document.querySelector('#import-unconverted').dataset.count`))
	rows := eval[[]string](t, ctx, cells)
	require.Len(t, rows, 50)
	require.Equal(t, "2026-11-02 09:00:00 UTC | capture | jpy | ¥800 | pi_n0", rows[0])
	require.Equal(t, "2026-11-02 09:00:49 UTC | capture | jpy | ¥800 | pi_n49", rows[49])
	require.Equal(t, "3", eval[string](t, ctx, `document.querySelector('#import-more')?.dataset.count ?? 'none'`), "the others counted")
	require.Contains(t, textOf(t, ctx, "#import-more"), "and 3 more")
	require.Contains(t, textOf(t, ctx, "#import-more"), "GET /v1/ledger/unconverted?from=2026-11-01&to=2026-11-30")
	more := eval[string](t, ctx, `document.querySelector('#import-more a').getAttribute('href')`)
	_, body = download(t, c, b.srv.URL+more)
	require.Contains(t, body, "capture stripe:charge:ch_n52:capture payment pi_n52", "the others are in the generic export")

	// Ops read the books, and check no export.
	ops := client(t)
	require.Equal(t, http.StatusSeeOther, postForm(t, ops, b.srv.URL+"/console/signin", url.Values{"token": {opsTok}}).StatusCode)
	page = getPage(t, ops, b.srv.URL+"/console/books?import_from=2026-10-01&import_to=2026-10-31")
	require.NotContains(t, page, `id="import-check"`)
	require.NotContains(t, page, `id="import-range"`)
}

// unconvertedRows are the currencies of the rows of the movements left
// out on a Books page.
func unconvertedRows(page string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<tr class="unconverted-row" data-id="[0-9]+" data-currency="([a-z]+)">`).FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}

// attrPairs maps the first group of each match of pattern in page to its
// second.
func attrPairs(page, pattern string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(page, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func download(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}
