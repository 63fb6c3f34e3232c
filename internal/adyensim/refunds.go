package adyensim

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// CheckoutPath is where the simulated Checkout API is mounted: the base
// URL a client is configured with is the server's URL and this path, as
// Adyen's is https://checkout-test.adyen.com/checkout/v71.
const CheckoutPath = "/checkout/v71"

// CheckoutRefund is a refund the Checkout API took: Adyen's ledger of
// refunds asked through POST /payments/{paymentPspReference}/refunds.
type CheckoutRefund struct {
	PspReference        string
	PaymentPspReference string
	Value               int64
	Currency            string
	// Reference is the request's reference: the REFUND webhook carries it
	// as merchantReference.
	Reference            string
	MerchantRefundReason string
	IdempotencyKey       string
	// Settled is set once RefundOutcome reported it; Succeeded is its
	// outcome.
	Settled, Succeeded bool
}

// checkout is the Checkout API's state, under Sim.mu.
type checkout struct {
	apiKey  string
	answers map[string]storedAnswer // by Idempotency-Key
	refunds []*CheckoutRefund       // in the order they were made
	// refuse, when set, is the error the next refund is refused with.
	refuse *ServiceError
	// drops is how many of the next committed refunds lose their answer:
	// the connection is closed after the refund is made and its answer
	// stored under its key.
	drops int
	// holds is how many of the next committed refunds keep their answer
	// until ReleaseRefundAnswers; held are those waiting.
	holds int
	held  []heldAnswer
	// calls counts the refund requests received, replays included.
	calls int
}

type storedAnswer struct {
	bodyHash [32]byte
	status   int
	body     []byte
	// inProgress: the refund is made but Adyen is still working on the
	// request, so the answer is not out yet.
	inProgress bool
}

// heldAnswer is the answer of a refund held by HoldNextRefundAnswers;
// release is closed when it goes out.
type heldAnswer struct {
	key, psp string
	release  chan struct{}
}

func newCheckout(apiKey string) checkout {
	if apiKey == "" {
		apiKey = DefaultAPIKey
	}
	return checkout{apiKey: apiKey, answers: map[string]storedAnswer{}}
}

// ServiceError is the body of the Checkout API's error answers, in Adyen's
// shape.
type ServiceError struct {
	Status       int    `json:"status"`
	ErrorCode    string `json:"errorCode"`
	Message      string `json:"message"`
	ErrorType    string `json:"errorType"`
	PspReference string `json:"pspReference,omitempty"`
}

type refundRequest struct {
	MerchantAccount string `json:"merchantAccount"`
	Amount          *struct {
		Currency string `json:"currency"`
		Value    int64  `json:"value"`
	} `json:"amount"`
	Reference            string `json:"reference"`
	MerchantRefundReason string `json:"merchantRefundReason"`
}

type refundResponse struct {
	MerchantAccount     string `json:"merchantAccount"`
	PaymentPspReference string `json:"paymentPspReference"`
	PspReference        string `json:"pspReference"`
	Reference           string `json:"reference,omitempty"`
	Status              string `json:"status"`
	Amount              Amount `json:"amount"`
}

// APIKey is the key the Checkout API takes in X-API-Key.
func (s *Sim) APIKey() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkout.apiKey
}

// StartCheckout serves the Checkout API until the test ends; the client's
// base URL is the server's URL + CheckoutPath.
func (s *Sim) StartCheckout(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(s.CheckoutHandler())
	t.Cleanup(srv.Close)
	// Runs before srv.Close, which waits for every handler: a held answer
	// must not outlive the test.
	t.Cleanup(func() { s.ReleaseRefundAnswers() })
	return srv
}

// CheckoutHandler serves the Checkout API's refund endpoint,
// POST CheckoutPath/payments/{paymentPspReference}/refunds, as Adyen
// does: the X-API-Key checked (401), the merchant account checked (403),
// an Idempotency-Key's first answer replayed for the same body (409 with
// errorCode 704 while that answer is held), a refund
// above the captured amount not yet refunded refused (422, validation),
// and 201 {"pspReference","paymentPspReference","status":"received"}
// when the refund is taken. Its outcome is reported later by
// RefundOutcome, the REFUND webhook. It serves POST
// CheckoutPath/paymentMethods too, for credential checks.
func (s *Sim) CheckoutHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+CheckoutPath+"/payments/{psp}/refunds", s.serveRefund)
	mux.HandleFunc("POST "+CheckoutPath+"/paymentMethods", s.servePaymentMethods)
	return mux
}

// RefuseNextRefund makes the next refund request (not a replay) be refused
// with 422 and Adyen's error body: errorType validation, the code and
// message given.
func (s *Sim) RefuseNextRefund(errorCode, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkout.refuse = &ServiceError{Status: http.StatusUnprocessableEntity, ErrorCode: errorCode, Message: message, ErrorType: "validation"}
}

// DropNextRefundAnswers makes the next n refunds lose their answer: each
// is made, and its answer stored under its Idempotency-Key, then the
// connection is closed without a response, as when a timeout or a network
// cut hides Adyen's commit from the caller.
func (s *Sim) DropNextRefundAnswers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkout.drops = n
}

// HoldNextRefundAnswers makes the next n refunds keep their answer: each
// is made, then Adyen is still "processing" the request until
// ReleaseRefundAnswers. Meanwhile the caller waits with nothing on the
// wire (until it gives up or dies), and another request with the same
// Idempotency-Key is answered 409, errorCode 704 "request already
// processed or in progress", Transient-Error: true, as Adyen answers a key
// in use. Once released, the answer goes to a caller still waiting, and
// is replayed for the key.
func (s *Sim) HoldNextRefundAnswers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkout.holds = n
}

// ReleaseRefundAnswers lets every held answer out, and returns how many
// there were.
func (s *Sim) ReleaseRefundAnswers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.checkout.held)
	for _, h := range s.checkout.held {
		s.releaseLocked(h)
	}
	s.checkout.held = nil
	return n
}

// ReleaseRefundAnswer lets out the held answer of refund refundPSP, and
// reports whether it was held.
func (s *Sim) ReleaseRefundAnswer(refundPSP string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, h := range s.checkout.held {
		if h.psp == refundPSP {
			s.releaseLocked(h)
			s.checkout.held = slices.Delete(s.checkout.held, i, i+1)
			return true
		}
	}
	return false
}

func (s *Sim) releaseLocked(h heldAnswer) {
	if a, ok := s.checkout.answers[h.key]; ok {
		a.inProgress = false
		s.checkout.answers[h.key] = a
	}
	close(h.release)
}

// CheckoutRefunds returns copies of the refunds the Checkout API made, in
// the order it made them.
func (s *Sim) CheckoutRefunds() []CheckoutRefund {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CheckoutRefund, len(s.checkout.refunds))
	for i, r := range s.checkout.refunds {
		out[i] = *r
	}
	return out
}

// RefundCalls is how many refund requests the Checkout API received,
// replays and refusals included.
func (s *Sim) RefundCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkout.calls
}

// RefundOutcome settles refund refundPSP made through the Checkout API and
// returns the REFUND Adyen sends for it, signed: success "true", or
// "false" with reason, when the refund's amount is free to refund again.
// Its pspReference is the refund's, originalReference the payment's and
// merchantReference the reference the request sent. It panics for a
// refund the Checkout API did not make or one already settled.
func (s *Sim) RefundOutcome(refundPSP string, success bool, reason string) Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r *CheckoutRefund
	for _, c := range s.checkout.refunds {
		if c.PspReference == refundPSP {
			r = c
		}
	}
	if r == nil {
		panic(fmt.Sprintf("adyensim: RefundOutcome: %s is not a refund the Checkout API made", refundPSP))
	}
	if r.Settled {
		panic(fmt.Sprintf("adyensim: RefundOutcome: refund %s is already settled", refundPSP))
	}
	r.Settled, r.Succeeded = true, success
	p := s.payments[r.PaymentPspReference]
	if success {
		reason = ""
		s.moveLocked(RowRefunded, r.PspReference, p, r.Value).modMerchantRef = r.Reference
	} else {
		p.refunded -= r.Value
	}
	return s.itemLocked(EventRefund, r.PspReference, p, r.Value, success, reason, map[string]string{"paymentMethodVariant": paymentMethod})
}

// maxRequest bounds a request body: Adyen's refund requests are small.
const maxRequest = 64 << 10

func (s *Sim) serveRefund(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequest))
	if err != nil {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.checkout.calls++
	if r.Header.Get("X-API-Key") != s.checkout.apiKey {
		s.mu.Unlock()
		writeAnswer(w, "", http.StatusUnauthorized, errorBody(ServiceError{Status: 401, ErrorCode: "000",
			Message: "HTTP Status Response - Unauthorized", ErrorType: "security"}))
		return
	}
	if len(key) > 64 {
		s.mu.Unlock()
		writeAnswer(w, "", http.StatusBadRequest, errorBody(ServiceError{Status: 400, ErrorCode: "702",
			Message: "Idempotency-Key is longer than 64 characters", ErrorType: "validation"}))
		return
	}
	hash := sha256.Sum256(body)
	if prev, ok := s.checkout.answers[key]; ok && key != "" {
		s.mu.Unlock()
		if prev.bodyHash != hash {
			// Adyen documents no answer for a key reused with another
			// request; the simulator refuses it.
			writeAnswer(w, key, http.StatusUnprocessableEntity, errorBody(ServiceError{Status: 422, ErrorCode: "000",
				Message: "Idempotency-Key was used with another request", ErrorType: "validation"}))
			return
		}
		if prev.inProgress {
			w.Header().Set("Transient-Error", "true")
			writeAnswer(w, key, http.StatusConflict, errorBody(ServiceError{Status: 409, ErrorCode: "704",
				Message: "request already processed or in progress", ErrorType: "validation"}))
			return
		}
		writeAnswer(w, key, prev.status, prev.body)
		return
	}
	status, answer, drop, release := s.refundLocked(r.PathValue("psp"), key, body)
	if key != "" && status != http.StatusUnauthorized && status != http.StatusForbidden {
		s.checkout.answers[key] = storedAnswer{bodyHash: hash, status: status, body: answer, inProgress: release != nil}
	}
	s.mu.Unlock()
	if release != nil {
		select {
		case <-release:
		case <-r.Context().Done():
			return // the caller gave up; the answer stays stored for its key
		}
	}
	if drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	writeAnswer(w, key, status, answer)
}

// refundLocked decides a refund request and, when it is taken, makes the
// refund; drop reports that its answer is to be lost, release (when not
// nil) that it is held until closed.
func (s *Sim) refundLocked(paymentPSP, key string, body []byte) (status int, answer []byte, drop bool, release chan struct{}) {
	var req refundRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return http.StatusBadRequest, errorBody(ServiceError{Status: 400, ErrorCode: "702",
			Message: "Structure of PaymentRefundRequest contains the following unknown fields or is not valid JSON", ErrorType: "validation"}), false, nil
	}
	if req.MerchantAccount != s.merchant {
		return http.StatusForbidden, errorBody(ServiceError{Status: 403, ErrorCode: "901",
			Message: "Invalid Merchant Account", ErrorType: "security"}), false, nil
	}
	if req.Amount == nil || req.Amount.Value <= 0 {
		return http.StatusUnprocessableEntity, errorBody(ServiceError{Status: 422, ErrorCode: "137",
			Message: "Invalid amount specified", ErrorType: "validation"}), false, nil
	}
	p, ok := s.payments[paymentPSP]
	if !ok || !p.authorised {
		return http.StatusUnprocessableEntity, errorBody(ServiceError{Status: 422, ErrorCode: "167",
			Message: "Original pspReference required for this operation", ErrorType: "validation"}), false, nil
	}
	if refuse := s.checkout.refuse; refuse != nil {
		s.checkout.refuse = nil
		return refuse.Status, errorBody(*refuse), false, nil
	}
	if req.Amount.Currency != p.currency {
		return http.StatusUnprocessableEntity, errorBody(ServiceError{Status: 422, ErrorCode: "137",
			Message: "Invalid amount specified: currency " + req.Amount.Currency + " is not the payment's", ErrorType: "validation"}), false, nil
	}
	if req.Amount.Value > p.captured-p.refunded {
		return http.StatusUnprocessableEntity, errorBody(ServiceError{Status: 422, ErrorCode: "137",
			Message: fmt.Sprintf("Invalid amount specified: %d %s exceeds the %d captured and not refunded",
				req.Amount.Value, p.currency, p.captured-p.refunded), ErrorType: "validation"}), false, nil
	}
	psp := s.newPSPLocked()
	if req.Reference != "" {
		// Every item about the refund names it by its request's
		// reference (Adyen's Webhooks-v1 examples of REFUND,
		// REFUND_FAILED and REFUNDED_REVERSED carry the same
		// merchantReference).
		s.modRefs[psp] = req.Reference
	}
	p.refunds[psp] = true
	p.refunded += req.Amount.Value
	s.checkout.refunds = append(s.checkout.refunds, &CheckoutRefund{
		PspReference: psp, PaymentPspReference: p.psp, Value: req.Amount.Value, Currency: p.currency,
		Reference: req.Reference, MerchantRefundReason: req.MerchantRefundReason, IdempotencyKey: key,
	})
	answer, _ = json.Marshal(refundResponse{
		MerchantAccount: s.merchant, PaymentPspReference: p.psp, PspReference: psp, Reference: req.Reference,
		Status: "received", Amount: Amount{Currency: p.currency, Value: req.Amount.Value},
	})
	if s.checkout.drops > 0 {
		s.checkout.drops--
		drop = true
	}
	if s.checkout.holds > 0 {
		s.checkout.holds--
		release = make(chan struct{})
		s.checkout.held = append(s.checkout.held, heldAnswer{key: key, psp: psp, release: release})
	}
	return http.StatusCreated, answer, drop, release
}

func errorBody(e ServiceError) []byte {
	out, _ := json.Marshal(e) // strings and integers only
	return out
}

// writeAnswer answers as Adyen does: JSON, and the Idempotency-Key echoed.
func writeAnswer(w http.ResponseWriter, key string, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	if key != "" {
		w.Header().Set("Idempotency-Key", key)
	}
	w.WriteHeader(status)
	_, _ = io.Copy(w, bytes.NewReader(body))
}
