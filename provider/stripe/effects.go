package stripe

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/statemachine"
	"github.com/paygate/paygate/strictjson"
)

// EventTypes are the Stripe event types Effects maps, in the order of its
// switch: the ones a webhook endpoint must be subscribed to (`paygate
// stripe-events` prints them). Every other type is stored and ignored.
var EventTypes = []string{
	"payment_intent.processing", "payment_intent.amount_capturable_updated",
	"payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled",
	"charge.succeeded", "charge.captured", "charge.failed", "charge.refunded", "charge.updated",
	"charge.refund.updated", "refund.created", "refund.updated", "refund.failed",
	"charge.dispute.created", "charge.dispute.funds_withdrawn",
	"charge.dispute.funds_reinstated", "charge.dispute.closed",
	"payout.paid", "payout.failed",
}

// The subset of Stripe's objects paygate reads. Decoding only these fields
// means an account pinned to another API version is never refused for it.
type (
	stripeEnvelope struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Created int64  `json:"created"`
		Data    struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	stripePaymentIntent struct {
		ID               string                     `json:"id"`
		Amount           *int64                     `json:"amount"`
		AmountReceived   *int64                     `json:"amount_received"`
		AmountCapturable *int64                     `json:"amount_capturable"`
		Currency         string                     `json:"currency"`
		LatestCharge     expandable                 `json:"latest_charge"` // an id, or the expanded object
		ReceiptEmail     string                     `json:"receipt_email"`
		Customer         expandable                 `json:"customer"` // an id, or the expanded object
		Description      string                     `json:"description"`
		Metadata         map[string]json.RawMessage `json:"metadata"`
		Charges          *struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		} `json:"charges"` // API versions before 2022-11-15
	}
	stripeCharge struct {
		ID             string                     `json:"id"`
		PaymentIntent  expandable                 `json:"payment_intent"`
		Amount         *int64                     `json:"amount"`
		AmountCaptured *int64                     `json:"amount_captured"`
		AmountRefunded *int64                     `json:"amount_refunded"`
		Captured       bool                       `json:"captured"`
		Created        int64                      `json:"created"`
		Currency       string                     `json:"currency"`
		ReceiptEmail   string                     `json:"receipt_email"`
		Customer       expandable                 `json:"customer"`
		Description    string                     `json:"description"`
		Metadata       map[string]json.RawMessage `json:"metadata"`
		BillingDetails struct {
			Email string `json:"email"`
		} `json:"billing_details"`
		Refunds *struct {
			Data []stripeRefund `json:"data"`
		} `json:"refunds"`
	}
	stripeRefund struct {
		ID            string            `json:"id"`
		Metadata      map[string]string `json:"metadata"`
		FailureReason string            `json:"failure_reason"`
		Amount        *int64            `json:"amount"`
		Charge        expandable        `json:"charge"`
		PaymentIntent expandable        `json:"payment_intent"`
		Currency      string            `json:"currency"`
		Status        string            `json:"status"`
		Created       int64             `json:"created"`
	}
	stripeDispute struct {
		ID            string     `json:"id"`
		Amount        *int64     `json:"amount"`
		Charge        expandable `json:"charge"`
		PaymentIntent expandable `json:"payment_intent"`
		Currency      string     `json:"currency"`
		Status        string     `json:"status"`
	}
	stripePayout struct {
		ID       string `json:"id"`
		Created  int64  `json:"created"`
		Amount   *int64 `json:"amount"`
		Currency string `json:"currency"`
	}
)

// Effects maps a Stripe event, as stored in the inbox, to its effects.
// It is pure: no clock, no I/O.
//
// It fails with an error wrapping provider.ErrIgnored for types paygate does not use,
// and with one wrapping provider.ErrPermanent for data that can never be applied
// (unreadable JSON, missing ids, missing or negative amounts, unknown
// currencies).
func Effects(payload []byte) (provider.Effects, error) {
	return effects(payload, DefaultReferenceKey)
}

// DefaultReferenceKey is the metadata key whose value is a payment's
// reference unless configured otherwise (PAYGATE_STRIPE_REFERENCE_KEY).
const DefaultReferenceKey = "order_id"

// NewMapper is the Mapper of an account whose payments carry their order
// reference under the metadata key referenceKey (DefaultReferenceKey when
// empty).
func NewMapper(referenceKey string) provider.Mapper {
	if referenceKey == "" {
		referenceKey = DefaultReferenceKey
	}
	return provider.MapperFunc(func(payload []byte) (provider.Effects, error) { return effects(payload, referenceKey) })
}

func effects(payload []byte, referenceKey string) (provider.Effects, error) {
	var env stripeEnvelope
	if err := strictjson.Unmarshal(payload, &env); err != nil {
		return provider.Effects{}, permanent("decode event: %v", err)
	}
	// The webhook refuses an envelope dated outside the window; an event
	// stored before it did, or recovered from the provider's list, is
	// checked here, so no nonsense date reaches the append-only ledger.
	at, err := strictjson.ValidUnix(env.Created)
	if err != nil {
		return provider.Effects{}, permanent("event created: %v", err)
	}
	m := mapper{eventID: env.ID, at: at, referenceKey: referenceKey}
	obj := env.Data.Object
	switch env.Type {
	case "payment_intent.processing", "payment_intent.amount_capturable_updated",
		"payment_intent.succeeded", "payment_intent.payment_failed", "payment_intent.canceled":
		err = m.paymentIntent(env.Type, obj)
	case "charge.succeeded", "charge.captured", "charge.failed", "charge.refunded", "charge.updated":
		err = m.charge(env.Type, obj)
	case "charge.refund.updated", "refund.created", "refund.updated", "refund.failed":
		var r stripeRefund
		if err = decode(obj, &r); err == nil {
			err = m.refund(r, env.Type == "refund.failed")
		}
	case "charge.dispute.created", "charge.dispute.funds_withdrawn",
		"charge.dispute.funds_reinstated", "charge.dispute.closed":
		err = m.dispute(env.Type, obj)
	case "payout.paid", "payout.failed":
		err = m.payout(env.Type, obj)
	default:
		return provider.Effects{}, fmt.Errorf("%w: %s", provider.ErrIgnored, env.Type)
	}
	if err != nil {
		return provider.Effects{}, err
	}
	if err := provider.Validate(m.out); err != nil {
		return provider.Effects{}, err
	}
	return m.out, nil
}

type mapper struct {
	eventID      string
	at           time.Time
	referenceKey string
	out          provider.Effects
}

// details records the merchant's words an object carries: the payment's
// own object's (its PaymentIntent, or the charge of a payment without one),
// or, from the charge of a PaymentIntent, the copy Stripe made of the
// PaymentIntent's when it created the charge. The copy names the order as
// soon as the first of Stripe's simultaneous events arrives, and gives way
// to the PaymentIntent's own words once they are seen (statemachine.Stamp).
func (m *mapper) details(customer expandable, description string, raw map[string]json.RawMessage, copied bool) {
	metadata := provider.StringValues(raw)
	m.out.Details = statemachine.Reported(metadata[m.referenceKey], idOf(customer), description, metadata,
		statemachine.Stamp{At: m.at, EventID: m.eventID, Copy: copied})
}

func permanent(format string, args ...any) error {
	return fmt.Errorf("%w: %s", provider.ErrPermanent, fmt.Sprintf(format, args...))
}

// decode reads data.object as every other reader of the stored payload
// (PostgreSQL's jsonb, an operator's jq) reads it: exact key names, no
// duplicates, valid text.
func decode(raw json.RawMessage, v any) error {
	if err := strictjson.Unmarshal(raw, v); err != nil {
		return permanent("decode data.object: %v", err)
	}
	return nil
}

// expandable is a reference Stripe sends as an id or, when expanded, as
// the object with its id: kept as its bytes (decoding them into any would
// cost a map per object) and read by idOf.
type expandable = json.RawMessage

// idOf reads an expandable reference's id: the string, or the expanded
// object's id; "" for null or anything else.
func idOf(raw expandable) string {
	switch {
	case len(raw) > 0 && raw[0] == '"':
		id, _ := provider.JSONString(raw)
		return id
	case len(raw) > 0 && raw[0] == '{':
		var obj struct {
			ID string `json:"id"`
		}
		if strictjson.Unmarshal(raw, &obj) == nil {
			return obj.ID
		}
	}
	return ""
}

// money converts a provider amount in minor units. A missing amount, a
// negative one or an unknown currency can never be applied.
func money(minor *int64, currency, what string) (decimal.Decimal, string, error) {
	if minor == nil {
		return decimal.Decimal{}, "", permanent("%s: missing amount", what)
	}
	cur := strings.ToLower(currency)
	amt, err := ledger.FromMinor(*minor, cur)
	if err != nil {
		return decimal.Decimal{}, "", fmt.Errorf("%w: %s: %w", provider.ErrPermanent, what, err)
	}
	return amt, cur, nil
}

func (m *mapper) fact(kind statemachine.FactKind, objectID string, amount decimal.Decimal, currency string) {
	m.out.Facts = append(m.out.Facts, statemachine.Fact{
		Kind: kind, ObjectID: objectID, Amount: amount, Currency: currency, EventID: m.eventID, At: m.at,
	})
}

func (m *mapper) post(t ledger.Transaction) { m.out.Postings = append(m.out.Postings, t) }

func (m *mapper) setPayment(ids ...string) error {
	for _, id := range ids {
		if id != "" {
			m.out.PaymentID = id
			return nil
		}
	}
	return permanent("event names no payment")
}

// capture records a charge captured by the event: a fact for the state and
// the one capture transaction of that charge, dated when the money moved.
// Only the events Stripe raises at the capture itself (charge.succeeded of a
// captured charge, charge.captured, payment_intent.succeeded) call it, and
// they date it at their own time: Stripe emits them together, so the
// capture's date does not depend on which arrives first. A charge's
// created is its authorization, days before a manual capture.
func (m *mapper) capture(chargeID string, amount decimal.Decimal, currency string) {
	m.fact(statemachine.FactCaptured, chargeID, amount, currency)
	m.post(ledger.NewCapture(CaptureRef(chargeID), m.out.PaymentID, m.eventID, currency, amount, m.at))
}

// objectTime is an object's own creation time, which every report of it
// shares, falling back to the event's time when the object has none. A
// created outside the sane window can never be applied.
func (m *mapper) objectTime(created int64, what string) (time.Time, error) {
	if created == 0 {
		return m.at, nil
	}
	at, err := strictjson.ValidUnix(created)
	if err != nil {
		return time.Time{}, permanent("%s.created: %v", what, err)
	}
	return at, nil
}

func (m *mapper) paymentIntent(typ string, obj json.RawMessage) error {
	var pi stripePaymentIntent
	if err := decode(obj, &pi); err != nil {
		return err
	}
	if err := m.setPayment(pi.ID); err != nil {
		return err
	}
	if pi.ReceiptEmail != "" {
		m.out.ReceiptEmail, m.out.ReceiptEmailKnown = pi.ReceiptEmail, true
	}
	m.details(pi.Customer, pi.Description, pi.Metadata, false)
	amount, cur, err := money(pi.Amount, pi.Currency, "payment_intent.amount")
	if err != nil {
		return err
	}
	if amount.IsPositive() {
		m.fact(statemachine.FactAmountKnown, pi.ID, amount, cur)
	}
	charge := idOf(pi.LatestCharge)
	if charge == "" && pi.Charges != nil && len(pi.Charges.Data) > 0 {
		charge = pi.Charges.Data[0].ID
	}
	switch typ {
	case "payment_intent.processing":
		m.fact(statemachine.FactProcessing, pi.ID, decimal.Decimal{}, cur)
	case "payment_intent.amount_capturable_updated":
		capturable := pi.AmountCapturable
		if capturable == nil || *capturable == 0 {
			capturable = pi.Amount
		}
		amt, cur, err := money(capturable, pi.Currency, "payment_intent.amount_capturable")
		if err != nil {
			return err
		}
		m.fact(statemachine.FactAuthorized, or(charge, pi.ID), amt, cur)
	case "payment_intent.succeeded":
		received, cur, err := money(pi.AmountReceived, pi.Currency, "payment_intent.amount_received")
		if err != nil {
			return err
		}
		// Without a charge id the capture cannot be given the ref that
		// charge.succeeded will use; that event posts it instead.
		if charge != "" && received.IsPositive() {
			m.capture(charge, received, cur)
		}
	case "payment_intent.payment_failed":
		m.fact(statemachine.FactPaymentFailed, pi.ID, decimal.Decimal{}, cur)
	case "payment_intent.canceled":
		m.fact(statemachine.FactCanceled, pi.ID, decimal.Decimal{}, cur)
	}
	return nil
}

func (m *mapper) charge(typ string, obj json.RawMessage) error {
	var ch stripeCharge
	if err := decode(obj, &ch); err != nil {
		return err
	}
	if ch.ID == "" {
		return permanent("charge without id")
	}
	if err := m.setPayment(idOf(ch.PaymentIntent), ch.ID); err != nil {
		return err
	}
	m.out.ReceiptEmail, m.out.ReceiptEmailKnown = or(ch.ReceiptEmail, ch.BillingDetails.Email), true
	m.details(ch.Customer, ch.Description, ch.Metadata, idOf(ch.PaymentIntent) != "")
	amount, cur, err := money(ch.Amount, ch.Currency, "charge.amount")
	if err != nil {
		return err
	}
	if amount.IsPositive() {
		m.fact(statemachine.FactAmountKnown, ch.ID, amount, cur)
	}
	if typ == "charge.failed" {
		m.fact(statemachine.FactPaymentFailed, ch.ID, decimal.Decimal{}, cur)
		return nil
	}
	if !ch.Captured && typ == "charge.succeeded" {
		m.fact(statemachine.FactAuthorized, ch.ID, amount, cur)
		return nil
	}
	captured := amount
	if ch.AmountCaptured != nil && *ch.AmountCaptured > 0 {
		if captured, _, err = money(ch.AmountCaptured, ch.Currency, "charge.amount_captured"); err != nil {
			return err
		}
	}
	switch {
	case !captured.IsPositive():
	case typ == "charge.succeeded" || typ == "charge.captured":
		m.capture(ch.ID, captured, cur)
	default:
		// charge.refunded and charge.updated report a captured charge but
		// not when it was captured: the state learns of the capture, and
		// the ledger posts it from the capture's own event, with its date.
		m.fact(statemachine.FactCaptured, ch.ID, captured, cur)
	}
	if typ != "charge.refunded" {
		return nil
	}
	if ch.Refunds != nil && len(ch.Refunds.Data) > 0 {
		for _, r := range ch.Refunds.Data {
			if r.Currency == "" {
				r.Currency = ch.Currency
			}
			if err := m.refund(r, false); err != nil {
				return err
			}
		}
		return nil
	}
	// Without refunds.data, amount_refunded is all we know: a floor for the
	// state, but no ledger transaction (it names no refund to key it by).
	if ch.AmountRefunded != nil && *ch.AmountRefunded > 0 {
		floor, cur, err := money(ch.AmountRefunded, ch.Currency, "charge.amount_refunded")
		if err != nil {
			return err
		}
		m.fact(statemachine.FactRefundedFloor, ch.ID, floor, cur)
	}
	return nil
}

// refund maps one refund object. A refund that failed (or was canceled)
// posts both its refund and the reversal: Stripe debits the balance when the
// refund is made and credits it back when it fails, and posting both from
// either report makes the outcome independent of the order they arrive in.
func (m *mapper) refund(r stripeRefund, failedEvent bool) error {
	if r.ID == "" {
		return permanent("refund without id")
	}
	if m.out.PaymentID == "" {
		if err := m.setPayment(idOf(r.PaymentIntent), idOf(r.Charge)); err != nil {
			return err
		}
	}
	amount, cur, err := money(r.Amount, r.Currency, "refund.amount")
	if err != nil {
		return err
	}
	// The refund took the money when it was created; a failure gives it
	// back when it fails, which is when Stripe raises the failure's events
	// (a refund object carries no failure time of its own).
	at, err := m.objectTime(r.Created, "refund")
	if err != nil {
		return err
	}
	status := r.Status
	if failedEvent {
		status = "failed"
	}
	switch status {
	case "succeeded", "failed", "canceled":
		rep := provider.RefundReport{Reference: r.Metadata[provider.RefundReferenceKey], ProviderRefundID: r.ID, Succeeded: status == "succeeded"}
		if !rep.Succeeded {
			rep.FailureReason = "Stripe reported the refund " + status
			if r.FailureReason != "" {
				rep.FailureReason += ": " + r.FailureReason
			}
		}
		m.out.Refunds = append(m.out.Refunds, rep)
	}
	switch status {
	case "succeeded":
		m.fact(statemachine.FactRefundSucceeded, r.ID, amount, cur)
		m.post(ledger.NewRefund(RefundRef(r.ID), m.out.PaymentID, m.eventID, cur, amount, at))
	case "failed", "canceled":
		m.fact(statemachine.FactRefundFailed, r.ID, amount, cur)
		m.post(ledger.NewRefund(RefundRef(r.ID), m.out.PaymentID, m.eventID, cur, amount, at))
		m.post(ledger.NewRefundReversal(RefundReversalRef(r.ID), m.out.PaymentID, m.eventID, cur, amount, m.at))
	}
	// pending and requires_action refunds have moved no money yet.
	return nil
}

func (m *mapper) dispute(typ string, obj json.RawMessage) error {
	var d stripeDispute
	if err := decode(obj, &d); err != nil {
		return err
	}
	if d.ID == "" {
		return permanent("dispute without id")
	}
	if err := m.setPayment(idOf(d.PaymentIntent), idOf(d.Charge)); err != nil {
		return err
	}
	amount, cur, err := money(d.Amount, d.Currency, "dispute.amount")
	if err != nil {
		return err
	}
	m.fact(statemachine.FactDisputeOpened, d.ID, decimal.Decimal{}, cur)
	switch typ {
	case "charge.dispute.funds_withdrawn":
		m.fact(statemachine.FactDisputeFundsWithdrawn, d.ID, amount, cur)
		m.post(ledger.NewDisputeWithdrawal(DisputeWithdrawalRef(d.ID), m.out.PaymentID, m.eventID, cur, amount, m.at))
	case "charge.dispute.funds_reinstated":
		m.fact(statemachine.FactDisputeFundsReinstated, d.ID, amount, cur)
		m.post(ledger.NewDisputeReinstatement(DisputeReinstatementRef(d.ID), m.out.PaymentID, m.eventID, cur, amount, m.at))
	case "charge.dispute.closed":
		switch d.Status {
		case "lost":
			m.fact(statemachine.FactDisputeClosedLost, d.ID, decimal.Decimal{}, cur)
		case "won", "warning_closed":
			m.fact(statemachine.FactDisputeClosedWon, d.ID, decimal.Decimal{}, cur)
		default:
			return permanent("dispute closed with status %q", d.Status)
		}
	}
	return nil
}

// payout maps a payout. Like refunds, a failed payout posts the payout and
// its reversal, so the order of paid and failed reports does not matter.
func (m *mapper) payout(typ string, obj json.RawMessage) error {
	var p stripePayout
	if err := decode(obj, &p); err != nil {
		return err
	}
	if p.ID == "" {
		return permanent("payout without id")
	}
	amount, cur, err := money(p.Amount, p.Currency, "payout.amount")
	if err != nil {
		return err
	}
	created, err := m.objectTime(p.Created, "payout")
	if err != nil {
		return err
	}
	m.post(ledger.NewPayout(PayoutRef(p.ID), m.eventID, cur, amount, created))
	if typ == "payout.failed" {
		m.post(ledger.NewPayoutReversal(PayoutReversalRef(p.ID), m.eventID, cur, amount, m.at))
	}
	return nil
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
