package console

import (
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/api"
)

// listLimit is a page of any list the console shows: a screenful to scan,
// well under the API's bound.
const listLimit = "50"

// filterValues reads the named query parameters, trimmed, dropping the
// empty ones: an empty field in a GET form means no filter, and the API
// would refuse some of them (status=) as values.
func filterValues(ec echo.Context, names ...string) url.Values {
	q := url.Values{}
	for _, n := range names {
		if v := strings.TrimSpace(ec.QueryParam(n)); v != "" {
			q.Set(n, v)
		}
	}
	return q
}

// readList reads one page of an API list with the filters f. A filter the
// API refuses (400) is shown with the API's reason above the unfiltered
// list, so that a typo leaves the operator on a useful page. applied is
// the filters the page was read with (none after a refusal), which its
// next page keeps.
func (c *Console) readList(ec echo.Context, path string, f url.Values, out any) (applied url.Values, filterErr string, a answer) {
	q := url.Values{"limit": {listLimit}}
	for k, vs := range f {
		q[k] = vs
	}
	if cur := ec.QueryParam("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	ctx, cancel := readContext(ec)
	defer cancel()
	a = c.call(ctx, sessionIn(ec).token, http.MethodGet, path, q, nil, "")
	applied = f
	if a.status == http.StatusBadRequest {
		applied, filterErr = nil, a.problem()
		a = c.call(ctx, sessionIn(ec).token, http.MethodGet, path, url.Values{"limit": {listLimit}}, nil, "")
	}
	if a.ok() {
		if err := a.decode(out); err != nil {
			return applied, filterErr, answer{status: http.StatusBadGateway, body: []byte(`{"title":"Bad gateway","detail":"the API's answer could not be read"}`)}
		}
	}
	return applied, filterErr, a
}

// filterMap is the filters named names of f, each "" when not set, for a
// list's form.
func filterMap(f url.Values, names []string) map[string]string {
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = f.Get(n)
	}
	return m
}

// nextQuery is the query of a list's next page: the same filters and the
// API's cursor; "" on the last page. It is already encoded: typed as a URL,
// the templates keep its = and & rather than escape them a second time.
func nextQuery(f url.Values, next *string) template.URL {
	if next == nil {
		return ""
	}
	q := url.Values{}
	for k, vs := range f {
		q[k] = vs
	}
	q.Set("cursor", *next)
	return template.URL(q.Encode())
}

type eventListData struct {
	Filter    map[string]string
	FilterErr string
	Events    []api.OpsEventView
	NextQuery template.URL
	Statuses  []string
	Providers []string
	// Sweep is where each provider's missed-event sweep stands; empty
	// when none ran or stats could not be read (the list still shows).
	Sweep map[string]api.SweepView
}

var eventFilters = []string{"provider", "status", "type", "payment_id"}

func (c *Console) eventList(ec echo.Context) error {
	f := filterValues(ec, eventFilters...)
	var page api.PoisonPage
	applied, filterErr, a := c.readList(ec, "/v1/events", f, &page)
	if !a.ok() {
		return c.apiFailed(ec, "Events", a)
	}
	d := eventListData{Filter: filterMap(f, eventFilters), FilterErr: filterErr, Events: page.Events,
		NextQuery: nextQuery(applied, page.NextCursor),
		Statuses:  []string{"received", "processed", "ignored", "poison", "discarded"},
		Providers: []string{"stripe", "adyen", "standard"}}
	ctx, cancel := readContext(ec)
	defer cancel()
	var stats struct {
		Sweep map[string]api.SweepView `json:"sweep"`
	}
	if a := c.call(ctx, sessionIn(ec).token, http.MethodGet, "/v1/ops/stats", nil, nil, ""); a.ok() && a.decode(&stats) == nil {
		d.Sweep = stats.Sweep
	}
	return c.render(ec, http.StatusOK, "search", "Events", d)
}

type paymentListData struct {
	Search    paymentSearch
	Filter    map[string]string
	FilterErr string
	Payments  []api.PaymentSummaryView
	NextQuery template.URL
	Statuses  []string
}

// paymentSearch is the payments' search box: its term, and whether the
// session may find a payment by its receipt email (the API lets ops only).
type paymentSearch struct {
	Q     string
	Email bool
}

// Filtered reports whether the list is narrowed by a search, an order or
// a customer.
func (d paymentListData) Filtered() bool {
	return d.Filter["q"] != "" || d.Filter["reference"] != "" || d.Filter["customer"] != ""
}

var paymentFilters = []string{"q", "reference", "customer", "status", "currency"}

// paymentList lists payments, or those a search finds: a search that finds
// exactly one payment opens it, since that is the one looked for.
func (c *Console) paymentList(ec echo.Context) error {
	f := filterValues(ec, paymentFilters...)
	var page api.PaymentPage
	applied, filterErr, a := c.readList(ec, "/v1/payments", f, &page)
	if !a.ok() {
		return c.apiFailed(ec, "Payments", a)
	}
	if applied.Get("q") != "" && ec.QueryParam("cursor") == "" && len(page.Payments) == 1 && page.NextCursor == nil {
		return ec.Redirect(http.StatusSeeOther, basePath+"/payments?"+url.Values{"id": {page.Payments[0].ID}}.Encode())
	}
	d := paymentListData{Search: paymentSearch{Q: f.Get("q"), Email: sessionIn(ec).ops},
		Filter: filterMap(f, paymentFilters), FilterErr: filterErr, Payments: page.Payments,
		NextQuery: nextQuery(applied, page.NextCursor),
		Statuses: []string{"processing", "requires_capture", "succeeded", "canceled", "failed",
			"partially_refunded", "refunded", "disputed", "dispute_lost"}}
	return c.render(ec, http.StatusOK, "payments", "Payments", d)
}

type reconData struct {
	Key       string
	BatchKey  string
	Today     string
	Date      string
	Provider  string
	Batch     string
	Providers []string
	FilterErr string
	Runs      []api.RunSummaryView
	RunsErr   string
	NextQuery template.URL
	Chart     *runChart
}

func (c *Console) reconciliation(ec echo.Context) error {
	if id := strings.TrimSpace(ec.QueryParam("run")); id != "" {
		return ec.Redirect(http.StatusSeeOther, basePath+"/reconciliation/runs/"+url.PathEscape(id))
	}
	now := time.Now().UTC()
	d := reconData{Key: formKey(), BatchKey: formKey(), Today: now.AddDate(0, 0, -1).Format("2006-01-02"),
		Providers: []string{"stripe", "adyen"}}
	f := filterValues(ec, "provider", "date", "batch")
	d.Provider, d.Date, d.Batch = f.Get("provider"), f.Get("date"), f.Get("batch")
	var page api.RunPage
	applied, filterErr, a := c.readList(ec, "/v1/reconciliation/runs", f, &page)
	d.FilterErr = filterErr
	// The start form stays usable when the list cannot be read: the list
	// and the chart are for reading, the form is what finance came for.
	if !a.ok() {
		d.RunsErr = roleProblem(a)
		return c.render(ec, http.StatusOK, "reconciliation", "Reconciliation", d)
	}
	d.Runs, d.NextQuery = page.Runs, nextQuery(applied, page.NextCursor)
	d.Chart = c.chartOf(ec, now)
	return c.render(ec, http.StatusOK, "reconciliation", "Reconciliation", d)
}

// roleProblem is the text for an API answer that could not be shown; a 403
// says it in the operator's terms, since the API, not the console, decides
// which role reads what.
func roleProblem(a answer) string {
	if a.status == http.StatusForbidden {
		return "Your role may not see this: " + a.problem()
	}
	return a.problem()
}

// chartOf reads the latest run of each of the 30 days up to today, one
// date-filtered call a day: the list is newest run first, so its first run
// of a date is the one that counts, and 30 bounded calls cost less than
// paging through every run in case an old day was re-run recently.
func (c *Console) chartOf(ec echo.Context, now time.Time) *runChart {
	ctx, cancel := readContext(ec)
	defer cancel()
	var runs []api.RunSummaryView
	first := now.AddDate(0, 0, -(chartDays - 1))
	for i := range chartDays {
		day := first.AddDate(0, 0, i).Format("2006-01-02")
		a := c.call(ctx, sessionIn(ec).token, http.MethodGet, "/v1/reconciliation/runs", url.Values{"date": {day}, "limit": {"1"}}, nil, "")
		var page api.RunPage
		if !a.ok() || a.decode(&page) != nil {
			c.cfg.Logger.Warn("console: chart: runs of a day unreadable", "date", day, "status", a.status,
				"request_id", ec.Response().Header().Get(echo.HeaderXRequestID))
			return nil
		}
		runs = append(runs, page.Runs...)
	}
	return newRunChart(first, runs)
}
