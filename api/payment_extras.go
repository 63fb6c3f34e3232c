package api

import (
	"github.com/labstack/echo/v4"

	"github.com/paygate/paygate/jobs"
)

// PaymentWithEmails is a payment's view with its email intents and where
// each stands (pending, sent, skipped, failed).
type PaymentWithEmails struct {
	PaymentView
	Emails []jobs.EmailRecord `json:"emails"`
}

// withPaymentExtras adds what other layers know about a payment (its
// emails) to its view.
func (s *Server) withPaymentExtras(c echo.Context, v PaymentView) (PaymentWithEmails, error) {
	emails, err := jobs.EmailsForPayment(c.Request().Context(), s.config.Pool, v.ID)
	if err != nil {
		return PaymentWithEmails{}, err
	}
	return PaymentWithEmails{PaymentView: v, Emails: emails}, nil
}
