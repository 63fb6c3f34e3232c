package console

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/ledger"
)

// booksData is the Books page: the trial balance at an instant, the
// periods, and (for finance) their closes and journal exports.
type booksData struct {
	// AsOfDate is the date picker's value; AsOfErr why the instant asked
	// for was not used (the balance then shows the whole ledger).
	AsOfDate     string
	AsOfErr      string
	TrialBalance api.TrialBalanceView
	Periods      []periodRow
	PeriodsErr   string
	// From and To are the range export's defaults: the current month so
	// far.
	From, To      string
	Formats       []ledger.JournalFormat
	Granularities []ledger.JournalGranularity
	// Import is the check of a range or a closed month before it is
	// imported into Xero or QuickBooks; nil until finance asks for one.
	Import *importCheck
}

// importCheck is what the Books page says of an export before finance
// imports it into Xero or QuickBooks: both are in the books currency, so
// the movements not yet settled into it are left out (how many, in which
// currencies), and Xero takes a file of at most 300 lines, so its export
// comes in parts (each offered for download).
type importCheck struct {
	// Period is the closed month checked ("" for a range of days); From
	// and To its days, or the range's.
	Period      string
	From, To    string
	Granularity ledger.JournalGranularity
	Err         string
	// Parts links each part of the Xero export; QuickBooks the whole
	// QuickBooks export.
	Parts      []importPart
	QuickBooks template.URL
	// Unconverted counts the movements left out; ByCurrency names their
	// currencies, each with the generic export of its movements as they
	// are, in which finance finds them.
	Unconverted int
	ByCurrency  []unconvertedCurrency
	// Movements are the first of them (at most unconvertedShown), More
	// how many others the count has, and Everything the generic export of
	// the days by transaction, which holds them all; MovementsErr why
	// they could not be listed.
	Movements    []api.UnconvertedMovementView
	More         int
	Everything   template.URL
	MovementsErr string
}

// unconvertedShown is the most movements left out the Books page lists: a
// month may leave thousands out, which the API lists a page at a time.
const unconvertedShown = 50

type importPart struct {
	N   int
	URL template.URL
}

type unconvertedCurrency struct {
	Currency string
	Count    int
	Generic  template.URL
}

// checkImport reads, from the API's answers to the Xero and QuickBooks
// exports, how many parts the Xero export has and how many movements both
// leave out, then asks for each currency of the books how many of them
// are its own. Each answer's body is at most a Xero part (300 lines) or a
// QuickBooks export by day (a few lines a day), which the headers come
// with; the movements themselves the generic export lists.
func (c *Console) checkImport(ctx context.Context, token string, ic *importCheck, currencies []string) {
	var (
		path = "/v1/ledger/journal.csv"
		days = url.Values{"from": {ic.From}, "to": {ic.To}}
		q    = url.Values{"format": {string(ledger.JournalXero)}, "part": {"1"}}
		link = basePath + "/books/journal.csv"
	)
	if ic.Period != "" {
		path = apiPath("ledger", "periods", ic.Period, "journal.csv")
		link = basePath + "/books/periods/" + url.PathEscape(ic.Period) + "/journal.csv"
	} else {
		for k, v := range days {
			q[k] = v
		}
		q.Set("granularity", string(ic.Granularity))
	}
	a := c.call(ctx, token, http.MethodGet, path, q, nil, "")
	if !a.ok() {
		ic.Err = roleProblem(a)
		return
	}
	parts, err1 := strconv.Atoi(a.header.Get(api.HeaderParts))
	unconverted, err2 := strconv.Atoi(a.header.Get(api.HeaderUnconvertedMovements))
	if err1 != nil || err2 != nil || parts < 1 {
		ic.Err = "The API's answer did not say how many parts the export has and how many movements it leaves out."
		return
	}
	ic.Unconverted = unconverted
	for n := 1; n <= parts; n++ {
		pq := url.Values{}
		for k, v := range q {
			pq[k] = v
		}
		pq.Set("part", strconv.Itoa(n))
		ic.Parts = append(ic.Parts, importPart{N: n, URL: template.URL(link + "?" + pq.Encode())})
	}
	qb := url.Values{}
	for k, v := range q {
		qb[k] = v
	}
	qb.Set("format", string(ledger.JournalQuickBooks))
	qb.Del("part")
	ic.QuickBooks = template.URL(link + "?" + qb.Encode())
	if unconverted == 0 {
		return
	}
	c.listUnconverted(ctx, token, ic, days)
	// Which currencies: the range's export of each, by day.
	for _, cur := range currencies {
		cq := url.Values{"format": {string(ledger.JournalQuickBooks)}, "currency": {cur}}
		for k, v := range days {
			cq[k] = v
		}
		a := c.call(ctx, token, http.MethodGet, "/v1/ledger/journal.csv", cq, nil, "")
		n, err := strconv.Atoi(a.header.Get(api.HeaderUnconvertedMovements))
		if !a.ok() || err != nil || n == 0 {
			continue
		}
		gq := url.Values{"format": {string(ledger.JournalGeneric)}, "granularity": {string(ledger.JournalByTransaction)}, "currency": {cur}}
		for k, v := range days {
			gq[k] = v
		}
		ic.ByCurrency = append(ic.ByCurrency, unconvertedCurrency{Currency: cur, Count: n,
			Generic: template.URL(basePath + "/books/journal.csv?" + gq.Encode())})
	}
}

// listUnconverted lists the first movements the check's exports leave
// out, as the API lists them for the same days.
func (c *Console) listUnconverted(ctx context.Context, token string, ic *importCheck, days url.Values) {
	q := url.Values{"limit": {strconv.Itoa(unconvertedShown)}}
	gq := url.Values{"format": {string(ledger.JournalGeneric)}, "granularity": {string(ledger.JournalByTransaction)}}
	for k, v := range days {
		q[k], gq[k] = v, v
	}
	ic.Everything = template.URL(basePath + "/books/journal.csv?" + gq.Encode())
	a := c.call(ctx, token, http.MethodGet, "/v1/ledger/unconverted", q, nil, "")
	var page api.UnconvertedPage
	switch {
	case !a.ok():
		ic.MovementsErr = roleProblem(a)
		return
	case a.decode(&page) != nil:
		ic.MovementsErr = "The API's list of the movements left out could not be read."
		return
	}
	ic.Movements = page.Movements
	ic.More = max(ic.Unconverted-len(page.Movements), 0)
}

// importParam reads the check the Books page is asked for: a closed month
// (import_period) or a range of days (import_from, import_to,
// import_granularity). nil: none asked for.
func importParam(ec echo.Context) (*importCheck, error) {
	if p := strings.TrimSpace(ec.QueryParam("import_period")); p != "" {
		period, err := ledger.ParsePeriod(p)
		if err != nil {
			return nil, fmt.Errorf("%q is not a month such as 2026-03", p)
		}
		return &importCheck{Period: period.String(), From: period.Start.Format(time.DateOnly),
			To: lastInstant(period.End()).Format(time.DateOnly), Granularity: ledger.JournalByDay}, nil
	}
	from, to := strings.TrimSpace(ec.QueryParam("import_from")), strings.TrimSpace(ec.QueryParam("import_to"))
	if from == "" && to == "" {
		return nil, nil
	}
	g := ledger.JournalGranularity(strings.TrimSpace(ec.QueryParam("import_granularity")))
	if g == "" {
		g = ledger.JournalByDay
	}
	if !g.Valid() {
		return nil, fmt.Errorf("%q is not day or transaction", g)
	}
	return &importCheck{From: from, To: to, Granularity: g}, nil
}

// periodRow is a period as the Books page lists it.
type periodRow struct {
	api.PeriodView
	// AsOfEnd is the query of the trial balance at the period's last
	// instant; From and To its first and last days, for the export of an
	// open period as it stands.
	AsOfEnd  template.URL
	From, To string
}

// lastInstant is the last instant the API's times can hold before t (they
// are kept to the microsecond): a trial balance as of it holds everything
// posted before t.
func lastInstant(t time.Time) time.Time { return t.Add(-time.Microsecond) }

// asOfParam reads the instant the Books page is asked for: as_of_date, a
// day from the date picker, means the end of that day (UTC); as_of an
// instant (RFC 3339, or a datetime-local value read as UTC). nil: now.
func asOfParam(date, instant string) (*time.Time, error) {
	if date = strings.TrimSpace(date); date != "" {
		d, err := time.Parse(time.DateOnly, date)
		if err != nil {
			return nil, fmt.Errorf("%q is not a day such as 2026-03-31", date)
		}
		end := lastInstant(d.AddDate(0, 0, 1))
		return &end, nil
	}
	if instant = strings.TrimSpace(instant); instant == "" {
		return nil, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.Parse(layout, instant); err == nil {
			t = t.UTC()
			return &t, nil
		}
	}
	return nil, fmt.Errorf("%q is not an instant such as 2026-03-31T23:59:59Z", instant)
}

func (c *Console) books(ec echo.Context) error {
	ctx, cancel := readContext(ec)
	defer cancel()
	s := sessionIn(ec)
	now := time.Now().UTC()
	month := ledger.PeriodOf(now)
	d := booksData{From: month.Start.Format(time.DateOnly), To: now.Format(time.DateOnly),
		Formats: ledger.JournalFormats, Granularities: ledger.JournalGranularities}
	q := url.Values{}
	asOf, err := asOfParam(ec.QueryParam("as_of_date"), ec.QueryParam("as_of"))
	switch {
	case err != nil:
		d.AsOfErr = "As of: " + err.Error()
	case asOf != nil:
		q.Set("as_of", asOf.Format(time.RFC3339Nano))
		d.AsOfDate = asOf.Format(time.DateOnly)
	}
	a := c.call(ctx, s.token, http.MethodGet, "/v1/ledger/trial-balance", q, nil, "")
	if a.status == http.StatusBadRequest {
		d.AsOfErr, d.AsOfDate = a.problem(), ""
		a = c.call(ctx, s.token, http.MethodGet, "/v1/ledger/trial-balance", nil, nil, "")
	}
	if !a.ok() {
		return c.apiFailed(ec, "Books", a)
	}
	if err := a.decode(&d.TrialBalance); err != nil {
		return err
	}
	p := c.call(ctx, s.token, http.MethodGet, "/v1/ledger/periods", nil, nil, "")
	var list api.PeriodList
	switch {
	case !p.ok():
		d.PeriodsErr = roleProblem(p)
	case p.decode(&list) != nil:
		d.PeriodsErr = "The API's list of periods could not be read."
	}
	for _, pv := range list.Periods {
		end := lastInstant(pv.EndsAt)
		d.Periods = append(d.Periods, periodRow{PeriodView: pv,
			AsOfEnd: template.URL(url.Values{"as_of": {end.UTC().Format(time.RFC3339Nano)}}.Encode()),
			From:    pv.StartsAt.UTC().Format(time.DateOnly), To: end.UTC().Format(time.DateOnly)})
	}
	if s.finance {
		ic, err := importParam(ec)
		switch {
		case err != nil:
			d.Import = &importCheck{Err: "Check before importing: " + err.Error()}
		case ic != nil:
			c.checkImport(ctx, s.token, ic, c.ledgerCurrencies(ctx, s.token, d.TrialBalance))
			d.Import = ic
		}
	}
	return c.render(ec, http.StatusOK, "books", "Books", d)
}

// ledgerCurrencies are the currencies the ledger holds: the trial
// balance's as the page shows it, or now's when it shows an earlier
// instant (a currency may have come since).
func (c *Console) ledgerCurrencies(ctx context.Context, token string, tb api.TrialBalanceView) []string {
	if tb.AsOf != nil {
		a := c.call(ctx, token, http.MethodGet, "/v1/ledger/trial-balance", nil, nil, "")
		var now api.TrialBalanceView
		if a.ok() && a.decode(&now) == nil {
			tb = now
		}
	}
	out := make([]string, 0, len(tb.Currencies))
	for _, cur := range tb.Currencies {
		out = append(out, cur.Currency)
	}
	return out
}

// closeData is a close's confirmation page: the period with its trial
// balance as it stands, and the form that closes it.
type closeData struct {
	Period api.PeriodView
	Key    string
}

// confirmClose shows what closing a period will keep for good, and asks
// for the confirmation that only then closes it.
func (c *Console) confirmClose(ec echo.Context) error {
	ctx, cancel := readContext(ec)
	defer cancel()
	s := sessionIn(ec)
	a := c.call(ctx, s.token, http.MethodGet, apiPath("ledger", "periods", ec.Param("period")), nil, nil, "")
	if !a.ok() {
		return c.apiFailed(ec, "Close a period", a)
	}
	d := closeData{Key: formKey()}
	if err := a.decode(&d.Period); err != nil {
		return err
	}
	if d.Period.Status == "closed" {
		c.addFlash(s, "info", fmt.Sprintf("%s is closed already.", d.Period.Period))
		return ec.Redirect(http.StatusSeeOther, basePath+"/books#period-"+url.PathEscape(d.Period.Period))
	}
	return c.render(ec, http.StatusOK, "close", "Close "+d.Period.Period, d)
}

// closeRetry is how often a close sent twice asks again for the first
// one's answer while the API still works on it.
const closeRetry = 100 * time.Millisecond

// closePeriod closes a period once its confirmation is sent, with the
// confirmation form's Idempotency-Key.
func (c *Console) closePeriod(ec echo.Context) error {
	s := sessionIn(ec)
	period := ec.Param("period")
	confirm := basePath + "/books/periods/" + url.PathEscape(period) + "/close"
	back := basePath + "/books#period-" + url.PathEscape(period)
	key := ec.FormValue("idempotency_key")
	switch {
	case key == "":
		return c.refuse(ec, http.StatusBadRequest, "This form has no Idempotency-Key: reload the page and try again.")
	case ec.FormValue("confirm") != "yes":
		return ec.Redirect(http.StatusSeeOther, confirm)
	}
	ctx, cancel := actionContext(ec)
	defer cancel()
	path := apiPath("ledger", "periods", period, "close")
	a := c.call(ctx, s.token, http.MethodPost, path, nil, nil, key)
	wait := time.NewTicker(closeRetry)
	defer wait.Stop()
	for a.status == http.StatusConflict && problemSlug(a) == "idempotency" {
		select {
		case <-ctx.Done():
			c.addFlash(s, "info", "This close is already under way (the same form sent twice): reload for its outcome.")
			return ec.Redirect(http.StatusSeeOther, back)
		case <-wait.C:
		}
		a = c.call(ctx, s.token, http.MethodPost, path, nil, nil, key)
	}
	var p api.PeriodView
	switch {
	case a.ok() && a.decode(&p) != nil:
		c.addFlash(s, "error", "Close: the API's answer could not be read; see the periods below.")
	case a.ok() && a.header.Get(api.HeaderIdempotentReplayed) == "true":
		c.addFlash(s, "info", fmt.Sprintf("%s was already closed by the same form: nothing more happened.", p.Period))
	case a.ok():
		c.addFlash(s, "ok", fmt.Sprintf("%s is closed: nothing will be posted in it again, and its journal exports are final (trial balance digest %s).",
			p.Period, deref(p.Digest)))
	default:
		c.addFlash(s, "error", fmt.Sprintf("Close of %s refused: %s", period, a.problem()))
	}
	return ec.Redirect(http.StatusSeeOther, back)
}

// journalHeaders are what a journal export's download keeps of the API's
// answer: its type and file name, its parts and the movements it leaves
// out, and for a closed period its size and digest.
var journalHeaders = []string{echo.HeaderContentType, "Content-Disposition", echo.HeaderContentLength, "Repr-Digest",
	api.HeaderParts, api.HeaderUnconvertedMovements}

// periodJournal hands a closed period's frozen journal export through, as
// the API streams it.
func (c *Console) periodJournal(ec echo.Context) error {
	ctx := withRequestID(ec, ec.Request().Context())
	a := c.relay(ctx, sessionIn(ec).token, apiPath("ledger", "periods", ec.Param("period"), "journal.csv"),
		filterValues(ec, "format", "part"), ec.Response(), journalHeaders...)
	if !a.ok() {
		return c.apiFailed(ec, "Journal export", a)
	}
	return nil
}

// journal hands the journal of a range of days through, as the API
// streams it.
func (c *Console) journal(ec echo.Context) error {
	ctx := withRequestID(ec, ec.Request().Context())
	a := c.relay(ctx, sessionIn(ec).token, "/v1/ledger/journal.csv",
		filterValues(ec, "from", "to", "format", "granularity", "currency", "part"), ec.Response(), journalHeaders...)
	if !a.ok() {
		return c.apiFailed(ec, "Journal export", a)
	}
	return nil
}
