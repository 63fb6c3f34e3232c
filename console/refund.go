package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/refund"
)

// refundForm is the payment page's Refund form (ops only).
type refundForm struct {
	Key     string
	Reasons []string
	// Amount is the form's default: what the API would refund now, by its
	// own figures (captured − refunded − open requests); "" when those
	// figures cannot be read, which asks the API for everything refundable.
	Amount string
	// None is set when nothing is left to refund: the page says so instead
	// of offering the form.
	None bool
}

// newRefundForm sets the form's default from a payment's amounts and its
// requests as the API reported them. It is only a default: the API decides,
// and the page shows its refusal (a 422 over the refundable amount) as it
// wrote it.
func newRefundForm(amounts refundAmounts, requests []api.RefundRequestView) refundForm {
	f := refundForm{Key: formKey(), Reasons: refund.Reasons}
	left, err := refundable(amounts, requests)
	switch {
	case err != nil:
	case !left.IsPositive():
		f.None = true
	default:
		f.Amount = ledger.Format(left, amounts.Currency)
	}
	return f
}

// refundAmounts are the figures of a payment a refund's default comes
// from, as the API wrote them: the payment page's and a double charge's.
type refundAmounts struct {
	Currency, AmountCaptured, AmountRefunded string
}

func refundable(p refundAmounts, requests []api.RefundRequestView) (decimal.Decimal, error) {
	captured, err := decimal.NewFromString(p.AmountCaptured)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("amount captured: %w", err)
	}
	refunded, err := decimal.NewFromString(p.AmountRefunded)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("amount refunded: %w", err)
	}
	left := captured.Sub(refunded)
	for _, r := range requests {
		if !r.State.Open() {
			continue // settled: in amount_refunded, or refundable again
		}
		a, err := decimal.NewFromString(r.Amount)
		if err != nil {
			return decimal.Decimal{}, fmt.Errorf("refund request %s: %w", r.ID, err)
		}
		left = left.Sub(a)
	}
	return left, nil
}

// openRefunds reports whether a request still waits for the provider: the
// page then offers to reload for its progress.
func openRefunds(requests []api.RefundRequestView) bool {
	for _, r := range requests {
		if r.State.Open() {
			return true
		}
	}
	return false
}

// refundRetry is how often a refund sent twice asks again for the first
// one's answer; actionContext bounds how long.
const refundRetry = 100 * time.Millisecond

// fromDoubleCharges is the Refund form's return on the double charges'
// page.
const fromDoubleCharges = "double-charges"

// refund asks the API for a refund with the form's Idempotency-Key: a
// double click, or the form sent again, is one refund request. The page it
// comes back to is the payment's, or the double charges' it was sent from.
func (c *Console) refund(ec echo.Context) error {
	s := sessionIn(ec)
	id := ec.Param("id")
	back := basePath + "/payments?" + url.Values{"id": {id}}.Encode()
	progress := "its progress shows below"
	if ec.FormValue("return") == fromDoubleCharges {
		// Sent from the double charges' page, it comes back there: one
		// value, not a path from the form, so no form leads elsewhere.
		back = basePath + "/double-charges"
		progress = "the double charge resolves once " + id + "'s provider confirms it"
	}
	key := ec.FormValue("idempotency_key")
	if key == "" {
		return c.refuse(ec, http.StatusBadRequest, "This form has no Idempotency-Key: reload the page and try again.")
	}
	body := api.RefundBody{Reason: ec.FormValue("reason"), Note: strings.TrimSpace(ec.FormValue("note"))}
	if a := strings.TrimSpace(ec.FormValue("amount")); a != "" {
		body.Amount = &a
	}
	ctx, cancel := actionContext(ec)
	defer cancel()
	a := c.call(ctx, s.token, http.MethodPost, apiPath("payments", id, "refunds"), nil, body, key)
	// A second click reaching the API while the first is still being
	// processed gets 409 (the key is in use). Sent again with the same key
	// once the first is done, it gets the first's stored answer, so the
	// page this click lands on shows the request rather than an empty
	// table and "already under way".
	wait := time.NewTicker(refundRetry)
	defer wait.Stop()
	for a.status == http.StatusConflict {
		select {
		case <-ctx.Done():
			c.addFlash(s, "info", "This refund is already under way (the same form sent twice): reload for its request.")
			return ec.Redirect(http.StatusSeeOther, back)
		case <-wait.C:
		}
		a = c.call(ctx, s.token, http.MethodPost, apiPath("payments", id, "refunds"), nil, body, key)
	}
	var r api.RefundRequestView
	switch {
	case a.ok() && a.decode(&r) != nil:
		c.addFlash(s, "error", "Refund: the API's answer could not be read; see the refund requests below.")
	case a.ok() && a.header.Get(api.HeaderIdempotentReplayed) == "true":
		c.addFlash(s, "info", fmt.Sprintf("This refund was already requested by the same form (%s): nothing more happened.", r.ID))
	case a.ok():
		c.addFlash(s, "ok", fmt.Sprintf("Refund of %s requested (%s): %s.", money(r.Amount, r.Currency), r.ID, progress))
	default:
		c.addFlash(s, "error", "Refund refused: "+a.problem())
	}
	return ec.Redirect(http.StatusSeeOther, back)
}
