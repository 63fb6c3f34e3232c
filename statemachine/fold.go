package statemachine

import (
	"github.com/shopspring/decimal"
)

// Summary is what a set of facts says about one payment: the payments
// projection and the API's payment object are written from it.
type Summary struct {
	State State
	// Currency is the facts' currency, "" when no fact carries one.
	Currency string
	// Amount is the payment's amount: the largest of the amount_known and
	// authorized amounts and the captured total.
	Amount decimal.Decimal
	// AmountCaptured is the sum of distinct captures, one per charge id.
	AmountCaptured decimal.Decimal
	// AmountRefunded is the sum of refunds that succeeded and were never
	// reported failed, plus the part of the largest refunded_floor that no
	// known refund accounts for (see Fold).
	AmountRefunded decimal.Decimal
	// AmountDisputed is what open or lost disputes withdrew and was not
	// reinstated.
	AmountDisputed decimal.Decimal
}

type refund struct {
	// amount is the largest amount any report gave the refund, whether it
	// succeeded or failed.
	amount    decimal.Decimal
	succeeded bool
	failed    bool
}

type dispute struct {
	withdrawn  decimal.Decimal
	reinstated decimal.Decimal
	won, lost  bool
}

// Fold computes the summary of a payment from all its facts. It is
// commutative and idempotent: any permutation and any duplication of the same
// facts give a Summary whose fields are equal and print identically, because
// Stripe delivers at least once and in no particular order and the
// projection must not depend on either.
//
// To keep that true everything is a set function: flags are ORed, per-object
// amounts take the largest value reported for the object (one capture per
// charge id, one refund per refund id), totals are sums over distinct
// objects, and a refund_failed cancels its refund whichever arrives first.
// Every amount is returned at the finest scale among the facts (usd facts at
// 2 places give "0.00", not "0"), so two equal values written at different
// scales cannot make the output depend on which one was seen first.
//
// Fold does not validate: facts are expected to have passed [Validate] and
// [CheckCurrency]. On other input it is still total and deterministic; facts
// of unknown kinds are ignored, and with mixed currencies the
// lexicographically smallest is reported.
//
// The state is the first match of: dispute_lost (a dispute closed lost) ›
// disputed (a dispute seen and not closed) › refunded (refunded ≥ captured >
// 0) › partially_refunded (refunded > 0) › succeeded (captured > 0) ›
// canceled › requires_capture (authorized) › failed › processing.
func Fold(facts []Fact) Summary {
	var (
		authorized, canceled, failed bool
		currency                     string
		places                       int32
		amount, floor                decimal.Decimal
		captures                     = map[string]decimal.Decimal{}
		failedCaptures               = map[string]bool{}
		refunds                      = map[string]*refund{}
		disputes                     = map[string]*dispute{}
	)
	refundOf := func(id string) *refund {
		r := refunds[id]
		if r == nil {
			r = &refund{}
			refunds[id] = r
		}
		return r
	}
	disputeOf := func(id string) *dispute {
		d := disputes[id]
		if d == nil {
			d = &dispute{}
			disputes[id] = d
		}
		return d
	}

	for _, f := range facts {
		if _, ok := kindRules[f.Kind]; !ok {
			continue
		}
		if f.Currency != "" && (currency == "" || f.Currency < currency) {
			currency = f.Currency
		}
		if p := -f.Amount.Exponent(); p > places {
			places = p
		}
		switch f.Kind {
		case FactAuthorized:
			authorized = true
			amount = maxDec(amount, f.Amount)
		case FactAmountKnown:
			amount = maxDec(amount, f.Amount)
		case FactCaptured:
			captures[f.ObjectID] = maxDec(captures[f.ObjectID], f.Amount)
		case FactCaptureFailed:
			failedCaptures[f.ObjectID] = true
		case FactPaymentFailed:
			failed = true
		case FactCanceled:
			canceled = true
		case FactRefundSucceeded:
			r := refundOf(f.ObjectID)
			r.succeeded = true
			r.amount = maxDec(r.amount, f.Amount)
		case FactRefundFailed:
			r := refundOf(f.ObjectID)
			r.failed = true
			r.amount = maxDec(r.amount, f.Amount)
		case FactRefundedFloor:
			floor = maxDec(floor, f.Amount)
		case FactDisputeOpened:
			disputeOf(f.ObjectID)
		case FactDisputeFundsWithdrawn:
			d := disputeOf(f.ObjectID)
			d.withdrawn = maxDec(d.withdrawn, f.Amount)
		case FactDisputeFundsReinstated:
			d := disputeOf(f.ObjectID)
			d.reinstated = maxDec(d.reinstated, f.Amount)
		case FactDisputeClosedWon:
			disputeOf(f.ObjectID).won = true
		case FactDisputeClosedLost:
			disputeOf(f.ObjectID).lost = true
		}
	}

	var captured, refunded, known, disputed decimal.Decimal
	for id, c := range captures {
		if !failedCaptures[id] {
			captured = captured.Add(c)
		}
	}
	for _, r := range refunds {
		known = known.Add(r.amount)
		if r.succeeded && !r.failed {
			refunded = refunded.Add(r.amount)
		}
	}
	if unexplained := floor.Sub(known); unexplained.IsPositive() {
		refunded = refunded.Add(unexplained)
	}
	amount = maxDec(amount, captured)

	var open, lost bool
	for _, d := range disputes {
		switch {
		case d.lost:
			lost = true
		case d.won:
			// A won dispute holds no money by the contract, even before its
			// reinstatement is reported, and is no longer open.
			continue
		default:
			open = true
		}
		if held := d.withdrawn.Sub(d.reinstated); held.Sign() > 0 {
			disputed = disputed.Add(held)
		}
	}

	var state State
	switch {
	case lost:
		state = StateDisputeLost
	case open:
		state = StateDisputed
	case captured.Sign() > 0 && refunded.Cmp(captured) >= 0:
		state = StateRefunded
	case refunded.Sign() > 0:
		state = StatePartiallyRefunded
	case captured.Sign() > 0:
		state = StateSucceeded
	case canceled:
		state = StateCanceled
	case authorized:
		state = StateRequiresCapture
	case failed:
		state = StateFailed
	default:
		state = StateProcessing
	}

	return Summary{
		State:          state,
		Currency:       currency,
		Amount:         atScale(amount, places),
		AmountCaptured: atScale(captured, places),
		AmountRefunded: atScale(refunded, places),
		AmountDisputed: atScale(disputed, places),
	}
}

// maxDec returns the larger of a and b, a when they are equal. Which of two
// equal values survives can depend on order (10.00 vs 10.0); atScale removes
// that difference from the output.
func maxDec(a, b decimal.Decimal) decimal.Decimal {
	if b.GreaterThan(a) {
		return b
	}
	return a
}

// atScale writes d with exactly places decimals. Rounding is exact here
// because places is the finest scale of any input, and every sum and maximum
// of inputs fits in it. Going through the string also gives one internal
// representation per printed value, so reflect.DeepEqual (testify's Equal)
// agrees with Equal and String.
func atScale(d decimal.Decimal, places int32) decimal.Decimal {
	return decimal.RequireFromString(d.StringFixed(places))
}
