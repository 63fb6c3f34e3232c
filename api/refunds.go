package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/refund"
)

// refundRoutes mounts the refunds paygate starts: asking for one (ops,
// Idempotency-Key), and reading where they stand.
func (s *Server) refundRoutes(v1 *echo.Group) {
	anyRole := requireRole(RoleOps, RoleFinance)
	s.post(v1, "/payments/:payment_id/refunds", s.createRefund, RefundBody{}, RoleOps)
	v1.GET("/payments/:payment_id/refund-requests", s.listRefundRequests, anyRole)
	v1.GET("/refund-requests/:id", s.getRefundRequest, anyRole)
}

// RefundBody is the body of POST /v1/payments/{payment_id}/refunds.
type RefundBody struct {
	// Amount is a decimal string in the payment's major unit ("12.50");
	// omitted: everything refundable.
	Amount *string `json:"amount"`
	// Reason is one of Stripe's: duplicate, fraudulent,
	// requested_by_customer; optional.
	Reason string `json:"reason"`
	// Note is the operator's own words, kept with the request and in the
	// audit log.
	Note string `json:"note"`
}

// RefundRequestView is a refund request as the API shows it (and as the
// messages of its settlement carry it).
type RefundRequestView = refund.View

// RefundRequestList is a payment's refund requests, oldest first.
type RefundRequestList struct {
	RefundRequests []RefundRequestView `json:"refund_requests"`
}

// NewRefundRequestView renders r.
func NewRefundRequestView(r refund.Request) RefundRequestView { return r.View() }

func (s *Server) createRefund(c echo.Context) error {
	var body RefundBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	n := refund.New{
		PaymentID: c.Param("payment_id"), Reason: body.Reason, Note: strings.TrimSpace(body.Note),
		Actor: callerOf(c).Identity, IdempotencyKey: IdempotencyKeyOf(c),
		// Refused now, not accepted to fail later: nothing is recorded.
		CanRefund: s.config.Jobs.CanRefund,
	}
	if body.Amount != nil {
		amount, err := decimal.NewFromString(*body.Amount)
		if err != nil || strings.ContainsAny(*body.Amount, "eE") {
			return fmt.Errorf("%w: amount must be a decimal string such as \"12.50\"", refund.ErrInvalidRequest)
		}
		n.Amount = decimal.NewNullDecimal(amount)
	}
	tx, err := TxFrom(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	r, err := refund.CreateTx(ctx, tx, n)
	if errors.Is(err, refund.ErrUnsupportedProvider) {
		return fmt.Errorf("%w (%s)", err, refundClientSettings)
	}
	if err != nil {
		return err
	}
	if err := s.config.Jobs.InsertSubmitRefundTx(ctx, tx, r.ID); err != nil {
		return err
	}
	op := inbox.Operation{Actor: n.Actor, Reason: refundAuditReason(r), IdempotencyKey: n.IdempotencyKey}
	if err := inbox.AppendAuditTx(ctx, tx, inbox.ActionRefundRequest, op, inbox.Key{Provider: r.Provider, EventID: r.ID}); err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/refund-requests/"+r.ID)
	return writeJSON(c, http.StatusAccepted, NewRefundRequestView(r))
}

// refundClientSettings names what configures each provider's refund
// client, for the operator who meets a refusal.
const refundClientSettings = "Stripe: PAYGATE_STRIPE_API_KEY; Adyen: PAYGATE_ADYEN_API_KEY and PAYGATE_ADYEN_MERCHANT_ACCOUNT"

// refundAuditReason is what the audit log says of a request: its amount,
// payment and the operator's words.
func refundAuditReason(r refund.Request) string {
	why := fmt.Sprintf("refund %s %s of payment %s", ledger.Format(r.Amount, r.Currency), r.Currency, r.PaymentID)
	if r.Reason != "" {
		why += " (" + r.Reason + ")"
	}
	if r.Note != "" {
		why += ": " + r.Note
	}
	return why
}

func (s *Server) getRefundRequest(c echo.Context) error {
	r, err := refund.Get(c.Request().Context(), s.config.Pool, c.Param("id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, NewRefundRequestView(r))
}

func (s *Server) listRefundRequests(c echo.Context) error {
	rs, err := refund.ListForPayment(c.Request().Context(), s.config.Pool, c.Param("payment_id"))
	if err != nil {
		return err
	}
	out := RefundRequestList{RefundRequests: make([]RefundRequestView, 0, len(rs))}
	for _, r := range rs {
		out.RefundRequests = append(out.RefundRequests, NewRefundRequestView(r))
	}
	return writeJSON(c, http.StatusOK, out)
}
