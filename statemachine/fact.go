package statemachine

import (
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// FactKind says what a provider reported. It is stored with the fact, so the
// string values are stable.
type FactKind string

// The fact kinds. Money facts (see [Validate]) carry an amount and a currency;
// the others are flags whose repetition changes nothing.
const (
	// FactProcessing means an attempt is under way.
	FactProcessing FactKind = "processing"
	// FactAuthorized means the amount is authorized and awaits capture
	// (a money fact; Amount is the authorized amount).
	FactAuthorized FactKind = "authorized"
	// FactCaptured means a charge captured Amount; ObjectID is the charge id.
	FactCaptured FactKind = "captured"
	// FactCaptureFailed means capture ObjectID did not bring the money in
	// after all (Adyen's CAPTURE_FAILED: the scheme refused it). It cancels
	// that capture whether it arrives before or after the capture's report.
	FactCaptureFailed FactKind = "capture_failed"
	// FactPaymentFailed means an attempt failed.
	FactPaymentFailed FactKind = "payment_failed"
	// FactCanceled means the payment was canceled.
	FactCanceled FactKind = "canceled"
	// FactRefundSucceeded means refund ObjectID (re_…) of Amount succeeded.
	FactRefundSucceeded FactKind = "refund_succeeded"
	// FactRefundFailed means refund ObjectID failed. It cancels that refund
	// whether it arrives before or after the success, because Stripe can
	// report a refund failing after reporting it succeeded.
	FactRefundFailed FactKind = "refund_failed"
	// FactDisputeOpened means dispute ObjectID (dp_…) was opened.
	FactDisputeOpened FactKind = "dispute_opened"
	// FactDisputeFundsWithdrawn means dispute ObjectID withdrew Amount.
	FactDisputeFundsWithdrawn FactKind = "dispute_funds_withdrawn"
	// FactDisputeFundsReinstated means dispute ObjectID gave back Amount.
	FactDisputeFundsReinstated FactKind = "dispute_funds_reinstated"
	// FactDisputeClosedWon means dispute ObjectID closed in the merchant's
	// favour.
	FactDisputeClosedWon FactKind = "dispute_closed_won"
	// FactDisputeClosedLost means dispute ObjectID closed against the
	// merchant.
	FactDisputeClosedLost FactKind = "dispute_closed_lost"
	// FactAmountKnown carries the payment's amount (e.g. from a
	// payment_intent event) and moves no money.
	FactAmountKnown FactKind = "amount_known"
	// FactRefundedFloor carries a charge's amount_refunded when the event
	// does not list the refunds (charge.refunded since API version
	// 2022-11-15). It is provisional: it counts toward AmountRefunded only
	// for what no known refund accounts for, so a later refund failure
	// lowers it (see Fold), and it is never posted to the ledger, which
	// posts refunds by their own ids.
	FactRefundedFloor FactKind = "refunded_floor"
)

// kindRule says what a kind needs to be a possible fact.
type kindRule struct {
	// money: Amount > 0 and Currency are required.
	money bool
	// object: ObjectID is required because the fact's identity (and so its
	// dedupe key) is the object, and an empty id would merge distinct
	// refunds, captures or disputes into one.
	object bool
	// observation: the fact reports a value that may legitimately change
	// between events about the same object (a PaymentIntent's amount, a
	// charge's running amount_refunded), so each value is its own fact.
	observation bool
}

var kindRules = map[FactKind]kindRule{
	FactProcessing:             {},
	FactAuthorized:             {money: true, observation: true},
	FactCaptured:               {money: true, object: true},
	FactCaptureFailed:          {money: true, object: true},
	FactPaymentFailed:          {},
	FactCanceled:               {},
	FactRefundSucceeded:        {money: true, object: true},
	FactRefundFailed:           {money: true, object: true},
	FactDisputeOpened:          {object: true},
	FactDisputeFundsWithdrawn:  {money: true, object: true},
	FactDisputeFundsReinstated: {money: true, object: true},
	FactDisputeClosedWon:       {object: true},
	FactDisputeClosedLost:      {object: true},
	FactAmountKnown:            {money: true, observation: true},
	FactRefundedFloor:          {money: true, observation: true},
}

// Fact is one thing a provider reported about a payment. A single webhook
// event may yield several facts (charge.refunded carries the capture and
// each refund).
type Fact struct {
	Kind FactKind
	// ObjectID is the provider object the fact is about: the charge id for
	// captures, the refund id (re_…) for refund facts, the dispute id (dp_…)
	// for dispute facts. Optional for the other kinds.
	ObjectID string
	// Amount is in the currency's major unit, at the currency's scale
	// (e.g. 360.00 usd, 5000 jpy).
	Amount decimal.Decimal
	// Currency is the lowercase ISO code as the provider sends it.
	Currency string
	// EventID is the provider event the fact came from; the fold ignores it
	// and it is kept for history rows and audit.
	EventID string
	// At is the provider's time for the fact, never the clock of this
	// process; the fold ignores it.
	At time.Time
}

// Key identifies the fact for dedupe: two facts with the same Key are the
// same business event, reported twice (redelivery, or two event types
// carrying the same refund), and fold to the same result as one.
//
// For movement facts the Key is the kind and object id ("captured:ch_1",
// "refund_succeeded:re_1"), so the same refund seen in charge.refunded and
// charge.refund.updated collapses. For observations (amount_known,
// authorized, refunded_floor) the Key also holds the amount, written without
// trailing zeros so 10.00 and 10.0 agree: each value seen is its own fact,
// and a store that keeps one fact per Key still keeps every value, which the
// fold needs to stay independent of arrival order.
//
// A charge, refund or dispute has one amount, so two movement facts with one
// Key should never disagree on it. If they do, Fold keeps the larger
// whatever the order, but a store that keeps only the first fact per Key
// would not: it should refuse or flag the disagreement, not drop it.
func (f Fact) Key() string {
	k := string(f.Kind) + ":" + f.ObjectID
	if kindRules[f.Kind].observation {
		k += ":" + plain(f.Amount)
	}
	return k
}

// plain writes d without trailing zeros or exponent. It does not use
// d.String, whose form depends on decimal's process-wide TrimTrailingZeros
// and UseScientificNotation settings, which another package may change: a
// dedupe key must not.
func plain(d decimal.Decimal) string {
	n := d.Normalize()
	return n.StringFixed(max(0, -n.Exponent()))
}

// Errors returned by [Validate] and [CheckCurrency]. They mark facts that are
// impossible, not merely early: the worker sends their event to poison.
var (
	// ErrUnknownKind means the fact's kind is not one of the Fact… constants.
	ErrUnknownKind = errors.New("statemachine: unknown fact kind")
	// ErrMissingObjectID means a capture, refund or dispute fact lacks the id
	// of its charge, refund or dispute.
	ErrMissingObjectID = errors.New("statemachine: missing object id")
	// ErrNegativeAmount means an amount is below zero.
	ErrNegativeAmount = errors.New("statemachine: negative amount")
	// ErrMissingAmount means a money fact has a zero amount.
	ErrMissingAmount = errors.New("statemachine: missing amount")
	// ErrMissingCurrency means a fact has an amount but no currency.
	ErrMissingCurrency = errors.New("statemachine: missing currency")
	// ErrCurrencyMismatch means a fact is in a currency other than the
	// payment's.
	ErrCurrencyMismatch = errors.New("statemachine: currency differs from the payment's")
)

// Validate reports whether f is a possible fact on its own. Money facts
// (authorized, captured, refund_succeeded, refund_failed,
// dispute_funds_withdrawn, dispute_funds_reinstated, amount_known,
// refunded_floor) need a positive Amount and a Currency; other facts may
// carry an amount, and then need a Currency too. A zero amount on a money
// fact counts as missing: decimal's zero value cannot be told from an absent
// field, and no provider reports a movement of zero (so a worker must not
// emit a refunded_floor for amount_refunded 0).
//
// Validate returns an error wrapping ErrUnknownKind, ErrMissingObjectID,
// ErrNegativeAmount, ErrMissingAmount or ErrMissingCurrency, or nil.
func Validate(f Fact) error {
	rule, ok := kindRules[f.Kind]
	switch {
	case !ok:
		return fmt.Errorf("validate fact %q: %w", f.Kind, ErrUnknownKind)
	case rule.object && f.ObjectID == "":
		return fmt.Errorf("validate fact %s: %w", f.Kind, ErrMissingObjectID)
	case f.Amount.Sign() < 0:
		return fmt.Errorf("validate fact %s amount %s: %w", f.Key(), plain(f.Amount), ErrNegativeAmount)
	case rule.money && f.Amount.IsZero():
		return fmt.Errorf("validate fact %s: %w", f.Key(), ErrMissingAmount)
	case (rule.money || !f.Amount.IsZero()) && f.Currency == "":
		return fmt.Errorf("validate fact %s: %w", f.Key(), ErrMissingCurrency)
	}
	return nil
}

// CheckCurrency reports whether f may join the payment whose facts so far
// are existing: a fact with a currency must match every existing fact that
// has one. Facts without a currency always fit. Which of two conflicting
// facts is refused depends on arrival order; that is acceptable because
// either way the conflict goes to poison for an operator, instead of being
// summed across currencies.
//
// CheckCurrency returns an error wrapping ErrCurrencyMismatch, or nil.
func CheckCurrency(existing []Fact, f Fact) error {
	if f.Currency == "" {
		return nil
	}
	for _, e := range existing {
		if e.Currency != "" && e.Currency != f.Currency {
			return fmt.Errorf("check fact %s in %s against payment in %s: %w",
				f.Key(), f.Currency, e.Currency, ErrCurrencyMismatch)
		}
	}
	return nil
}
