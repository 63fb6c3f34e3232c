package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/outbox"
)

// The downstream pages: the merchant's endpoints, their deliveries and the
// messages sent to them, over /v1/endpoints and /v1/messages.

// secretTTL bounds how long a secret waits on the server to be shown once
// (see shownSecret): the redirect that shows it takes milliseconds.
const secretTTL = 5 * time.Minute

// shownSecret is a signing secret an action produced (creation, rotation,
// a reveal), kept until the endpoint's page it redirects to shows it, once:
// the secret never travels in a URL, nor into a table, and a reload of that
// page no longer has it. It waits in the memory of the instance that
// produced it, by session: behind a balancer that is not sticky, the
// redirect may land on another instance, which shows no secret (the
// endpoint's page can reveal it again).
type shownSecret struct {
	endpointID string
	secret     string
	why        string // created, rotated, revealed
	expires    time.Time
}

// SecretBox is a secret as the endpoint's page shows it.
type SecretBox struct {
	Secret string
	Why    string
}

func (c *Console) putSecret(s *session, endpointID, secret, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for k, w := range c.secrets {
		if now.After(w.expires) {
			delete(c.secrets, k)
		}
	}
	c.secrets[string(s.idHash)] = &shownSecret{endpointID: endpointID, secret: secret, why: why, expires: now.Add(secretTTL)}
}

// takeSecret hands out the secret waiting for endpoint endpointID's page,
// and forgets it.
func (c *Console) takeSecret(s *session, endpointID string) *SecretBox {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.secrets[string(s.idHash)]
	switch {
	case w == nil:
		return nil
	case time.Now().After(w.expires):
		delete(c.secrets, string(s.idHash))
		return nil
	case w.endpointID != endpointID:
		return nil
	}
	delete(c.secrets, string(s.idHash))
	return &SecretBox{Secret: w.secret, Why: w.why}
}

// health is an endpoint's standing at a glance.
type health struct {
	Tone   string // a badge class: good, wait, bad, muted
	Label  string
	Detail string
}

// healthOf reads an endpoint's standing from what the API reports: a
// disabled endpoint with its reason, a failing streak, its last success.
func healthOf(e api.EndpointView) health {
	switch {
	case e.Status != "enabled":
		return health{Tone: "bad", Label: e.Status, Detail: deref(e.DisabledReason)}
	case e.FailingSince != nil:
		return health{Tone: "bad", Label: "failing", Detail: "every attempt failed since " + fmtTime(*e.FailingSince)}
	case e.LastSuccessAt != nil:
		return health{Tone: "good", Label: "healthy", Detail: "last success " + fmtTime(*e.LastSuccessAt)}
	default:
		return health{Tone: "muted", Label: "enabled", Detail: "nothing delivered yet"}
	}
}

func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// typeOption is one message type of an endpoint form's checkboxes.
type typeOption struct {
	Name    string
	Checked bool
}

// endpointForm is what the create and edit forms hold: the API's values,
// or what the operator sent when the API refused it.
type endpointForm struct {
	URL         string
	Description string
	All         bool // "*": every type, those to come included
	Types       []typeOption
}

// newEndpointForm is a form for url, description and types; the wildcard
// is its own checkbox.
func newEndpointForm(u, description string, types []string) endpointForm {
	f := endpointForm{URL: u, Description: description, All: slices.Contains(types, "*")}
	for _, t := range outbox.Types() {
		f.Types = append(f.Types, typeOption{Name: t, Checked: slices.Contains(types, t)})
	}
	return f
}

// endpointFormOf reads a submitted endpoint form, and the body the API
// gets. The checked types go as they are: which lists are valid is the
// API's to say.
func endpointFormOf(ec echo.Context) (endpointForm, api.EndpointBody) {
	_ = ec.Request().ParseForm() // done by the CSRF check already; PostForm needs it
	types := append([]string{}, ec.Request().PostForm["event_types"]...)
	f := newEndpointForm(strings.TrimSpace(ec.FormValue("url")), strings.TrimSpace(ec.FormValue("description")), types)
	return f, api.EndpointBody{URL: &f.URL, EventTypes: &types, Description: &f.Description}
}

type endpointRow struct {
	Endpoint api.EndpointView
	Health   health
	// Pending counts the endpoint's pending deliveries up to
	// pendingCountLimit ("100+" past it); "" when it could not be read.
	Pending string
}

type endpointsData struct {
	Endpoints []endpointRow
	NextQuery template.URL
	Form      endpointForm
	FormErr   string
	Key       string
	// Broker is where publishing to NATS JetStream stands; nil when it
	// could not be read.
	Broker *api.BrokerView
}

// pendingCountLimit bounds the pending count of each listed endpoint: one
// bounded call per endpoint, a backlog past it reads as "100+".
const pendingCountLimit = 100

func (c *Console) endpoints(ec echo.Context) error {
	return c.renderEndpoints(ec, http.StatusOK, newEndpointForm("", "", []string{"*"}), "")
}

func (c *Console) renderEndpoints(ec echo.Context, status int, form endpointForm, formErr string) error {
	var page api.EndpointPage
	applied, _, a := c.readList(ec, "/v1/endpoints", nil, &page)
	if !a.ok() {
		return c.apiFailed(ec, "Downstream", a)
	}
	d := endpointsData{Form: form, FormErr: formErr, Key: formKey(), NextQuery: nextQuery(applied, page.NextCursor)}
	ctx, cancel := readContext(ec)
	defer cancel()
	q := url.Values{"status": {"pending"}, "limit": {fmt.Sprint(pendingCountLimit)}}
	for _, e := range page.Endpoints {
		row := endpointRow{Endpoint: e, Health: healthOf(e)}
		var ds api.DeliveryPage
		if p := c.call(ctx, sessionIn(ec).token, http.MethodGet, apiPath("endpoints", e.ID, "deliveries"), q, nil, ""); p.ok() && p.decode(&ds) == nil {
			row.Pending = fmt.Sprint(len(ds.Deliveries))
			if ds.NextCursor != nil {
				row.Pending += "+"
			}
		}
		d.Endpoints = append(d.Endpoints, row)
	}
	var broker api.BrokerView
	if b := c.call(ctx, sessionIn(ec).token, http.MethodGet, "/v1/ops/broker", nil, nil, ""); b.ok() && b.decode(&broker) == nil {
		d.Broker = &broker
	}
	return c.render(ec, status, "endpoints", "Downstream", d)
}

// formCall sends a form's action to the API with the form's
// Idempotency-Key, so that the form sent twice is one action (the API keys
// its POSTs; a PATCH sent twice is the same edit, a DELETE sent twice
// finds the endpoint gone); ok is false when the form has no key.
func (c *Console) formCall(ec echo.Context, method, path string, body any) (a answer, ok bool) {
	key := ec.FormValue("idempotency_key")
	if key == "" {
		return answer{}, false
	}
	ctx, cancel := actionContext(ec)
	defer cancel()
	return c.call(ctx, sessionIn(ec).token, method, path, nil, body, key), true
}

func (c *Console) noKey(ec echo.Context) error {
	return c.refuse(ec, http.StatusBadRequest, "This form has no Idempotency-Key: reload the page and try again.")
}

// flashOutcome tells the operator how an action went: done when it
// happened now, a note when the same form was sent twice, the API's
// problem when refused. It reports whether the API accepted it.
func (c *Console) flashOutcome(s *session, what string, a answer, done string) bool {
	switch {
	case a.ok() && a.header.Get(api.HeaderIdempotentReplayed) == "true":
		c.addFlash(s, "info", "This "+what+" was already done (the same form sent twice): nothing more happened.")
	case a.ok():
		c.addFlash(s, "ok", done)
	case a.status == http.StatusConflict:
		c.addFlash(s, "info", "This "+what+" is already under way (the same form sent twice): "+a.problem())
	default:
		c.addFlash(s, "error", strings.ToUpper(what[:1])+what[1:]+" refused: "+a.problem())
	}
	return a.ok()
}

func endpointPage(id string) string { return basePath + "/endpoints/" + url.PathEscape(id) }

// createEndpoint registers an endpoint and shows its secret once on its
// page. The same form sent twice is one endpoint, and the second answer,
// replayed by the API, shows the same secret: the first answer's page may
// never have reached the browser.
func (c *Console) createEndpoint(ec echo.Context) error {
	s := sessionIn(ec)
	form, body := endpointFormOf(ec)
	a, ok := c.formCall(ec, http.MethodPost, "/v1/endpoints", body)
	if !ok {
		return c.noKey(ec)
	}
	if !a.ok() {
		return c.renderEndpoints(ec, formStatus(a), form, "The endpoint was not created: "+a.problem())
	}
	var e api.EndpointView
	if err := a.decode(&e); err != nil {
		return err
	}
	c.flashOutcome(s, "creation", a, "Endpoint created. Copy its signing secret now.")
	c.putSecret(s, e.ID, e.Secret, "created")
	return ec.Redirect(http.StatusSeeOther, endpointPage(e.ID))
}

// formStatus is the status of a page showing a form the API refused: its
// 4xx, or 502 when the API failed.
func formStatus(a answer) int {
	if a.status >= 400 && a.status < 500 {
		return a.status
	}
	return http.StatusBadGateway
}

type endpointData struct {
	Endpoint api.EndpointView
	Health   health
	Secret   *SecretBox
	Form     endpointForm
	FormErr  string

	Filter         map[string]string
	FilterErr      string
	Deliveries     []api.DeliveryView
	DeliveriesErr  string
	NextQuery      template.URL
	Paged          bool
	DeliveryStates []string

	EditKey, StatusKey, RotateKey, DeleteKey, RecoverKey string
}

var deliveryFilters = []string{"status", "message_id"}

func (c *Console) endpoint(ec echo.Context) error {
	return c.renderEndpoint(ec, http.StatusOK, nil, "")
}

// renderEndpoint shows an endpoint with its forms and a page of its
// deliveries; form, when not nil, is an edit the API refused, shown as
// sent with formErr.
func (c *Console) renderEndpoint(ec echo.Context, status int, form *endpointForm, formErr string) error {
	id := ec.Param("id")
	ctx, cancel := readContext(ec)
	defer cancel()
	a := c.call(ctx, sessionIn(ec).token, http.MethodGet, apiPath("endpoints", id), nil, nil, "")
	if !a.ok() {
		return c.apiFailed(ec, "Endpoint", a)
	}
	d := endpointData{FormErr: formErr, Paged: ec.QueryParam("cursor") != "",
		DeliveryStates: []string{"pending", "succeeded", "failed"},
		EditKey:        formKey(), StatusKey: formKey(), RotateKey: formKey(), DeleteKey: formKey(), RecoverKey: formKey()}
	if err := a.decode(&d.Endpoint); err != nil {
		return err
	}
	d.Health = healthOf(d.Endpoint)
	d.Secret = c.takeSecret(sessionIn(ec), d.Endpoint.ID)
	if form != nil {
		d.Form = *form
	} else {
		d.Form = newEndpointForm(d.Endpoint.URL, d.Endpoint.Description, d.Endpoint.EventTypes)
	}
	f := filterValues(ec, deliveryFilters...)
	d.Filter = filterMap(f, deliveryFilters)
	var page api.DeliveryPage
	applied, filterErr, l := c.readList(ec, apiPath("endpoints", id, "deliveries"), f, &page)
	d.FilterErr = filterErr
	if l.ok() {
		d.Deliveries, d.NextQuery = page.Deliveries, nextQuery(applied, page.NextCursor)
	} else {
		d.DeliveriesErr = roleProblem(l)
	}
	return c.render(ec, status, "endpoint", "Endpoint "+d.Endpoint.URL, d)
}

func (c *Console) updateEndpoint(ec echo.Context) error {
	id := ec.Param("id")
	form, body := endpointFormOf(ec)
	a, ok := c.formCall(ec, http.MethodPatch, apiPath("endpoints", id), body)
	if !ok {
		return c.noKey(ec)
	}
	if !a.ok() {
		if a.status == http.StatusNotFound {
			return c.apiFailed(ec, "Endpoint", a)
		}
		return c.renderEndpoint(ec, formStatus(a), &form, "Not saved: "+a.problem())
	}
	c.flashOutcome(sessionIn(ec), "edit", a, "Saved.")
	return ec.Redirect(http.StatusSeeOther, endpointPage(id))
}

// setEndpointStatus enables or disables an endpoint.
func (c *Console) setEndpointStatus(ec echo.Context) error {
	id := ec.Param("id")
	status := ec.FormValue("status")
	a, ok := c.formCall(ec, http.MethodPatch, apiPath("endpoints", id), api.EndpointBody{Status: &status})
	if !ok {
		return c.noKey(ec)
	}
	done := "Enabled: the messages it kept go now."
	if status == "disabled" {
		done = "Disabled: nothing is sent to it until it is enabled again; its messages wait."
	}
	c.flashOutcome(sessionIn(ec), "change of status", a, done)
	return ec.Redirect(http.StatusSeeOther, endpointPage(id))
}

// revealSecret reads an endpoint's secret for its page to show once: a
// POST behind a button, so the secret is never in a URL, a history entry
// or a prefetch.
func (c *Console) revealSecret(ec echo.Context) error {
	s, id := sessionIn(ec), ec.Param("id")
	ctx, cancel := readContext(ec)
	defer cancel()
	a := c.call(ctx, s.token, http.MethodGet, apiPath("endpoints", id, "secret"), nil, nil, "")
	if !a.ok() {
		c.addFlash(s, "error", "The secret could not be read: "+a.problem())
		return ec.Redirect(http.StatusSeeOther, endpointPage(id))
	}
	var v api.SecretView
	if err := a.decode(&v); err != nil {
		return err
	}
	c.putSecret(s, id, v.Secret, "revealed")
	return ec.Redirect(http.StatusSeeOther, endpointPage(id))
}

// rotateSecret replaces an endpoint's secret, once the operator confirmed
// that the old one signs beside it for 24 h only. The same form sent twice
// is one rotation, and shows the same new secret.
func (c *Console) rotateSecret(ec echo.Context) error {
	s, id := sessionIn(ec), ec.Param("id")
	if ec.FormValue("confirm") != "yes" {
		c.addFlash(s, "error", "The secret was not rotated: tick the box to confirm that the old secret stops signing after 24 h.")
		return ec.Redirect(http.StatusSeeOther, endpointPage(id))
	}
	a, ok := c.formCall(ec, http.MethodPost, apiPath("endpoints", id, "secret", "rotate"), nil)
	if !ok {
		return c.noKey(ec)
	}
	if c.flashOutcome(s, "rotation", a, "Secret rotated: the old one signs beside the new one for 24 h, then stops.") {
		var v api.SecretView
		if err := a.decode(&v); err != nil {
			return err
		}
		c.putSecret(s, id, v.Secret, "rotated")
	}
	return ec.Redirect(http.StatusSeeOther, endpointPage(id))
}

// deleteEndpoint removes an endpoint once confirmed. A second submission
// finds it gone, and says so.
func (c *Console) deleteEndpoint(ec echo.Context) error {
	s, id := sessionIn(ec), ec.Param("id")
	if ec.FormValue("confirm") != "yes" {
		c.addFlash(s, "error", "The endpoint was not deleted: tick the box to confirm.")
		return ec.Redirect(http.StatusSeeOther, endpointPage(id))
	}
	a, ok := c.formCall(ec, http.MethodDelete, apiPath("endpoints", id), nil)
	if !ok {
		return c.noKey(ec)
	}
	if a.status == http.StatusNotFound {
		c.addFlash(s, "info", "Endpoint "+id+" is gone already (deleted before, perhaps by the same form sent twice).")
	} else if !c.flashOutcome(s, "deletion", a, "Endpoint "+id+" deleted: nothing more is sent to it.") {
		return ec.Redirect(http.StatusSeeOther, endpointPage(id))
	}
	return ec.Redirect(http.StatusSeeOther, basePath+"/endpoints")
}

// recoverEndpoint sends an endpoint again what did not succeed there in a
// window; the form's times are UTC, as it says.
func (c *Console) recoverEndpoint(ec echo.Context) error {
	s, id := sessionIn(ec), ec.Param("id")
	body := map[string]string{}
	for _, name := range []string{"since", "until"} {
		t, err := timeFilter(ec.FormValue(name))
		if err != nil {
			c.addFlash(s, "error", "Nothing recovered: "+name+": "+err.Error())
			return ec.Redirect(http.StatusSeeOther, endpointPage(id))
		}
		if t != "" {
			body[name] = t
		}
	}
	a, ok := c.formCall(ec, http.MethodPost, apiPath("endpoints", id, "recover"), body)
	if !ok {
		return c.noKey(ec)
	}
	var v struct {
		Queued int `json:"queued"`
	}
	if a.ok() {
		if err := a.decode(&v); err != nil {
			return err
		}
	}
	c.flashOutcome(s, "recovery", a, plural(v.Queued, "message")+" queued.")
	return ec.Redirect(http.StatusSeeOther, endpointPage(id))
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

type deliveryData struct {
	EndpointID string
	Endpoint   *api.EndpointView
	Delivery   api.DeliveryDetailView
	Message    *api.MessageView
	MessageErr string
	Data       string
	ResendKey  string
}

// delivery shows one message at one endpoint: the delivery with its
// attempts, and the message itself with where it stands elsewhere.
func (c *Console) delivery(ec echo.Context) error {
	id, mid := ec.Param("id"), ec.Param("message_id")
	tok := sessionIn(ec).token
	ctx, cancel := readContext(ec)
	defer cancel()
	a := c.call(ctx, tok, http.MethodGet, apiPath("endpoints", id, "deliveries", mid), nil, nil, "")
	if !a.ok() {
		return c.apiFailed(ec, "Delivery", a)
	}
	d := deliveryData{EndpointID: id, ResendKey: formKey()}
	if err := a.decode(&d.Delivery); err != nil {
		return err
	}
	if e := c.call(ctx, tok, http.MethodGet, apiPath("endpoints", id), nil, nil, ""); e.ok() {
		d.Endpoint = &api.EndpointView{}
		if err := e.decode(d.Endpoint); err != nil {
			return err
		}
	}
	m := c.call(ctx, tok, http.MethodGet, apiPath("messages", mid), nil, nil, "")
	if !m.ok() {
		d.MessageErr = "The message: " + m.problem()
		return c.render(ec, http.StatusOK, "delivery", "Delivery "+mid, d)
	}
	d.Message = &api.MessageView{}
	if err := m.decode(d.Message); err != nil {
		return err
	}
	var buf bytes.Buffer
	if len(d.Message.Data) <= maxPretty && json.Indent(&buf, d.Message.Data, "", "  ") == nil {
		d.Data = buf.String()
	} else {
		d.Data = string(d.Message.Data)
	}
	return c.render(ec, http.StatusOK, "delivery", "Delivery "+mid, d)
}

// resend sends one message to the endpoint again, as a new series of
// attempts; the API leaves one still pending to its schedule.
func (c *Console) resend(ec echo.Context) error {
	s, id, mid := sessionIn(ec), ec.Param("id"), ec.Param("message_id")
	a, ok := c.formCall(ec, http.MethodPost, apiPath("messages", mid, "resend"), api.ResendBody{EndpointID: id})
	if !ok {
		return c.noKey(ec)
	}
	var v struct {
		Queued bool `json:"queued"`
	}
	if a.ok() {
		if err := a.decode(&v); err != nil {
			return err
		}
	}
	done := "Resent: a new series of attempts is queued."
	if !v.Queued {
		done = "Not resent: this message is pending at this endpoint already, and goes on its schedule."
	}
	c.flashOutcome(s, "resend", a, done)
	return ec.Redirect(http.StatusSeeOther, endpointPage(id)+"/deliveries/"+url.PathEscape(mid))
}
