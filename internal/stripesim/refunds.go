package stripesim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// IdempotencyKeyTTL is how long, on the simulator clock, an idempotency key
// is remembered after its first use. Stripe prunes keys once they are at
// least 24 hours old; the simulator forgets them at exactly 24 hours, so
// that a test can step over the edge.
const IdempotencyKeyTTL = 24 * time.Hour

// refundAPIState is what POST /v1/refunds keeps beside the objects: the
// idempotency keys it has seen and the knobs tests set. Sim.mu guards it.
type refundAPIState struct {
	keys   map[string]*idempotentRequest
	refuse []apiError // RefuseNextRefund, oldest first
	fail   []int      // FailNextRefundRequest, oldest first
	delayN int
	delay  time.Duration
}

// idempotentRequest is the first request made with a key. Until done, the
// endpoint is still running it and a second request with the key is a
// conflict; once done, answer is what every retry gets.
type idempotentRequest struct {
	fingerprint string
	firstUsed   time.Time
	done        bool
	answer      answer
}

// answer is a response as the idempotency layer stores it: the status, the
// body byte for byte, and the headers that belong to the answer rather than
// to the exchange (not Request-Id).
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) write(w http.ResponseWriter) {
	for k, vs := range a.header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

func jsonAnswer(status int, v any) answer {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("stripesim: encode answer: %v", err))
	}
	return answer{status: status, header: http.Header{}, body: buf.Bytes()}
}

func errorAnswer(status int, e apiError) answer {
	if e.Type == "" {
		e.Type = "invalid_request_error"
	}
	return jsonAnswer(status, map[string]apiError{"error": e})
}

// internalErrorMessage is the message of the 500 answers, worded as
// Stripe words its own.
const internalErrorMessage = "Sorry, something went wrong. We've already been notified of the problem, but if you need any help, you can reach us at support.stripe.com/contact."

// RefuseNextRefund makes the next POST /v1/refunds that reaches the endpoint
// (past the idempotency layer and parameter validation) answer an error of
// errType with code and message, creating nothing: 402 for card_error, 400
// for invalid_request_error. Like any answer of the endpoint it is stored
// under the request's idempotency key. Calls queue up, one per request. It
// panics on any other errType.
func (s *Sim) RefuseNextRefund(errType, code, message string) {
	status := map[string]int{"card_error": http.StatusPaymentRequired, "invalid_request_error": http.StatusBadRequest}[errType]
	if status == 0 {
		panic(fmt.Sprintf("stripesim: RefuseNextRefund: error type %q is neither card_error nor invalid_request_error", errType))
	}
	if message == "" {
		message = "The refund was refused."
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refundAPI.refuse = append(s.refundAPI.refuse, apiError{Type: errType, Code: code, Message: message})
}

// FailNextRefundRequest makes the next POST /v1/refunds fail with status,
// an api_error, before anything is created. Where it fails follows from
// the status, as at Stripe:
//
//   - 500: inside the API, after the idempotency layer took the key. The
//     answer is stored and replayed to every retry with the key until it
//     expires (Stripe replays 500s too), with Stripe-Should-Retry: false so
//     that stripe-go does not retry it in vain.
//   - 502, 503, 504: in front of the API. Nothing is stored: a retry with
//     the same key runs.
//
// Calls queue up, one per request. It panics on any other status.
func (s *Sim) FailNextRefundRequest(status int) {
	switch status {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
	default:
		panic(fmt.Sprintf("stripesim: FailNextRefundRequest: status %d is not 500, 502, 503 or 504", status))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refundAPI.fail = append(s.refundAPI.fail, status)
}

// DelayRefundAnswer makes the next n POST /v1/refunds that create a refund
// commit it, with its events, and then wait d, or until the request's
// context ends, before answering: the client times out although the refund
// exists. While one waits its idempotency key is in use (another request
// with it gets 409 idempotency_key_in_use); the answer is stored when the
// wait ends, whether or not the client is still there. A later call
// replaces the earlier one.
func (s *Sim) DelayRefundAnswer(n int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refundAPI.delayN, s.refundAPI.delay = n, d
}

// Refunds returns the refunds of a payment's charges, oldest first, as they
// are now. It panics on an unknown payment.
func (s *Sim) Refunds(p *Payment) []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, _ := s.intentLocked(p, "Refunds")
	var out []*refund
	for _, re := range s.refunds {
		if deref(re.PaymentIntent) == pi.ID {
			out = append(out, re)
		}
	}
	// Each refund's balance transaction is created with it, and the
	// transactions are kept in creation order.
	slices.SortFunc(out, func(a, b *refund) int {
		return s.txnIdx[deref(a.BalanceTransaction)] - s.txnIdx[deref(b.BalanceTransaction)]
	})
	handles := make([]Refund, len(out))
	for i, re := range out {
		handles[i] = *s.refundHandleLocked(re)
	}
	return handles
}

// RefundByID returns a refund as it is now, its metadata included; false if
// there is none with that id.
func (s *Sim) RefundByID(id string) (Refund, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	re, ok := s.refunds[id]
	if !ok {
		return Refund{}, false
	}
	return *s.refundHandleLocked(re), true
}

// createRefund serves POST /v1/refunds behind Stripe's idempotency layer:
// the first request with a key runs and its answer, success or error, is
// stored; a retry with the same key and parameters gets that answer again
// with Idempotent-Replayed: true; the key with other parameters is an
// idempotency_error, and while the first request still runs a second one
// is a conflict. Requests that fail validation store nothing, as no
// endpoint began executing. A request without a key is never deduplicated.
func (s *Sim) createRefund(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, apiError{Message: "Invalid request body: " + err.Error()})
		return
	}
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if key != "" {
		w.Header().Set("Idempotency-Key", key)
	}
	st := &s.refundAPI

	s.mu.Lock()
	if len(st.fail) > 0 && st.fail[0] != http.StatusInternalServerError {
		status := st.fail[0]
		st.fail = st.fail[1:]
		s.mu.Unlock()
		writeError(w, status, apiError{Type: "api_error", Message: internalErrorMessage})
		return
	}
	var first *idempotentRequest
	if key != "" {
		fp := r.Method + " " + r.URL.Path + "?" + r.PostForm.Encode()
		if p := st.keys[key]; p != nil && s.now.Before(p.firstUsed.Add(IdempotencyKeyTTL)) {
			prev := *p // the first request completes under s.mu
			s.mu.Unlock()
			switch {
			case prev.fingerprint != fp:
				writeError(w, http.StatusBadRequest, apiError{Type: "idempotency_error", Message: fmt.Sprintf(
					"Keys for idempotent requests can only be used with the same parameters they were first used with. "+
						"Try using a key other than '%s' if you meant to execute a different request.", key)})
			case !prev.done:
				writeError(w, http.StatusConflict, apiError{Type: "idempotency_error", Code: "idempotency_key_in_use", Message: fmt.Sprintf(
					"There is currently another in-progress request using this Idempotent Key (that probably means you "+
						"submitted twice, and the other request is still going through): %s. Please try again later.", key)})
			default:
				w.Header().Set("Idempotent-Replayed", "true")
				prev.answer.write(w)
			}
			return
		}
		if st.keys == nil {
			st.keys = map[string]*idempotentRequest{}
		}
		first = &idempotentRequest{fingerprint: fp, firstUsed: s.now}
		st.keys[key] = first
	}

	ans, stored, committed := s.createRefundLocked(r.PostForm, w.Header().Get("Request-Id"))
	if first != nil && !stored {
		delete(st.keys, key)
	}
	if committed && st.delayN > 0 {
		st.delayN--
		d := st.delay
		s.mu.Unlock()
		wait(r.Context(), d)
		s.mu.Lock()
	}
	if first != nil && stored {
		first.answer, first.done = ans, true
	}
	s.mu.Unlock()
	ans.write(w)
}

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// refundParams are the parameters of POST /v1/refunds the simulator models.
type refundParams struct {
	paymentIntent string
	charge        string
	amount        int64 // 0: all that is left
	reason        *string
	metadata      map[string]string
}

// unmodelledRefundParams are parameters Stripe takes that the simulator
// does not model: refused, rather than silently ignored.
var unmodelledRefundParams = []string{"currency", "customer", "expand", "instructions_email", "origin", "refund_application_fee", "reverse_transfer"}

// parseRefundParams validates the form. Its errors are the ones Stripe
// answers before the endpoint runs, so they are never stored under a key.
func parseRefundParams(form url.Values) (refundParams, *apiError) {
	p := refundParams{metadata: map[string]string{}}
	names := make([]string, 0, len(form))
	for name := range form {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		v := form[name][len(form[name])-1]
		switch {
		case name == "payment_intent":
			p.paymentIntent = v
		case name == "charge":
			p.charge = v
		case name == "amount":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return p, &apiError{Code: "parameter_invalid_integer", Param: name, Message: "Invalid integer: " + v}
			}
			if n <= 0 {
				return p, &apiError{Code: "parameter_invalid_integer", Param: name, Message: "Invalid positive integer"}
			}
			p.amount = n
		case name == "reason":
			switch v {
			case "duplicate", "fraudulent", "requested_by_customer":
				p.reason = &v
			default:
				return p, &apiError{Param: name, Message: "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer"}
			}
		case name == "metadata" && v == "":
		case strings.HasPrefix(name, "metadata[") && strings.HasSuffix(name, "]"):
			if k := name[len("metadata[") : len(name)-1]; k != "" && v != "" {
				p.metadata[k] = v
			}
		default:
			base, _, _ := strings.Cut(name, "[")
			if slices.Contains(unmodelledRefundParams, base) {
				return p, &apiError{Param: name, Message: "stripesim does not model the refund parameter " + name}
			}
			return p, &apiError{Code: "parameter_unknown", Param: name, Message: "Received unknown parameter: " + name}
		}
	}
	switch {
	case p.paymentIntent == "" && p.charge == "":
		return p, &apiError{Code: "parameter_missing", Message: "You must provide one of these parameters: charge, payment_intent."}
	case p.paymentIntent != "" && p.charge != "":
		return p, &apiError{Message: "You may only specify one of these parameters: charge, payment_intent."}
	}
	return p, nil
}

// createRefundLocked is the endpoint behind the idempotency layer. stored
// reports whether the idempotency layer keeps the answer; committed, that a
// refund was created.
func (s *Sim) createRefundLocked(form url.Values, requestID string) (ans answer, stored, committed bool) {
	st := &s.refundAPI
	if len(st.fail) > 0 {
		st.fail = st.fail[1:]
		ans = errorAnswer(http.StatusInternalServerError, apiError{Type: "api_error", Message: internalErrorMessage})
		ans.header.Set("Stripe-Should-Retry", "false")
		return ans, true, false
	}
	p, perr := parseRefundParams(form)
	if perr != nil {
		return errorAnswer(http.StatusBadRequest, *perr), false, false
	}
	if len(st.refuse) > 0 {
		e := st.refuse[0]
		st.refuse = st.refuse[1:]
		status := http.StatusBadRequest
		if e.Type == "card_error" {
			status = http.StatusPaymentRequired
		}
		return errorAnswer(status, e), true, false
	}
	ch, status, aerr := s.refundableChargeLocked(p)
	if aerr != nil {
		return errorAnswer(status, *aerr), true, false
	}
	left := ch.AmountCaptured - ch.AmountRefunded
	amount := p.amount
	if amount == 0 {
		amount = left
	}
	if amount > left {
		return errorAnswer(http.StatusBadRequest, apiError{Code: "amount_too_large", Param: "amount", Message: fmt.Sprintf(
			"Refund amount (%s) is greater than unrefunded amount on charge (%s)", formatAmount(amount, ch.Currency), formatAmount(left, ch.Currency))}), true, false
	}
	req := s.newRequestLocked()
	if requestID != "" {
		req = &requestID // the events name the API request that caused them
	}
	re := s.refundLocked(ch, amount, p.reason, p.metadata, req)
	return jsonAnswer(http.StatusOK, re), true, true
}

// refundableChargeLocked finds the charge p refunds and checks that some of
// it can be refunded, answering as Stripe does when it cannot.
func (s *Sim) refundableChargeLocked(p refundParams) (*charge, int, *apiError) {
	var ch *charge
	if p.paymentIntent != "" {
		pi, ok := s.intents[p.paymentIntent]
		if !ok {
			return nil, http.StatusNotFound, &apiError{Code: "resource_missing", Param: "payment_intent", Message: fmt.Sprintf("No such payment_intent: '%s'", p.paymentIntent)}
		}
		if pi.Status != "succeeded" || pi.LatestCharge == nil {
			return nil, http.StatusBadRequest, &apiError{Param: "payment_intent", Message: fmt.Sprintf("This PaymentIntent (%s) does not have a successful charge to refund.", pi.ID)}
		}
		ch = s.charges[*pi.LatestCharge]
	} else {
		var ok bool
		if ch, ok = s.charges[p.charge]; !ok {
			return nil, http.StatusNotFound, &apiError{Code: "resource_missing", Param: "charge", Message: fmt.Sprintf("No such charge: '%s'", p.charge)}
		}
	}
	switch {
	case ch.Status == "failed":
		return nil, http.StatusBadRequest, &apiError{Param: "charge", Message: fmt.Sprintf("Charge %s failed: there is nothing to refund.", ch.ID)}
	case !ch.Captured:
		return nil, http.StatusBadRequest, &apiError{Param: "charge", Message: fmt.Sprintf(
			"stripesim does not model refunding the uncaptured charge %s (Stripe releases the authorization): cancel the payment instead.", ch.ID)}
	case ch.AmountRefunded >= ch.AmountCaptured:
		return nil, http.StatusBadRequest, &apiError{Code: "charge_already_refunded", Message: fmt.Sprintf("Charge %s has already been refunded.", ch.ID)}
	}
	for _, dp := range s.disputs {
		// While a chargeback holds the funds, or once it is lost, the
		// customer already has the money back: Stripe refuses to refund it
		// a second time. An inquiry moves no money and stops nothing.
		if dp.Charge == ch.ID && len(dp.BalanceTransactions) > 0 && dp.Status != "won" {
			return nil, http.StatusBadRequest, &apiError{Code: "charge_disputed", Message: fmt.Sprintf("Charge %s has been charged back; cannot issue a refund.", ch.ID)}
		}
	}
	return ch, 0, nil
}

// formatAmount renders minor units as Stripe's error messages do: "$21.45".
func formatAmount(minor int64, currency string) string {
	exp := minorExponent(currency)
	v := decimal.New(minor, -exp).StringFixed(exp)
	if sym, ok := map[string]string{"usd": "$", "eur": "€", "gbp": "£", "jpy": "¥"}[currency]; ok {
		return sym + v
	}
	return v + " " + strings.ToUpper(currency)
}
