package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/reconcile"
	"github.com/paygate/paygate/refund"
)

// view is what every page template gets.
type view struct {
	Title   string
	Nav     string
	Session *session
	Name    string
	CSRF    string
	Flash   []message
	Data    any
}

// formKey is a fresh Idempotency-Key for a form being rendered: the form
// carries it, so its every submission (a double click, a resend) is one
// operation at the API.
func formKey() string { return "console-" + randomID(18) }

func (c *Console) render(ec echo.Context, status int, page, title string, data any) error {
	t, ok := c.pages[page]
	if !ok {
		return fmt.Errorf("console: no page %q", page)
	}
	v := view{Title: title, Nav: page, Data: data}
	if s := sessionIn(ec); s != nil {
		v.Session, v.CSRF, v.Flash = s, c.csrfToken(ec), c.takeFlash(s)
		v.Name = s.name
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		c.cfg.Logger.Error("console: render", "page", page, "error", err.Error(),
			"request_id", ec.Response().Header().Get(echo.HeaderXRequestID))
		if page != "refused" {
			return c.render(ec, http.StatusInternalServerError, "refused", "Something went wrong",
				"This page could not be shown; the error is in the server's log.")
		}
		return echo.NewHTTPError(http.StatusInternalServerError)
	}
	return ec.HTMLBlob(status, buf.Bytes())
}

func (c *Console) refuse(ec echo.Context, status int, text string) error {
	return c.render(ec, status, "refused", http.StatusText(status), text)
}

// apiFailed renders a page that could not be read, with the API's reason.
func (c *Console) apiFailed(ec echo.Context, title string, a answer) error {
	status := a.status
	if status < 400 {
		status = http.StatusBadGateway
	}
	return c.render(ec, status, "refused", title, roleProblem(a))
}

func (c *Console) home(ec echo.Context) error {
	s, _ := c.sessionOf(ec)
	switch {
	case s == nil:
		return ec.Redirect(http.StatusSeeOther, basePath+"/signin")
	case s.ops:
		return ec.Redirect(http.StatusSeeOther, basePath+"/poison")
	default:
		return ec.Redirect(http.StatusSeeOther, basePath+"/reconciliation")
	}
}

// signinData is the sign-in page: the identity provider's button when
// one is configured, the token form unless it is turned off.
type signinData struct {
	Error    string
	Provider string
	Tokens   bool
}

func (c *Console) renderSignin(ec echo.Context, status int, problem string) error {
	return c.render(ec, status, "signin", "Sign in", signinData{Error: problem, Provider: c.providerName(), Tokens: !c.cfg.DisableTokens})
}

func (c *Console) signinPage(ec echo.Context) error {
	return c.renderSignin(ec, http.StatusOK, "")
}

// signin asks the API who the token is (GET /v1/me: its identity and
// roles) and keeps it server-side; the browser only ever holds an opaque
// session id.
func (c *Console) signin(ec echo.Context) error {
	if c.cfg.DisableTokens {
		return c.renderSignin(ec, http.StatusForbidden, "Signing in with a role token is turned off here: sign in with your company account.")
	}
	ec.Request().Body = http.MaxBytesReader(ec.Response(), ec.Request().Body, maxForm)
	token := strings.TrimSpace(ec.FormValue("token"))
	if token == "" {
		return c.renderSignin(ec, http.StatusUnauthorized, "Enter your role token.")
	}
	ctx, cancel := readContext(ec)
	defer cancel()
	var me api.MeView
	who := c.call(ctx, token, http.MethodGet, "/v1/me", nil, nil, "")
	if who.status == http.StatusTooManyRequests {
		// The API counted this address's failures (the sign-in's call
		// carries the browser's address) and refuses it for now.
		wait := who.header.Get("Retry-After")
		ec.Response().Header().Set("Retry-After", wait)
		return c.renderSignin(ec, http.StatusTooManyRequests,
			"Too many wrong tokens from your address: try again in "+wait+" s.")
	}
	if who.status == http.StatusUnauthorized {
		return c.renderSignin(ec, http.StatusUnauthorized, "That token is not one paygate knows.")
	}
	if !who.ok() || json.Unmarshal(who.body, &me) != nil {
		return c.renderSignin(ec, http.StatusServiceUnavailable, "The API could not confirm this token: "+who.problem())
	}
	s := &session{token: token}
	for _, r := range me.Roles {
		s.ops = s.ops || r == api.RoleOps
		s.finance = s.finance || r == api.RoleFinance
	}
	if !s.ops && !s.finance {
		return c.renderSignin(ec, http.StatusForbidden, "This token has no role the console serves.")
	}
	// A named operator is greeted by name; a bare token's identity is a
	// hash prefix, which says nothing to its holder: its roles instead.
	if s.name = me.Identity; s.name == "" || strings.HasPrefix(s.name, "token:") {
		s.name = s.Roles()
	}
	if err := c.startSession(ec, s); err != nil {
		c.cfg.Logger.Error("console: store session", "error", err.Error(),
			"request_id", ec.Response().Header().Get(echo.HeaderXRequestID))
		return c.renderSignin(ec, http.StatusServiceUnavailable, "The console could not keep your session: try again shortly.")
	}
	return ec.Redirect(http.StatusSeeOther, basePath+"/")
}

// signout deletes the session, which ends it on every instance. A person
// is still signed in at their identity provider: when it publishes an
// end_session_endpoint, the page offers its logout too.
func (c *Console) signout(ec echo.Context) error {
	s := sessionIn(ec)
	if err := c.endSession(ec); err != nil {
		c.cfg.Logger.Error("console: end session", "error", err.Error(),
			"request_id", ec.Response().Header().Get(echo.HeaderXRequestID))
		return c.refuse(ec, http.StatusServiceUnavailable, "The session could not be ended: try again.")
	}
	if s != nil && s.person {
		if logout := c.providerLogout(ec); logout != "" {
			ec.Set(sessionKey, nil)
			return c.render(ec, http.StatusOK, "signedout", "Signed out", signedOutData{
				Name: s.name, Provider: c.providerName(), Logout: logout})
		}
	}
	return ec.Redirect(http.StatusSeeOther, basePath+"/signin")
}

// signedOutData offers a person the provider's logout.
type signedOutData struct {
	Name, Provider, Logout string
}

// timeFilter reads a browser's datetime-local value (UTC, as the console
// labels it) or an RFC 3339 time, and answers RFC 3339 for the API.
func timeFilter(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC().Format(time.RFC3339), nil
		}
	}
	return "", fmt.Errorf("%q is not a time such as 2024-06-20T12:00", v)
}

type poisonFilter struct {
	Type, Error, ReceivedAfter, ReceivedBefore string
}

func (f poisonFilter) query() (url.Values, error) {
	q := url.Values{}
	if f.Type != "" {
		q.Set("type", f.Type)
	}
	if f.Error != "" {
		q.Set("error", f.Error)
	}
	for name, v := range map[string]string{"received_after": f.ReceivedAfter, "received_before": f.ReceivedBefore} {
		t, err := timeFilter(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.ReplaceAll(name, "_", " "), err)
		}
		if t != "" {
			q.Set(name, t)
		}
	}
	return q, nil
}

func poisonFilterOf(get func(string) string) poisonFilter {
	return poisonFilter{
		Type: strings.TrimSpace(get("type")), Error: strings.TrimSpace(get("error")),
		ReceivedAfter: strings.TrimSpace(get("received_after")), ReceivedBefore: strings.TrimSpace(get("received_before")),
	}
}

type poisonData struct {
	Filter     poisonFilter
	FilterErr  string
	Page       api.PoisonPage
	NextQuery  template.URL
	Key        string
	DryRun     *api.BulkReplayResponse
	ConfirmKey string
	Reason     string
}

func (c *Console) poison(ec echo.Context) error {
	d := poisonData{Filter: poisonFilterOf(ec.QueryParam), Key: formKey()}
	return c.renderPoison(ec, http.StatusOK, d, ec.QueryParam("cursor"))
}

func (c *Console) renderPoison(ec echo.Context, status int, d poisonData, cursor string) error {
	q, err := d.Filter.query()
	if err != nil {
		d.FilterErr = err.Error()
		q = url.Values{}
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	q.Set("limit", "50")
	ctx, cancel := readContext(ec)
	defer cancel()
	a := c.call(ctx, sessionIn(ec).token, http.MethodGet, "/v1/ops/poison", q, nil, "")
	if !a.ok() {
		if a.status == http.StatusBadRequest {
			d.FilterErr = a.problem()
			a = c.call(ctx, sessionIn(ec).token, http.MethodGet, "/v1/ops/poison", url.Values{"limit": {"50"}}, nil, "")
		}
		if !a.ok() {
			return c.apiFailed(ec, "Poison queue", a)
		}
	}
	if err := a.decode(&d.Page); err != nil {
		return err
	}
	if d.Page.NextCursor != nil {
		next := url.Values{"type": {d.Filter.Type}, "error": {d.Filter.Error},
			"received_after": {d.Filter.ReceivedAfter}, "received_before": {d.Filter.ReceivedBefore}, "cursor": {*d.Page.NextCursor}}
		d.NextQuery = template.URL(next.Encode())
	}
	return c.render(ec, status, "poison", "Poison queue", d)
}

// bulkReplay asks the API first for a dry run (how many events the filter
// matches) and shows it with a confirmation form carrying its own key; only
// that confirmation replays.
func (c *Console) bulkReplay(ec echo.Context) error {
	s := sessionIn(ec)
	f := poisonFilterOf(ec.FormValue)
	d := poisonData{Filter: f, Key: formKey(), Reason: strings.TrimSpace(ec.FormValue("reason"))}
	q, err := f.query()
	if err != nil {
		c.addFlash(s, "error", err.Error())
		return c.renderPoison(ec, http.StatusBadRequest, d, "")
	}
	key := ec.FormValue("idempotency_key")
	if key == "" {
		return c.refuse(ec, http.StatusBadRequest, "This form has no Idempotency-Key: reload the page and try again.")
	}
	body := map[string]any{"dry_run": ec.FormValue("confirm") != "yes", "reason": d.Reason}
	for k, vs := range q {
		body[k] = vs[0]
	}
	if f.Type == "" && f.Error == "" && q.Get("received_after") == "" && q.Get("received_before") == "" {
		body["status"] = "poison"
	}
	ctx, cancel := actionContext(ec)
	defer cancel()
	a := c.call(ctx, s.token, http.MethodPost, "/v1/ops/replay", nil, body, key)
	if !a.ok() {
		c.addFlash(s, "error", "Bulk replay: "+a.problem())
		return c.renderPoison(ec, http.StatusOK, d, "")
	}
	var res api.BulkReplayResponse
	if err := a.decode(&res); err != nil {
		return err
	}
	if res.DryRun {
		d.DryRun, d.ConfirmKey = &res, formKey()
		return c.renderPoison(ec, http.StatusOK, d, "")
	}
	c.addFlash(s, "ok", fmt.Sprintf("Bulk replay: %d of %d matching events sent back for processing.", res.Replayed, res.Matched))
	return ec.Redirect(http.StatusSeeOther, basePath+"/poison")
}

func (c *Console) eventSearch(ec echo.Context) error {
	provider, id := strings.TrimSpace(ec.QueryParam("provider")), strings.TrimSpace(ec.QueryParam("event_id"))
	if provider == "" || id == "" {
		return c.eventList(ec)
	}
	return ec.Redirect(http.StatusSeeOther, basePath+"/events/"+url.PathEscape(provider)+"/"+url.PathEscape(id))
}

type eventData struct {
	Event      api.EventView
	Payload    string
	ReplayKey  string
	DiscardKey string
}

// maxPretty is the largest payload re-indented for reading; bigger ones
// are shown as stored.
const maxPretty = 512 << 10

func (c *Console) event(ec echo.Context) error {
	ctx, cancel := readContext(ec)
	defer cancel()
	a := c.call(ctx, sessionIn(ec).token, http.MethodGet, apiPath("events", ec.Param("provider"), ec.Param("event_id")), nil, nil, "")
	if !a.ok() {
		return c.apiFailed(ec, "Event", a)
	}
	var d eventData
	if err := a.decode(&d.Event); err != nil {
		return err
	}
	if len(d.Event.Payload) > 0 {
		var buf bytes.Buffer
		if len(d.Event.Payload) <= maxPretty && json.Indent(&buf, d.Event.Payload, "", "  ") == nil {
			d.Payload = buf.String()
		} else {
			d.Payload = string(d.Event.Payload)
		}
	}
	d.ReplayKey, d.DiscardKey = formKey(), formKey()
	return c.render(ec, http.StatusOK, "event", "Event "+d.Event.EventID, d)
}

func (c *Console) eventAction(ec echo.Context, action string, requireReason bool) error {
	s := sessionIn(ec)
	provider, id := ec.Param("provider"), ec.Param("event_id")
	back := basePath + "/events/" + url.PathEscape(provider) + "/" + url.PathEscape(id)
	reason := strings.TrimSpace(ec.FormValue("reason"))
	key := ec.FormValue("idempotency_key")
	switch {
	case key == "":
		return c.refuse(ec, http.StatusBadRequest, "This form has no Idempotency-Key: reload the page and try again.")
	case requireReason && reason == "":
		c.addFlash(s, "error", "A discard needs a reason: say why this event will never be processed.")
		return ec.Redirect(http.StatusSeeOther, back)
	}
	ctx, cancel := actionContext(ec)
	defer cancel()
	a := c.call(ctx, s.token, http.MethodPost, apiPath("ops", "events", provider, id, action), nil, map[string]string{"reason": reason}, key)
	switch {
	case a.ok() && a.header.Get("Idempotent-Replayed") == "true":
		c.addFlash(s, "info", fmt.Sprintf("This %s was already done (the same form sent twice): nothing more happened.", action))
	case a.ok() && action == "replay":
		c.addFlash(s, "ok", "Replayed: the event is back in the queue for processing.")
	case a.ok():
		c.addFlash(s, "ok", "Discarded, with your reason in the audit log.")
	case a.status == http.StatusConflict:
		c.addFlash(s, "info", "This "+action+" is already under way (the same form sent twice): "+a.problem())
	default:
		c.addFlash(s, "error", strings.ToUpper(action[:1])+action[1:]+" refused: "+a.problem())
	}
	return ec.Redirect(http.StatusSeeOther, back)
}

func (c *Console) replay(ec echo.Context) error  { return c.eventAction(ec, "replay", false) }
func (c *Console) discard(ec echo.Context) error { return c.eventAction(ec, "discard", true) }

type paymentData struct {
	ID           string
	Search       paymentSearch
	Payment      *api.PaymentView
	Transactions []api.TransactionView
	Refunds      []api.RefundRequestView
	Errors       []string
	// Refund is the Refund form, for ops; OpenRefunds is set while a
	// request waits for the provider.
	Refund      refundForm
	OpenRefunds bool
}

func (c *Console) payment(ec echo.Context) error {
	id := strings.TrimSpace(ec.QueryParam("id"))
	if id == "" {
		return c.paymentList(ec)
	}
	d := paymentData{ID: id, Search: paymentSearch{Email: sessionIn(ec).ops}}
	ctx, cancel := readContext(ec)
	defer cancel()
	tok := sessionIn(ec).token
	a := c.call(ctx, tok, http.MethodGet, apiPath("payments", id), nil, nil, "")
	if !a.ok() {
		d.Errors = append(d.Errors, a.problem())
		return c.render(ec, a.status, "payment", "Payment", d)
	}
	d.Payment = &api.PaymentView{}
	if err := a.decode(d.Payment); err != nil {
		return err
	}
	if l := c.call(ctx, tok, http.MethodGet, apiPath("payments", id, "ledger"), nil, nil, ""); l.ok() {
		var v struct {
			Transactions []api.TransactionView `json:"transactions"`
		}
		if err := l.decode(&v); err != nil {
			return err
		}
		d.Transactions = v.Transactions
	} else {
		d.Errors = append(d.Errors, "Ledger: "+l.problem())
	}
	if r := c.call(ctx, tok, http.MethodGet, apiPath("payments", id, "refund-requests"), nil, nil, ""); r.ok() {
		var v struct {
			RefundRequests []api.RefundRequestView `json:"refund_requests"`
		}
		if err := r.decode(&v); err != nil {
			return err
		}
		d.Refunds = v.RefundRequests
		d.Refund, d.OpenRefunds = newRefundForm(refundAmounts{d.Payment.Currency, d.Payment.AmountCaptured, d.Payment.AmountRefunded}, d.Refunds), openRefunds(d.Refunds)
	} else {
		d.Errors = append(d.Errors, "Refund requests: "+r.problem())
		// Without the open requests the default would be wrong: the form
		// asks the API for everything refundable, and the API decides.
		d.Refund = refundForm{Key: formKey(), Reasons: refund.Reasons}
	}
	return c.render(ec, http.StatusOK, "payment", "Payment "+id, d)
}

func (c *Console) audit(ec echo.Context) error {
	q := url.Values{"limit": {"100"}}
	if cur := ec.QueryParam("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	ctx, cancel := readContext(ec)
	defer cancel()
	a := c.call(ctx, sessionIn(ec).token, http.MethodGet, "/v1/ops/audit", q, nil, "")
	if !a.ok() {
		return c.apiFailed(ec, "Audit log", a)
	}
	var page api.AuditPage
	if err := a.decode(&page); err != nil {
		return err
	}
	return c.render(ec, http.StatusOK, "audit", "Audit log", page)
}

func (c *Console) startRun(ec echo.Context) error {
	s := sessionIn(ec)
	key := ec.FormValue("idempotency_key")
	if key == "" {
		return c.refuse(ec, http.StatusBadRequest, "This form has no Idempotency-Key: reload the page and try again.")
	}
	ctx, cancel := actionContext(ec)
	defer cancel()
	body := map[string]any{"date": strings.TrimSpace(ec.FormValue("date"))}
	if v := strings.TrimSpace(ec.FormValue("batch")); v != "" {
		// A settlement batch re-run: the API checks the number and that
		// the batch's report is stored.
		batch, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			c.addFlash(s, "error", "Reconciliation run refused: the batch is a whole number such as 12")
			return ec.Redirect(http.StatusSeeOther, basePath+"/reconciliation")
		}
		body = map[string]any{"provider": strings.TrimSpace(ec.FormValue("provider")), "batch": batch}
	}
	a := c.call(ctx, s.token, http.MethodPost, "/v1/reconciliation/runs", nil, body, key)
	if !a.ok() {
		c.addFlash(s, "error", "Reconciliation run refused: "+a.problem())
		return ec.Redirect(http.StatusSeeOther, basePath+"/reconciliation")
	}
	var run api.RunView
	if err := a.decode(&run); err != nil {
		return err
	}
	if a.header.Get("Idempotent-Replayed") == "true" {
		c.addFlash(s, "info", "This run was already started by the same form: showing it.")
	} else {
		what := runScope(run.Date, run.Batch)
		if run.Batch != nil {
			what = run.Provider + " " + what
		}
		c.addFlash(s, "ok", fmt.Sprintf("Reconciliation run %d for %s started.", run.ID, what))
	}
	return ec.Redirect(http.StatusSeeOther, fmt.Sprintf("%s/reconciliation/runs/%d", basePath, run.ID))
}

type runData struct {
	Run    api.RunReportView
	Status string
	// State is the exceptions shown: open, resolved, or "" for every item.
	State    string
	Items    []runItem
	Statuses []string
	// NextCursor is the cursor of the next page of items, empty on the
	// last; Paged is set past the first page. FirstQuery and NextQuery are
	// the queries of the first and the next page, filters kept; Return is
	// this page's, for the resolve forms to come back to.
	NextCursor string
	Paged      bool
	FirstQuery template.URL
	NextQuery  template.URL
	Return     string
	// Single is set on an item's own page: the run, with that item alone.
	Single      bool
	Resolutions []reconcile.ResolutionKind
}

// runItem is an item as the run page shows it, with the resolve form's
// Idempotency-Key for an open exception (finance only).
type runItem struct {
	api.ItemView
	Exception bool
	Open      bool
	Key       string
}

func newRunItems(s *session, items []api.ItemView) []runItem {
	out := make([]runItem, len(items))
	for i, it := range items {
		out[i] = runItem{ItemView: it, Exception: it.Status.Exception()}
		if out[i].Exception && it.Resolution == nil {
			out[i].Open = true
			if s.finance {
				out[i].Key = formKey()
			}
		}
	}
	return out
}

// runPageSize is how many items a run's page shows at a time.
const runPageSize = 100

// runFilters reads a run page's filters: an item status, an exception
// state (open, resolved). The API checks their values.
func runFilters(get func(string) string) url.Values {
	q := url.Values{}
	for _, name := range []string{"status", "state"} {
		if v := strings.TrimSpace(get(name)); v != "" {
			q.Set(name, v)
		}
	}
	return q
}

// run shows a run and one page of its items: the run's own answer carries
// the first page; a status or state filter, or a later page, is read from
// the run's item list, which follows the cursor the previous page handed
// out.
func (c *Console) run(ec echo.Context) error {
	ctx, cancel := readContext(ec)
	defer cancel()
	s := sessionIn(ec)
	filters, cursor := runFilters(ec.QueryParam), ec.QueryParam("cursor")
	listed := len(filters) > 0 || cursor != ""
	q := url.Values{"limit": {strconv.Itoa(runPageSize)}}
	if listed {
		q.Set("limit", "1") // the items come from the list below
	}
	a := c.call(ctx, s.token, http.MethodGet, apiPath("reconciliation", "runs", ec.Param("id")), q, nil, "")
	if !a.ok() {
		return c.apiFailed(ec, "Reconciliation run", a)
	}
	d := runData{Status: filters.Get("status"), State: filters.Get("state"), Paged: cursor != "",
		FirstQuery: template.URL(filters.Encode()), Resolutions: reconcile.ResolutionKinds}
	if err := a.decode(&d.Run); err != nil {
		return err
	}
	items, next := d.Run.Items, deref(d.Run.ItemsNextCursor)
	if listed {
		iq := url.Values{"limit": {strconv.Itoa(runPageSize)}}
		for k, vs := range filters {
			iq[k] = vs
		}
		if cursor != "" {
			iq.Set("cursor", cursor)
		}
		ia := c.call(ctx, s.token, http.MethodGet, apiPath("reconciliation", "runs", ec.Param("id"), "items"), iq, nil, "")
		if !ia.ok() {
			return c.apiFailed(ec, "Reconciliation run", ia)
		}
		var page api.ItemPage
		if err := ia.decode(&page); err != nil {
			return err
		}
		items, next = page.Items, deref(page.NextCursor)
	}
	d.Items, d.NextCursor = newRunItems(s, items), next
	if next != "" {
		nq := url.Values{"cursor": {next}}
		for k, vs := range filters {
			nq[k] = vs
		}
		d.NextQuery = template.URL(nq.Encode())
	}
	here := url.Values{}
	for k, vs := range filters {
		here[k] = vs
	}
	if cursor != "" {
		here.Set("cursor", cursor)
	}
	d.Return = here.Encode()
	return c.renderRun(ec, d)
}

func (c *Console) renderRun(ec echo.Context, d runData) error {
	for st := range d.Run.Summary {
		d.Statuses = append(d.Statuses, string(st))
	}
	slices.Sort(d.Statuses)
	title := fmt.Sprintf("Reconciliation run %d", d.Run.ID)
	if d.Single && len(d.Items) == 1 {
		title = fmt.Sprintf("Reconciliation item %d", d.Items[0].ID)
	}
	return c.render(ec, http.StatusOK, "run", title, d)
}

// runCSV hands the API's CSV through with the session's token, as the API
// streams it: the browser never holds a token to fetch it itself, and a
// run of any size passes through in bounded memory.
func (c *Console) runCSV(ec echo.Context) error {
	// Bounded by the client's connection rather than apiTimeout: the
	// download of a large run takes as long as it takes.
	ctx := withRequestID(ec, ec.Request().Context())
	a := c.relay(ctx, sessionIn(ec).token, apiPath("reconciliation", "runs", ec.Param("id"), "items.csv"), nil, ec.Response(),
		echo.HeaderContentType, "Content-Disposition")
	if !a.ok() {
		return c.apiFailed(ec, "Reconciliation run", a)
	}
	return nil
}
