package provider

import (
	"context"
	"errors"

	"github.com/shopspring/decimal"
)

// RefundReferenceKey is the metadata key under which a refund paygate asks
// for carries its request's id, so that the provider's reports of the
// refund (webhooks, lists) name the request they settle.
const RefundReferenceKey = "paygate_refund_request"

// RefundRequest is a refund paygate asks a provider to make.
type RefundRequest struct {
	// PaymentID is the provider's payment: a PaymentIntent (pi_…) or a
	// charge (ch_…) at Stripe.
	PaymentID string
	// Amount is in the currency's major unit, as the ledger holds it; the
	// provider converts it with its own exponents.
	Amount   decimal.Decimal
	Currency string
	// Reason is one of the provider's reasons, or empty.
	Reason string
	// IdempotencyKey is derived from the request (never random): every
	// retry, from any process, sends the same one, so that the provider
	// makes the refund once.
	IdempotencyKey string
	// Reference is paygate's request id, sent as metadata under
	// RefundReferenceKey.
	Reference string
}

// RefundResult is the provider's answer to a RefundRequest.
type RefundResult struct {
	ProviderRefundID string
	// Status is the provider's status of the refund (Stripe: pending,
	// succeeded, failed, canceled, requires_action).
	Status string
}

// Refunder makes refunds at a provider.
type Refunder interface {
	// Refund asks for r. It fails with an error wrapping ErrRefundRefused
	// when the provider definitely refused it (nothing happened, and
	// asking again cannot help); any other error is indeterminate (a
	// timeout, a reset connection, a 5xx or a 429: the refund may or may
	// not exist) and is retried with the same IdempotencyKey.
	Refund(ctx context.Context, r RefundRequest) (RefundResult, error)
}

// ErrRefundRefused: the provider definitely refused a refund (Stripe: a
// card_error or an invalid_request_error, such as charge_already_refunded).
var ErrRefundRefused = errors.New("the provider refused the refund")
