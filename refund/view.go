package refund

import (
	"time"

	"github.com/paygate/paygate/ledger"
)

// View is a refund request as the API shows it and as the messages of its
// settlement carry it: one shape, so a consumer reads the same object from
// both.
type View struct {
	ID               string    `json:"id"`
	PaymentID        string    `json:"payment_id"`
	Amount           string    `json:"amount"`
	Currency         string    `json:"currency"`
	Reason           *string   `json:"reason"`
	Note             *string   `json:"note"`
	State            State     `json:"state"`
	ProviderRefundID *string   `json:"provider_refund_id"`
	FailureReason    *string   `json:"failure_reason"`
	Actor            string    `json:"actor"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// View renders r.
func (r Request) View() View {
	return View{
		ID: r.ID, PaymentID: r.PaymentID, Amount: ledger.Format(r.Amount, r.Currency), Currency: r.Currency,
		Reason: nullable(r.Reason), Note: nullable(r.Note), State: r.State,
		ProviderRefundID: nullable(r.ProviderRefundID), FailureReason: nullable(r.FailureReason),
		Actor: r.Actor, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
	}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
