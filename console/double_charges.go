package console

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/refund"
)

// doubleChargeStates are the page's tabs, in the API's words.
var doubleChargeStates = []string{"open", "resolved", "dismissed"}

// doubleChargeLimit is a page of double charges: fewer than other lists,
// since ops' page reads each open one's payments' refund requests too.
const doubleChargeLimit = "20"

type doubleChargesData struct {
	State     string
	States    []string
	Charges   []doubleCharge
	NextQuery template.URL
}

// doubleCharge is a double charge as the page shows it, with ops' forms
// while it is open: a Refund form on each payment, and Dismiss.
type doubleCharge struct {
	api.DoubleChargeView
	Payments   []doubleChargePayment
	DismissKey string
}

type doubleChargePayment struct {
	api.DoubleChargePaymentView
	// Refund is the payment's Refund form; nil where none is offered.
	Refund *refundForm
	// OpenRefunds is set while a refund of it waits for its provider:
	// the double charge resolves when that refund settles, not before.
	OpenRefunds bool
	RefundsErr  string
}

// doubleCharges lists the double charges in one state, open by default,
// each with its payments as the API reports them.
func (c *Console) doubleCharges(ec echo.Context) error {
	s := sessionIn(ec)
	state := strings.TrimSpace(ec.QueryParam("state"))
	if state == "" {
		state = "open"
	}
	q := url.Values{"state": {state}, "limit": {doubleChargeLimit}}
	if cur := ec.QueryParam("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	ctx, cancel := readContext(ec)
	defer cancel()
	a := c.call(ctx, s.token, http.MethodGet, "/v1/ops/double-charges", q, nil, "")
	if !a.ok() {
		return c.apiFailed(ec, "Double charges", a)
	}
	var page api.DoubleChargePage
	if err := a.decode(&page); err != nil {
		return err
	}
	d := doubleChargesData{State: state, States: doubleChargeStates,
		NextQuery: nextQuery(url.Values{"state": {state}}, page.NextCursor)}
	for _, v := range page.DoubleCharges {
		dc := doubleCharge{DoubleChargeView: v, Payments: make([]doubleChargePayment, len(v.Payments))}
		actions := s.ops && v.State == ledger.DoubleChargeOpen
		if actions {
			dc.DismissKey = formKey()
		}
		for i, p := range v.Payments {
			dc.Payments[i] = doubleChargePayment{DoubleChargePaymentView: p}
			if !actions {
				continue
			}
			// The default amount and whether a refund is already on its
			// way come from the payment's requests, as on its own page.
			amounts := refundAmounts{Currency: p.Currency, AmountCaptured: p.AmountCaptured, AmountRefunded: p.AmountRefunded}
			r := c.call(ctx, s.token, http.MethodGet, apiPath("payments", p.ID, "refund-requests"), nil, nil, "")
			var list api.RefundRequestList
			if !r.ok() || r.decode(&list) != nil {
				dc.Payments[i].RefundsErr = "Refund requests: " + r.problem()
				// Without the open requests the default would be wrong:
				// the form asks for everything refundable, and the API
				// decides.
				dc.Payments[i].Refund = &refundForm{Key: formKey(), Reasons: refund.Reasons}
				continue
			}
			f := newRefundForm(amounts, list.RefundRequests)
			dc.Payments[i].Refund, dc.Payments[i].OpenRefunds = &f, openRefunds(list.RefundRequests)
		}
		d.Charges = append(d.Charges, dc)
	}
	return c.render(ec, http.StatusOK, "double_charges", "Double charges", d)
}

// dismissDoubleCharge asks the API to dismiss an open double charge, with
// ops' note and the form's Idempotency-Key: for an order its merchant
// meant to be paid in parts.
func (c *Console) dismissDoubleCharge(ec echo.Context) error {
	s := sessionIn(ec)
	back := basePath + "/double-charges"
	ref, note, key := ec.FormValue("reference"), strings.TrimSpace(ec.FormValue("note")), ec.FormValue("idempotency_key")
	switch {
	case key == "":
		return c.refuse(ec, http.StatusBadRequest, "This form has no Idempotency-Key: reload the page and try again.")
	case ref == "":
		return c.refuse(ec, http.StatusBadRequest, "This form names no double charge: reload the page and try again.")
	case note == "":
		c.addFlash(s, "error", "A dismissal needs a note: say why "+ref+" is rightly paid more than once (an order paid in parts, say).")
		return ec.Redirect(http.StatusSeeOther, back)
	}
	ctx, cancel := actionContext(ec)
	defer cancel()
	a := c.call(ctx, s.token, http.MethodPost, apiPath("ops", "double-charges", ref, "dismiss"), nil, map[string]string{"note": note}, key)
	switch {
	case a.ok() && a.header.Get(api.HeaderIdempotentReplayed) == "true":
		c.addFlash(s, "info", fmt.Sprintf("The double charge of %s was already dismissed by the same form: nothing more happened.", ref))
	case a.ok():
		c.addFlash(s, "ok", fmt.Sprintf("Dismissed the double charge of %s, with your note in the audit log.", ref))
	default:
		c.addFlash(s, "error", fmt.Sprintf("Dismissing the double charge of %s refused: %s", ref, a.problem()))
	}
	return ec.Redirect(http.StatusSeeOther, back)
}
