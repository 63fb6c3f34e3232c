package api_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/ledger"
)

// TestJournalExportHeadersAndParts: Xero's and QuickBooks' exports are in
// the books currency (usd unless configured), the movements left out
// counted in Paygate-Unconverted-Movements; a Xero export is answered a
// part at a time (?part=, the first without it), Paygate-Parts saying how
// many, the file named after its part; a part past the last is 404 and a
// part that is no number 400; a closed month's parts are frozen, digest
// and all.
func TestJournalExportHeadersAndParts(t *testing.T) {
	t.Parallel()
	b := booksBundle(t)
	d := decimal.RequireFromString
	// February: 199 more captures in dollars (with the two of
	// booksBundle, 402 lines by transaction), one in euros settled into
	// dollars at 1.085, and one in pounds not settled.
	for i := range 199 {
		b.post(t, ledger.NewCapture(fmt.Sprintf("stripe:capture:ch_x%d", i), fmt.Sprintf("pi_x%d", i), "evt", "usd", d("1.00"),
			time.Date(2026, 2, 4, 9, 0, i, 0, time.UTC)))
	}
	b.post(t, ledger.NewCapture("stripe:capture:ch_eur", "pi_eur", "evt", "eur", d("45.00"), time.Date(2026, 2, 5, 9, 0, 0, 0, time.UTC)))
	for _, leg := range ledger.NewSettlement(func(c string) string { return "stripe:fx:txn_eur:" + c }, "pi_eur", "evt",
		ledger.Money{Amount: d("45.00"), Currency: "eur"}, ledger.Money{Amount: d("48.83"), Currency: "usd"}, d("1.085"),
		time.Date(2026, 2, 5, 9, 0, 0, 0, time.UTC)) {
		b.post(t, leg)
	}
	b.post(t, ledger.NewCapture("stripe:capture:ch_gbp", "pi_gbp", "evt", "gbp", d("129.00"), time.Date(2026, 2, 6, 9, 0, 0, 0, time.UTC)))

	get := func(path string) (*http.Response, string) {
		t.Helper()
		rec := b.do(t, http.MethodGet, path, financeTok, "", "")
		return rec.Result(), rec.Body.String()
	}
	const feb = "/v1/ledger/journal.csv?from=2026-02-01&to=2026-02-28"

	res, body := get(feb + "&format=xero&granularity=transaction")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Equal(t, "2", res.Header.Get(api.HeaderParts))
	require.Equal(t, "1", res.Header.Get(api.HeaderUnconvertedMovements), "the capture in pounds")
	require.Contains(t, res.Header.Get("Content-Disposition"), `filename="paygate-journal-2026-02-01-2026-02-28-xero-transaction-part-1-of-2.csv"`)
	require.Equal(t, 301, strings.Count(body, "\n"), "the header and 150 journals of two lines")
	_, first := get(feb + "&format=xero&granularity=transaction&part=1")
	require.Equal(t, body, first, "without part, the first")
	res, second := get(feb + "&format=xero&granularity=transaction&part=2")
	require.Equal(t, http.StatusOK, res.StatusCode, second)
	require.Equal(t, "2", res.Header.Get(api.HeaderParts))
	require.Contains(t, res.Header.Get("Content-Disposition"), "part-2-of-2.csv")
	require.Equal(t, 105, strings.Count(second, "\n"), "the header and the other 52 journals, the one in euros among them")
	require.Contains(t, second, "capture stripe:capture:ch_eur payment pi_eur · eur 45.00 at 1.085,05 Feb 2026,sales,4000,Tax Exempt,-48.83\n")
	require.NotContains(t, first+second, "129.00")
	require.NotContains(t, first+second, "stripe:fx:", "conversions are not exported")

	res, body = get(feb + "&format=xero&granularity=transaction&part=3")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	require.Contains(t, body, "the export has 2 part(s) (Paygate-Parts): part 3 is not one of them")
	for _, bad := range []string{"0", "-1", "two", "01", "1.5"} {
		res, body = get(feb + "&format=xero&part=" + bad)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, bad)
		require.Contains(t, body, "part must be a whole number from 1", bad)
	}

	res, body = get(feb + "&format=quickbooks&granularity=transaction")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Equal(t, "1", res.Header.Get(api.HeaderParts), "QuickBooks takes the whole file")
	require.Equal(t, "1", res.Header.Get(api.HeaderUnconvertedMovements))
	require.Contains(t, body, "1200,48.83,,capture stripe:capture:ch_eur payment pi_eur · eur 45.00 at 1.085\n")
	res, _ = get(feb + "&format=quickbooks&part=2")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	res, body = get(feb + "&format=quickbooks&currency=gbp")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "1", res.Header.Get(api.HeaderUnconvertedMovements), "only the pounds: the one left out")
	require.Equal(t, "Journal No,Journal Date,Account Name,Debits,Credits,Description\n", body)
	res, body = get(feb)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "0", res.Header.Get(api.HeaderUnconvertedMovements), "the generic format has every currency")
	require.Equal(t, "1", res.Header.Get(api.HeaderParts))
	require.Contains(t, body, "gbp,,129.00,")

	// A closed month: each part frozen, with its own digest.
	rec := b.do(t, http.MethodPost, "/v1/ledger/periods/2026-02/close", financeTok, "close-feb-parts", "")
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	const closed = "/v1/ledger/periods/2026-02/journal.csv"
	parts := map[string]string{}
	for _, query := range []string{"?format=xero", "?format=xero&part=1", "?format=quickbooks"} {
		res, body := get(closed + query)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		sum := sha256.Sum256([]byte(body))
		require.Equal(t, "sha-256=:"+base64.StdEncoding.EncodeToString(sum[:])+":", res.Header.Get("Repr-Digest"), query)
		require.Equal(t, len(body), atoi(t, res.Header.Get("Content-Length")), query)
		require.Equal(t, "1", res.Header.Get(api.HeaderUnconvertedMovements), query)
		parts[query] = body
	}
	res, _ = get(closed + "?format=xero")
	require.Equal(t, "1", res.Header.Get(api.HeaderParts), "by day, February is one part")
	res, body = get(closed + "?format=xero&part=2")
	require.Equal(t, http.StatusNotFound, res.StatusCode, body)
	require.Empty(t, res.Header.Get("Repr-Digest"))
	require.Contains(t, parts["?format=quickbooks"], "PG-20260205-USD,02/05/2026,4000,,48.83,paygate usd 2026-02-05\n")

	// The pounds settled after the close: February's parts are the same
	// bytes, the capture goes with March.
	for _, leg := range ledger.NewSettlement(func(c string) string { return "stripe:fx:txn_gbp:" + c }, "pi_gbp", "evt",
		ledger.Money{Amount: d("129.00"), Currency: "gbp"}, ledger.Money{Amount: d("163.83"), Currency: "usd"}, d("1.27"),
		time.Date(2026, 2, 7, 9, 0, 0, 0, time.UTC)) {
		b.post(t, leg)
	}
	for query, want := range parts {
		res, body := get(closed + query)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		require.Equal(t, want, body, query)
	}
	_, body = get("/v1/ledger/journal.csv?from=2026-03-01&to=2026-03-31&format=quickbooks")
	require.Contains(t, body, "PG-20260301-USD,03/01/2026,4000,,163.83,paygate usd 2026-03-01\n")
}

// TestUnconvertedMovementsList: GET /v1/ledger/unconverted lists the
// movements the Xero and QuickBooks exports of the same days leave out,
// as many as their Paygate-Unconverted-Movements counts, with their
// payment and its order reference, in posting order and in pages; one
// currency lists its own; finance only; bad days, currency or cursor are
// 400.
func TestUnconvertedMovementsList(t *testing.T) {
	t.Parallel()
	b := booksBundle(t)
	d := decimal.RequireFromString
	at := func(day, hour int) time.Time { return time.Date(2026, 2, day, hour, 0, 0, 0, time.UTC) }
	b.post(t, ledger.NewCapture("stripe:capture:ch_gbp", "pi_gbp", "evt", "gbp", d("129.00"), at(6, 9)))
	b.post(t, ledger.NewRefund("stripe:refund:re_gbp", "pi_gbp", "evt", "gbp", d("29.00"), at(8, 9)))
	b.post(t, ledger.NewCapture("stripe:capture:ch_eur", "pi_eur", "evt", "eur", d("45.00"), at(5, 9)))
	for _, leg := range ledger.NewSettlement(func(c string) string { return "stripe:fx:txn_eur:" + c }, "pi_eur", "evt",
		ledger.Money{Amount: d("45.00"), Currency: "eur"}, ledger.Money{Amount: d("48.83"), Currency: "usd"}, d("1.085"), at(5, 9)) {
		b.post(t, leg)
	}
	b.post(t, ledger.NewPayout("stripe:payout:po_eur", "evt", "eur", d("300.00"), at(7, 9)))
	worldtest.LearnReference(t, b.pool, "pi_gbp", "ord-1042")

	list := func(query string) api.UnconvertedPage {
		t.Helper()
		rec := b.do(t, http.MethodGet, "/v1/ledger/unconverted?"+query, financeTok, "", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var page api.UnconvertedPage
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &page))
		return page
	}
	counted := func(query string) int {
		t.Helper()
		rec := b.do(t, http.MethodGet, "/v1/ledger/journal.csv?format=quickbooks&"+query, financeTok, "", "")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		return atoi(t, rec.Header().Get(api.HeaderUnconvertedMovements))
	}
	const feb = "from=2026-02-01&to=2026-02-28"
	page := list(feb)
	require.Equal(t, "usd", page.BooksCurrency)
	require.Nil(t, page.NextCursor)
	require.Len(t, page.Movements, counted(feb), "the movements the exports count")
	var rows []string
	for _, m := range page.Movements {
		rows = append(rows, fmt.Sprintf("%s %s %s %s %s %s %s", m.PostedAt.Format(time.RFC3339), m.Ref, m.Kind, m.Currency, m.Amount,
			orDash(m.PaymentID), orDash(m.Reference)))
	}
	require.Equal(t, []string{
		"2026-02-06T09:00:00Z stripe:capture:ch_gbp capture gbp 129.00 pi_gbp ord-1042",
		"2026-02-07T09:00:00Z stripe:payout:po_eur payout eur 300.00 - -",
		"2026-02-08T09:00:00Z stripe:refund:re_gbp refund gbp 29.00 pi_gbp ord-1042",
	}, rows, "the euros settled into dollars are exported, not listed")

	var paged []api.UnconvertedMovementView
	cursor := ""
	for range 4 {
		p := list(feb + "&limit=1" + cursor)
		paged = append(paged, p.Movements...)
		if p.NextCursor == nil {
			break
		}
		cursor = "&cursor=" + *p.NextCursor
	}
	require.Equal(t, page.Movements, paged, "a page at a time")

	for _, q := range []string{feb + "&currency=eur", "from=2026-02-06&to=2026-02-06", "from=2026-03-01&to=2026-03-31"} {
		require.Len(t, list(q).Movements, counted(q), q)
	}
	require.Len(t, list(feb+"&currency=eur").Movements, 1)

	rec := b.do(t, http.MethodGet, "/v1/ledger/unconverted?"+feb, opsTok, "", "")
	require.Equal(t, http.StatusForbidden, rec.Code, "finance's, as the exports")
	for query, detail := range map[string]string{
		"to=2026-02-28":                  "from is required",
		"from=2026-02-28&to=2026-02-01":  "is before from",
		"from=2026-02-01&to=2026-02-31":  "to must be a UTC day",
		feb + "&currency=GBP":            "currency must be a lowercase ISO 4217 code",
		feb + "&cursor=bm90LWEtY3Vyc29y": "cursor is not one this API handed out",
		feb + "&limit=0":                 "limit must be a whole number",
	} {
		rec := b.do(t, http.MethodGet, "/v1/ledger/unconverted?"+query, financeTok, "", "")
		require.Equal(t, http.StatusBadRequest, rec.Code, query)
		require.Contains(t, rec.Body.String(), detail, query)
	}
}

// orDash shows a nullable string, "-" for null.
func orDash(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
