package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/statemachine"
)

// doubleChargeRoutes mounts the double charges: a merchant's reference
// paid more than once. Both roles read them (finance watches the money, ops
// refunds); only ops dismiss one.
func (s *Server) doubleChargeRoutes(v1 *echo.Group) {
	v1.GET("/ops/double-charges", s.listDoubleCharges, requireRole(RoleOps, RoleFinance))
	s.post(v1, "/ops/double-charges/:reference/dismiss", s.dismissDoubleCharge, DismissDoubleChargeRequest{}, RoleOps)
}

// DoubleChargeView is a double charge as the API shows it.
type DoubleChargeView struct {
	Reference  string                   `json:"reference"`
	State      ledger.DoubleChargeState `json:"state"`
	DetectedAt time.Time                `json:"detected_at"`
	// ResolvedAt is when it resolved or was dismissed; null while open.
	ResolvedAt *time.Time `json:"resolved_at"`
	// DismissedBy and Note are who dismissed it and why; null unless
	// dismissed.
	DismissedBy *string                   `json:"dismissed_by"`
	Note        *string                   `json:"note"`
	Payments    []DoubleChargePaymentView `json:"payments"`
}

// DoubleChargePaymentView is one payment of a double charge's reference,
// amounts as decimal strings at the currency's scale.
type DoubleChargePaymentView struct {
	ID             string             `json:"id"`
	Provider       string             `json:"provider"`
	Status         statemachine.State `json:"status"`
	Currency       string             `json:"currency"`
	AmountCaptured string             `json:"amount_captured"`
	AmountRefunded string             `json:"amount_refunded"`
}

// DoubleChargePage is the body of GET /v1/ops/double-charges.
type DoubleChargePage struct {
	DoubleCharges []DoubleChargeView `json:"double_charges"`
	NextCursor    *string            `json:"next_cursor"`
}

// DismissDoubleChargeRequest is the body of POST
// /v1/ops/double-charges/{reference}/dismiss.
type DismissDoubleChargeRequest struct {
	// Note says why the order was meant to be paid more than once;
	// required, at most maxReasonLen bytes. It is kept with the double
	// charge and in the audit log.
	Note string `json:"note"`
}

// NewDoubleChargeView renders d (used by the console as well).
func NewDoubleChargeView(d ledger.DoubleCharge) DoubleChargeView {
	v := DoubleChargeView{Reference: d.Reference, State: d.State, DetectedAt: d.DetectedAt.UTC(),
		DismissedBy: nullable(d.DismissedBy), Note: nullable(d.Note),
		Payments: make([]DoubleChargePaymentView, 0, len(d.Payments))}
	if d.ResolvedAt != nil {
		at := d.ResolvedAt.UTC()
		v.ResolvedAt = &at
	}
	for _, p := range d.Payments {
		v.Payments = append(v.Payments, DoubleChargePaymentView{ID: p.ID, Provider: p.Provider, Status: p.Status,
			Currency: p.Currency, AmountCaptured: amount(p.AmountCaptured, p.Currency),
			AmountRefunded: amount(p.AmountRefunded, p.Currency)})
	}
	return v
}

// doubleChargeStates are the values of ?state= on GET
// /v1/ops/double-charges.
var doubleChargeStates = []ledger.DoubleChargeState{ledger.DoubleChargeOpen, ledger.DoubleChargeResolved,
	ledger.DoubleChargeDismissed}

// listDoubleCharges answers the double charges, most recently detected
// first; ?state= narrows them to one state.
func (s *Server) listDoubleCharges(c echo.Context) error {
	page, err := pageOf(c)
	if err != nil {
		return err
	}
	f := ledger.DoubleChargeFilter{State: ledger.DoubleChargeState(c.QueryParam("state"))}
	if f.State != "" && !slices.Contains(doubleChargeStates, f.State) {
		return badRequest("state must be one of open, resolved, dismissed")
	}
	list, next, err := ledger.ListDoubleCharges(c.Request().Context(), s.config.Pool, f, page.Cursor, page.Limit)
	if err != nil {
		return cursorErr(err)
	}
	out := DoubleChargePage{DoubleCharges: make([]DoubleChargeView, 0, len(list)), NextCursor: nullable(next)}
	for _, d := range list {
		out.DoubleCharges = append(out.DoubleCharges, NewDoubleChargeView(d))
	}
	return writeJSON(c, http.StatusOK, out)
}

// dismissDoubleCharge marks an open double charge as meant (an order paid
// in parts), with ops' note, and records it in the audit log, both in the
// request's transaction: the same Idempotency-Key answers the first
// dismissal again.
func (s *Server) dismissDoubleCharge(c echo.Context) error {
	var body DismissDoubleChargeRequest
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	note := strings.TrimSpace(body.Note)
	if note == "" {
		return badRequest(`a dismissal needs a "note": who reads the audit log must know why the reference was paid twice`)
	}
	if len(note) > maxReasonLen {
		return badRequest("note is longer than %d bytes", maxReasonLen)
	}
	reference, err := pathParam(c, "reference")
	if err != nil {
		return err
	}
	tx, err := TxFrom(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	op := s.operation(c, note)
	d, err := ledger.DismissDoubleChargeTx(ctx, tx, reference, op.Actor, note)
	switch {
	case errors.Is(err, ledger.ErrDoubleChargeNotFound):
		return withDetail(ledger.ErrDoubleChargeNotFound, fmt.Sprintf("no double charge has reference %q", reference))
	case errors.Is(err, ledger.ErrDoubleChargeNotOpen):
		current, getErr := ledger.GetDoubleCharge(ctx, tx, reference)
		if getErr != nil {
			return getErr
		}
		// An answer, not a failure: stored under the key like any other.
		return answerError(c, withDetail(ledger.ErrDoubleChargeNotOpen,
			fmt.Sprintf("the double charge of %q is %s: only an open one can be dismissed", reference, current.State)))
	case err != nil:
		return err
	}
	if err := inbox.AppendAuditTx(ctx, tx, inbox.ActionDoubleChargeDismiss, op,
		inbox.Key{Provider: inbox.AuditProviderPayments, EventID: reference}); err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, NewDoubleChargeView(d))
}

// pathParam is the path parameter name as the client meant it. A merchant's
// reference may hold a "/", which a client sends as %2F: Echo then routes
// on the escaped path and leaves that parameter escaped, while elsewhere it
// has unescaped it already.
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	u, err := url.PathUnescape(v)
	if err != nil {
		return "", badRequest("%s is not a valid percent-encoded path segment", name)
	}
	return u, nil
}
