package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/reconcile"
)

// item shows one reconciliation item on its run's page, alone: where the
// audit log's entry of a resolution leads, whatever page of its run the
// item is on.
func (c *Console) item(ec echo.Context) error {
	ctx, cancel := readContext(ec)
	defer cancel()
	s := sessionIn(ec)
	a := c.call(ctx, s.token, http.MethodGet, apiPath("reconciliation", "items", ec.Param("id")), nil, nil, "")
	if !a.ok() {
		return c.apiFailed(ec, "Reconciliation item", a)
	}
	var it api.ItemView
	if err := a.decode(&it); err != nil {
		return err
	}
	r := c.call(ctx, s.token, http.MethodGet, apiPath("reconciliation", "runs", strconv.FormatInt(it.RunID, 10)),
		url.Values{"limit": {"1"}}, nil, "")
	if !r.ok() {
		return c.apiFailed(ec, "Reconciliation item", r)
	}
	d := runData{Single: true, Items: newRunItems(s, []api.ItemView{it}), Return: singleItem}
	if err := r.decode(&d.Run); err != nil {
		return err
	}
	d.Resolutions = reconcile.ResolutionKinds
	return c.renderRun(ec, d)
}

// singleItem is the resolve form's return on an item's own page: it comes
// back there.
const singleItem = "item"

// resolveRetry is how often a resolution sent twice asks again for the
// first one's answer while the API still works on it.
const resolveRetry = 100 * time.Millisecond

// resolveItem asks the API to resolve an exception with the form's
// Idempotency-Key: a double click, or the form sent again, is one
// resolution. The page it comes back to is the run's page it was sent
// from, its filters kept.
func (c *Console) resolveItem(ec echo.Context) error {
	s := sessionIn(ec)
	id := ec.Param("id")
	back := basePath + "/reconciliation/items/" + url.PathEscape(id)
	if run, err := strconv.ParseInt(ec.FormValue("run"), 10, 64); err == nil && run > 0 && ec.FormValue("return") != singleItem {
		back = fmt.Sprintf("%s/reconciliation/runs/%d", basePath, run)
		if ret, err := url.ParseQuery(ec.FormValue("return")); err == nil {
			if q := runFilters(ret.Get); len(q) > 0 || ret.Get("cursor") != "" {
				if cur := ret.Get("cursor"); cur != "" {
					q.Set("cursor", cur)
				}
				back += "?" + q.Encode()
			}
		}
		back += "#item-" + url.PathEscape(id)
	}
	key := ec.FormValue("idempotency_key")
	if key == "" {
		return c.refuse(ec, http.StatusBadRequest, "This form has no Idempotency-Key: reload the page and try again.")
	}
	body := api.ResolveRequest{Resolution: reconcile.ResolutionKind(ec.FormValue("resolution")), Note: ec.FormValue("note")}
	ctx, cancel := actionContext(ec)
	defer cancel()
	path := apiPath("reconciliation", "items", id, "resolve")
	a := c.call(ctx, s.token, http.MethodPost, path, nil, body, key)
	// The same form sent again while the first is still being worked on:
	// wait for the first's stored answer rather than say nothing.
	wait := time.NewTicker(resolveRetry)
	defer wait.Stop()
	for a.status == http.StatusConflict && problemSlug(a) == "idempotency" {
		select {
		case <-ctx.Done():
			c.addFlash(s, "info", "This resolution is already under way (the same form sent twice): reload for its outcome.")
			return ec.Redirect(http.StatusSeeOther, back)
		case <-wait.C:
		}
		a = c.call(ctx, s.token, http.MethodPost, path, nil, body, key)
	}
	var it api.ItemView
	switch {
	case a.ok() && a.decode(&it) != nil:
		c.addFlash(s, "error", "Resolve: the API's answer could not be read; see the item below.")
	case a.ok() && a.header.Get(api.HeaderIdempotentReplayed) == "true":
		c.addFlash(s, "info", fmt.Sprintf("Item %d was already resolved by the same form: nothing more happened.", it.ID))
	case a.ok():
		text := fmt.Sprintf("Item %d resolved: %s.", it.ID, deref(it.Resolution))
		if it.AdjustmentRef != nil {
			text = fmt.Sprintf("Item %d resolved: %s, posted to the ledger as %s.", it.ID, deref(it.Resolution), *it.AdjustmentRef)
		}
		c.addFlash(s, "ok", text)
	default:
		c.addFlash(s, "error", fmt.Sprintf("Resolution of item %s refused: %s", id, a.problem()))
	}
	return ec.Redirect(http.StatusSeeOther, back)
}

// problemSlug is the part of a problem's type after the guide's "#": which
// of the API's problems it is.
func problemSlug(a answer) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(a.body, &p) != nil {
		return ""
	}
	_, slug, _ := strings.Cut(p.Type, "#")
	return slug
}
