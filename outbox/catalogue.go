package outbox

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/refund"
	"github.com/paygate/paygate/statemachine"
)

// The message types besides payment.<status> (PaymentType).
const (
	TypeRefundRequestSucceeded     = "refund_request.succeeded"
	TypeRefundRequestFailed        = "refund_request.failed"
	TypeReconciliationRunCompleted = "reconciliation_run.completed"
	TypeReconciliationRunFailed    = "reconciliation_run.failed"
)

// Types lists every message type, for filters and validation.
func Types() []string {
	types := make([]string, 0, len(statemachine.States)+4)
	for _, s := range statemachine.States {
		types = append(types, PaymentType(s))
	}
	return append(types, TypeRefundRequestSucceeded, TypeRefundRequestFailed,
		TypeReconciliationRunCompleted, TypeReconciliationRunFailed)
}

// PaymentType is the type of a message about a payment now in state s: the
// type names the status after the change, so a second partial refund is
// another payment.partially_refunded.
func PaymentType(s statemachine.State) string { return "payment." + string(s) }

// PaymentData is the data of a payment message.
type PaymentData struct {
	Payment PaymentView `json:"payment"`
}

// PaymentView is a payment as its messages show it: the API's amounts,
// with the status it left.
type PaymentView struct {
	ID             string              `json:"id"`
	Provider       string              `json:"provider"`
	Status         statemachine.State  `json:"status"`
	PreviousStatus *statemachine.State `json:"previous_status"`
	Currency       string              `json:"currency"`
	Amount         string              `json:"amount"`
	AmountCaptured string              `json:"amount_captured"`
	AmountRefunded string              `json:"amount_refunded"`
	AmountDisputed string              `json:"amount_disputed"`
	// The merchant's words about the payment: null ({} for metadata)
	// until an event carried them.
	Reference   *string           `json:"reference"`
	Customer    *string           `json:"customer"`
	Description *string           `json:"description"`
	Metadata    map[string]string `json:"metadata"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

// PaymentChanged reports whether after differs from before in what a
// payment message tells: its status, currency or any of its amounts.
func PaymentChanged(before, after statemachine.Summary) bool {
	return before.State != after.State || before.Currency != after.Currency ||
		!before.Amount.Equal(after.Amount) || !before.AmountCaptured.Equal(after.AmountCaptured) ||
		!before.AmountRefunded.Equal(after.AmountRefunded) || !before.AmountDisputed.Equal(after.AmountDisputed)
}

// PaymentMessage is the message of a change of p, whose status was
// previous (empty for its first message); p.MessageSequence must already
// count it, and p.UpdatedAt be the time of the change.
func PaymentMessage(p ledger.Payment, previous statemachine.State) (Message, error) {
	v := PaymentView{
		ID: p.ID, Provider: p.Provider, Status: p.State, Currency: p.Currency,
		Amount: amount(p.Amount, p.Currency), AmountCaptured: amount(p.AmountCaptured, p.Currency),
		AmountRefunded: amount(p.AmountRefunded, p.Currency), AmountDisputed: amount(p.AmountDisputed, p.Currency),
		UpdatedAt: p.UpdatedAt.UTC().Truncate(time.Microsecond),
		Reference: nullable(p.Details.Reference), Customer: nullable(p.Details.Customer),
		Description: nullable(p.Details.Description), Metadata: p.Details.Metadata,
	}
	if v.Metadata == nil {
		v.Metadata = map[string]string{}
	}
	if previous != "" {
		v.PreviousStatus = &previous
	}
	return New(AggregatePayment, p.ID, p.MessageSequence, PaymentType(p.State), p.UpdatedAt, PaymentData{Payment: v})
}

// nullable is s, or nil for "": a detail not known is null.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// amount formats a decimal as the API does: at its currency's scale, or
// plain for a payment seen without a currency yet.
func amount(d decimal.Decimal, currency string) string {
	if currency == "" {
		return d.String()
	}
	return ledger.Format(d, currency)
}

// RefundRequestData is the data of a refund request message.
type RefundRequestData struct {
	RefundRequest refund.View `json:"refund_request"`
}

// RefundRequestMessage is the message of r's settlement, as r now stands
// (settled, its MessageSequence counting this message).
func RefundRequestMessage(r refund.Request) (Message, error) {
	typ := TypeRefundRequestSucceeded
	if r.State == refund.StateFailed {
		typ = TypeRefundRequestFailed
	}
	return New(AggregateRefundRequest, r.ID, r.MessageSequence, typ, r.UpdatedAt, RefundRequestData{RefundRequest: r.View()})
}

// RunData is the data of a reconciliation run message.
type RunData struct {
	Run RunView `json:"run"`
}

// RunView is a finished reconciliation run as its message shows it: a
// provider's day (Date) or settlement batch (Batch).
type RunView struct {
	ID       int64          `json:"id"`
	Provider string         `json:"provider"`
	Date     string         `json:"date,omitempty"`
	Batch    *int64         `json:"batch,omitempty"`
	Status   string         `json:"status"`
	Summary  map[string]int `json:"summary"`
}

// RunMessage is the message of a run that finished at finishedAt: a run
// finishes once, so it has one message.
func RunMessage(v RunView, finishedAt time.Time) (Message, error) {
	typ := TypeReconciliationRunCompleted
	if v.Status == "failed" {
		typ = TypeReconciliationRunFailed
	}
	if v.Summary == nil {
		v.Summary = map[string]int{}
	}
	return New(AggregateReconciliationRun, fmt.Sprint(v.ID), 1, typ, finishedAt, RunData{Run: v})
}
