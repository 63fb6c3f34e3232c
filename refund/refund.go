// Package refund owns the refunds paygate starts itself: the
// refund_requests table, the refundable amount (decided under the
// payment's row lock, never by a read-then-write race), and the saga's
// states: requested (recorded with its submit job, money reserved),
// submitted (the provider took it, under a key derived from the request),
// succeeded or failed (the provider's report, or a definite refusal, which
// releases the reservation).
//
// It must never call a provider (jobs' submit_refund worker does, through
// the provider's Refunder) nor post to the ledger: the ledger follows the
// provider's reports of the refund, whoever records it first.
package refund

import "errors"

// Sentinel errors of refund requests.
var (
	// ErrPaymentNotFound: no payment has that id.
	ErrPaymentNotFound = errors.New("payment not found")
	// ErrRequestNotFound: no refund request has that id.
	ErrRequestNotFound = errors.New("refund request not found")
	// ErrExceedsRefundable: the amount is more than the payment's
	// refundable amount (captured − refunded − refunds requested and not
	// failed).
	ErrExceedsRefundable = errors.New("amount exceeds what can be refunded")
	// ErrUnsupportedProvider: paygate cannot start refunds at the payment's
	// provider.
	ErrUnsupportedProvider = errors.New("refunds cannot be started at this payment's provider")
	// ErrInvalidRequest: the amount, reason or note is not acceptable.
	ErrInvalidRequest = errors.New("invalid refund request")
)
