package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	stripego "github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
)

var _ provider.Refunder = (*API)(nil)

// ErrNoIdempotencyKey: a refund was asked for without an idempotency key.
// It is a bug in the caller, never sent: without the key a retry could
// refund twice.
var ErrNoIdempotencyKey = errors.New("refund request without an idempotency key")

// refundReasons are the reasons Stripe takes when a refund is created
// (expired_uncaptured_charge is one Stripe sets itself).
var refundReasons = map[string]bool{"duplicate": true, "fraudulent": true, "requested_by_customer": true}

// Refund asks Stripe for r with POST /v1/refunds: by payment_intent for a
// pi_… payment, otherwise by charge; the amount in Stripe's minor units
// (the ledger's exponents are Stripe's); r.Reference as metadata under
// provider.RefundReferenceKey; and r.IdempotencyKey as the Idempotency-Key,
// so that Stripe makes the refund once however often it is asked.
// stripe-go's own network retries (APIConfig.MaxNetworkRetries) resend the
// same key, which is what makes them safe; it does not retry once ctx is
// done.
//
// It fails with ErrNoIdempotencyKey, without calling Stripe, when the key is
// empty. It fails with an error wrapping provider.ErrRefundRefused when the
// refund definitely did not happen and asking again cannot help: r is
// invalid (checked before any call: amount, currency, reason), or Stripe
// refused it with a card_error, an invalid_request_error (amount_too_large,
// charge_already_refunded, resource_missing…) or an idempotency_error (the
// key was used with other parameters), answered with 400, 402 or 404; such
// errors wrap provider.ErrAPI too when Stripe answered, and the
// *stripe.Error, for errors.As. Anything else wraps provider.ErrAPI only
// and is indeterminate: network errors, timeouts, ctx's end, 5xx and
// api_error, 429 (rate limits, lock timeouts), 409 (the key in use by a
// concurrent request), and 401 or 403, which mean the API key is wrong, not
// the refund. No error carries the API key.
func (s *API) Refund(ctx context.Context, r provider.RefundRequest) (provider.RefundResult, error) {
	if strings.TrimSpace(r.IdempotencyKey) == "" {
		return provider.RefundResult{}, fmt.Errorf("refund %s: %w", r.PaymentID, ErrNoIdempotencyKey)
	}
	params, err := refundParams(r)
	if err != nil {
		return provider.RefundResult{}, fmt.Errorf("%w: refund %s: %w", provider.ErrRefundRefused, r.PaymentID, err)
	}
	params.Context = ctx
	params.SetIdempotencyKey(r.IdempotencyKey)
	re, err := s.api.Refunds.New(params)
	if err != nil {
		return provider.RefundResult{}, refundErr(r.PaymentID, err)
	}
	return provider.RefundResult{ProviderRefundID: re.ID, Status: string(re.Status)}, nil
}

func refundParams(r provider.RefundRequest) (*stripego.RefundParams, error) {
	if r.PaymentID == "" {
		return nil, errors.New("no payment id")
	}
	if !r.Amount.IsPositive() {
		return nil, fmt.Errorf("amount %s %s is not positive", r.Amount, r.Currency)
	}
	minor, err := ledger.ToMinor(r.Amount, r.Currency)
	if err != nil {
		return nil, err
	}
	if r.Reason != "" && !refundReasons[r.Reason] {
		return nil, fmt.Errorf("reason %q is not one of Stripe's: duplicate, fraudulent, requested_by_customer", r.Reason)
	}
	params := &stripego.RefundParams{Amount: stripego.Int64(minor)}
	if strings.HasPrefix(r.PaymentID, "pi_") {
		params.PaymentIntent = stripego.String(r.PaymentID)
	} else {
		params.Charge = stripego.String(r.PaymentID)
	}
	if r.Reason != "" {
		params.Reason = stripego.String(r.Reason)
	}
	if r.Reference != "" {
		params.AddMetadata(provider.RefundReferenceKey, r.Reference)
	}
	return params, nil
}

// refundErr classifies a failed refund call; see Refund.
func refundErr(paymentID string, err error) error {
	var se *stripego.Error
	if !errors.As(err, &se) {
		return fmt.Errorf("%w: refund %s: %w", provider.ErrAPI, paymentID, err)
	}
	// Stripe's own message, never its error's JSON (which carries the
	// request log URL and, for a payment intent, the whole object).
	msg := fmt.Sprintf("refund %s: stripe answered %d %s", paymentID, se.HTTPStatusCode, se.Type)
	if se.Code != "" {
		msg += " " + string(se.Code)
	}
	msg += ": " + se.Msg
	if se.RequestID != "" {
		msg += " (" + se.RequestID + ")"
	}
	if refused(se) {
		return &refundError{msg: msg, errs: []error{provider.ErrAPI, provider.ErrRefundRefused, se}}
	}
	return &refundError{msg: msg, errs: []error{provider.ErrAPI, se}}
}

// refused reports whether Stripe definitely refused the refund. The status
// decides as much as the type: a concurrent request with the same key is a
// 409 idempotency_error, and a rate limit a 429 invalid_request_error, and
// both may be followed by the refund.
func refused(se *stripego.Error) bool {
	switch se.Type {
	case stripego.ErrorTypeCard, stripego.ErrorTypeInvalidRequest, stripego.ErrorTypeIdempotency:
	default:
		return false
	}
	switch se.HTTPStatusCode {
	case http.StatusBadRequest, http.StatusPaymentRequired, http.StatusNotFound:
		return true
	}
	return false
}

// refundError is a Stripe answer to a refund: its message is Stripe's, and
// it matches the sentinels it was classified as and the *stripe.Error.
type refundError struct {
	msg  string
	errs []error
}

func (e *refundError) Error() string {
	var sentinels []string
	for _, err := range e.errs[:len(e.errs)-1] {
		sentinels = append(sentinels, err.Error())
	}
	return strings.Join(sentinels, ": ") + ": " + e.msg
}

func (e *refundError) Unwrap() []error { return e.errs }
