package adyen

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/paygate/paygate/provider"
)

var _ provider.Refunder = (*API)(nil)

// DefaultCheckoutURL is Adyen's Checkout API on the test platform, with the
// version paygate speaks. Live accounts use their own prefix:
// https://{prefix}-checkout-live.adyenpayments.com/checkout/v71.
const DefaultCheckoutURL = "https://checkout-test.adyen.com/checkout/v71"

// MaxIdempotencyKey is the longest Idempotency-Key Adyen takes.
const MaxIdempotencyKey = 64

// maxResponse bounds what is read of an answer: Adyen's are a few hundred
// bytes.
const maxResponse = 64 << 10

// defaultCallTimeout bounds one call when the caller's context has no
// earlier deadline.
const defaultCallTimeout = 30 * time.Second

// Errors of NewAPI and Refund.
var (
	// ErrAPIConfig: the API key, merchant account or URL is missing or
	// unusable.
	ErrAPIConfig = errors.New("adyen API configuration")
	// ErrNoIdempotencyKey: a refund was asked for without an idempotency
	// key. It is a bug in the caller, never sent: without the key a retry
	// could refund twice.
	ErrNoIdempotencyKey = errors.New("refund request without an idempotency key")
)

// APIConfig configures API.
type APIConfig struct {
	// APIKey is the web service user's API key (PAYGATE_ADYEN_API_KEY).
	APIKey string
	// MerchantAccount is the account refunds are made from
	// (PAYGATE_ADYEN_MERCHANT_ACCOUNT).
	MerchantAccount string
	// CheckoutURL is the Checkout API's base, version included;
	// DefaultCheckoutURL if empty.
	CheckoutURL string
	// Timeout bounds one call; 30s if zero. The caller's context may end it
	// sooner.
	Timeout time.Duration
	// Client sends the calls; a client that follows no redirect if nil.
	Client *http.Client
}

// API calls Adyen's Checkout API: the one call paygate makes, a refund.
// Adyen's Go library is not available here; the call is small enough to
// write with net/http.
type API struct {
	key, merchant, base string
	timeout             time.Duration
	client              *http.Client
}

// NewAPI returns a client for cfg. It fails with ErrAPIConfig when the key
// or merchant account is empty, or the URL is not absolute http(s).
func NewAPI(cfg APIConfig) (*API, error) {
	if strings.TrimSpace(cfg.APIKey) == "" || strings.TrimSpace(cfg.MerchantAccount) == "" {
		return nil, fmt.Errorf("%w: an API key and a merchant account are required", ErrAPIConfig)
	}
	base := strings.TrimRight(cfg.CheckoutURL, "/")
	if base == "" {
		base = DefaultCheckoutURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("%w: checkout URL %q is not an absolute http(s) URL", ErrAPIConfig, base)
	}
	a := &API{key: cfg.APIKey, merchant: cfg.MerchantAccount, base: base, timeout: cfg.Timeout, client: cfg.Client}
	if a.timeout <= 0 {
		a.timeout = defaultCallTimeout
	}
	if a.client == nil {
		a.client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return a, nil
}

// IdempotencyKey is the Idempotency-Key sent for a request's key: the key
// itself when Adyen takes it (at most 64 characters), otherwise its
// SHA-256 in hex (64 characters). The same key always gives the same
// header, on every retry and in every process.
func IdempotencyKey(key string) string {
	if len(key) <= MaxIdempotencyKey {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// merchantRefundReasons maps paygate's (Stripe's) reasons to Adyen's.
var merchantRefundReasons = map[string]string{
	"duplicate":             "DUPLICATE",
	"fraudulent":            "FRAUD",
	"requested_by_customer": "CUSTOMER REQUEST",
}

type amount struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

// refundBody is Checkout's PaymentRefundRequest, with the fields paygate
// sends.
type refundBody struct {
	MerchantAccount      string `json:"merchantAccount"`
	Amount               amount `json:"amount"`
	Reference            string `json:"reference,omitempty"`
	MerchantRefundReason string `json:"merchantRefundReason,omitempty"`
}

// refundAnswer is Checkout's PaymentRefundResponse.
type refundAnswer struct {
	PspReference        string `json:"pspReference"`
	PaymentPspReference string `json:"paymentPspReference"`
	Status              string `json:"status"`
}

// ServiceError is the body of Adyen's error answers.
type ServiceError struct {
	Status       int    `json:"status"`
	ErrorCode    string `json:"errorCode"`
	Message      string `json:"message"`
	ErrorType    string `json:"errorType"`
	PspReference string `json:"pspReference,omitempty"`
}

func (e *ServiceError) Error() string {
	msg := fmt.Sprintf("adyen answered %d %s %s: %s", e.Status, e.ErrorType, e.ErrorCode, e.Message)
	if e.PspReference != "" {
		msg += " (" + e.PspReference + ")"
	}
	return msg
}

// errorCodeInProgress is Adyen's error for a request whose
// Idempotency-Key is still being processed: the refund may yet be made.
const errorCodeInProgress = "704"

// Refund asks Adyen for r with POST /payments/{r.PaymentID}/refunds: the
// amount in Adyen's minor units (see ToMinor), r.Reference as the
// refund's reference (Adyen's REFUND webhook carries it back as
// merchantReference), and IdempotencyKey(r.IdempotencyKey) as the
// Idempotency-Key, so that Adyen makes the refund once however often it is
// asked. Adyen answers 201 with the refund's pspReference and status
// "received": the outcome comes later, in the REFUND webhook.
//
// It fails with ErrNoIdempotencyKey, without calling Adyen, when the key is
// empty. It fails with an error wrapping provider.ErrRefundRefused (and
// provider.ErrAPI and a *ServiceError when Adyen answered) when the refund
// definitely did not happen: r is invalid (checked before any call), or
// Adyen answered 400 or 422 (validation: an amount above what is left to
// refund, a payment that cannot be refunded), or 404 with its error body.
// Anything else wraps provider.ErrAPI only and is indeterminate: network
// errors, timeouts, ctx's end, 5xx, 429, 422 with error code 704 (the key
// is still being processed), 401 and 403 (the API key is wrong, not the
// refund), a 2xx without a pspReference. No error carries the API key.
func (a *API) Refund(ctx context.Context, r provider.RefundRequest) (provider.RefundResult, error) {
	if strings.TrimSpace(r.IdempotencyKey) == "" {
		return provider.RefundResult{}, fmt.Errorf("refund %s: %w", r.PaymentID, ErrNoIdempotencyKey)
	}
	body, err := a.refundBody(r)
	if err != nil {
		return provider.RefundResult{}, fmt.Errorf("%w: refund %s: %w", provider.ErrRefundRefused, r.PaymentID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	endpoint := a.base + "/payments/" + url.PathEscape(r.PaymentID) + "/refunds"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return provider.RefundResult{}, fmt.Errorf("%w: refund %s: build request: %w", provider.ErrAPI, r.PaymentID, err)
	}
	req.Header.Set("X-API-Key", a.key)
	req.Header.Set("Idempotency-Key", IdempotencyKey(r.IdempotencyKey))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	res, err := a.client.Do(req)
	if err != nil {
		return provider.RefundResult{}, fmt.Errorf("%w: refund %s: %w", provider.ErrAPI, r.PaymentID, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxResponse))
	if err != nil {
		return provider.RefundResult{}, fmt.Errorf("%w: refund %s: read answer %d: %w", provider.ErrAPI, r.PaymentID, res.StatusCode, err)
	}
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		var ans refundAnswer
		if err := json.Unmarshal(raw, &ans); err != nil || ans.PspReference == "" {
			return provider.RefundResult{}, fmt.Errorf("%w: refund %s: adyen answered %d without a pspReference", provider.ErrAPI, r.PaymentID, res.StatusCode)
		}
		return provider.RefundResult{ProviderRefundID: ans.PspReference, Status: ans.Status}, nil
	}
	return provider.RefundResult{}, refundErr(r.PaymentID, res, raw)
}

func (a *API) refundBody(r provider.RefundRequest) ([]byte, error) {
	if r.PaymentID == "" {
		return nil, errors.New("no payment pspReference")
	}
	if !r.Amount.IsPositive() {
		return nil, fmt.Errorf("amount %s %s is not positive", r.Amount, r.Currency)
	}
	minor, err := ToMinor(r.Amount, r.Currency)
	if err != nil {
		return nil, err
	}
	b := refundBody{
		MerchantAccount: a.merchant,
		Amount:          amount{Currency: strings.ToUpper(r.Currency), Value: minor},
		Reference:       r.Reference,
	}
	if r.Reason != "" {
		reason, ok := merchantRefundReasons[r.Reason]
		if !ok {
			return nil, fmt.Errorf("reason %q has no Adyen merchantRefundReason", r.Reason)
		}
		b.MerchantRefundReason = reason
	}
	return json.Marshal(b)
}

// refundErr classifies a non-2xx answer; see Refund.
func refundErr(paymentID string, res *http.Response, raw []byte) error {
	se := &ServiceError{}
	if err := json.Unmarshal(raw, se); err != nil || (se.ErrorType == "" && se.Message == "") {
		return fmt.Errorf("%w: refund %s: adyen answered %d", provider.ErrAPI, paymentID, res.StatusCode)
	}
	if se.Status == 0 {
		se.Status = res.StatusCode
	}
	if refused(res, se) {
		return fmt.Errorf("%w: %w: refund %s: %w", provider.ErrAPI, provider.ErrRefundRefused, paymentID, se)
	}
	return fmt.Errorf("%w: refund %s: %w", provider.ErrAPI, paymentID, se)
}

// refused reports whether Adyen definitely refused the refund.
func refused(res *http.Response, se *ServiceError) bool {
	if se.ErrorCode == errorCodeInProgress || strings.EqualFold(res.Header.Get("Transient-Error"), "true") {
		return false
	}
	switch res.StatusCode {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusNotFound:
		return true
	}
	return false
}
