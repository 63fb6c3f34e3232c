package console

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
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
	return c.render(ec, http.StatusOK, "books", "Books", d)
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
// answer: its type and file name, and for a closed period its size and
// digest.
var journalHeaders = []string{echo.HeaderContentType, "Content-Disposition", echo.HeaderContentLength, "Repr-Digest"}

// periodJournal hands a closed period's frozen journal export through, as
// the API streams it.
func (c *Console) periodJournal(ec echo.Context) error {
	ctx := withRequestID(ec, ec.Request().Context())
	a := c.relay(ctx, sessionIn(ec).token, apiPath("ledger", "periods", ec.Param("period"), "journal.csv"),
		filterValues(ec, "format"), ec.Response(), journalHeaders...)
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
		filterValues(ec, "from", "to", "format", "granularity"), ec.Response(), journalHeaders...)
	if !a.ok() {
		return c.apiFailed(ec, "Journal export", a)
	}
	return nil
}
