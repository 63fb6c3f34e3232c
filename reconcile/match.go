package reconcile

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider/stripe"
)

// TypeFee is the Type of the line that carries a balance transaction's fee
// (and of a ledger-only fee transaction).
const TypeFee = "fee"

// Line is one thing a provider record asks of the ledger: its movement, or
// its fee. It is pure data derived from the record alone.
type Line struct {
	BT   BalanceTransaction
	Ref  string      // empty when the record's type maps to no ledger ref
	Kind ledger.Kind // the kind the ledger should have posted under Ref
	// Fee marks the fee line of a record (Type "fee"), or a standalone fee
	// record: both are posted from the provider's data when missing.
	Fee  bool
	Type string
	// Amount is the line's effect on the provider balance in minor units,
	// signed as the provider signs it.
	Amount int64
	// FeeColumn is the record's fee for the provider_fee column; nil on
	// fee lines, so that the column never counts a fee twice.
	FeeColumn *int64
}

// ledgerRef maps a balance transaction to the ref and kind of the ledger
// transaction applying the event derives for the same movement (see
// the package documentation). ok is false for types paygate does not post.
func ledgerRef(bt BalanceTransaction) (ref string, kind ledger.Kind, ok bool) {
	src := bt.SourceID
	cat, typ := bt.ReportingCategory, bt.Type
	switch {
	case typ == "stripe_fee" || cat == "fee":
		return stripe.FeeRef(bt.ID), ledger.KindFee, true
	case src == "":
		return "", "", false
	case cat == "charge" || typ == "charge" || typ == "payment":
		return stripe.CaptureRef(src), ledger.KindCapture, true
	case cat == "refund" || typ == "refund" || typ == "payment_refund":
		return stripe.RefundRef(src), ledger.KindRefund, true
	case cat == "refund_failure" || typ == "refund_failure" || typ == "payment_failure_refund":
		return stripe.RefundReversalRef(src), ledger.KindRefundReversal, true
	case cat == "dispute":
		return stripe.DisputeWithdrawalRef(src), ledger.KindDisputeWithdrawal, true
	case cat == "dispute_reversal":
		return stripe.DisputeReinstatementRef(src), ledger.KindDisputeReinstatement, true
	case cat == "payout" || typ == "payout":
		return stripe.PayoutRef(src), ledger.KindPayout, true
	case cat == "payout_reversal" || typ == "payout_failure":
		return stripe.PayoutReversalRef(src), ledger.KindPayoutReversal, true
	}
	return "", "", false
}

// Lines derives a provider record's lines: its movement, then its fee when
// it has one. A standalone fee record (type stripe_fee) is itself a fee
// line; a fee in its fee field, should Stripe ever set one, gets the ref
// suffix :fee.
func Lines(bt BalanceTransaction) []Line {
	fee := bt.Fee
	ref, kind, _ := ledgerRef(bt)
	main := Line{BT: bt, Ref: ref, Kind: kind, Fee: kind == ledger.KindFee, Type: bt.Type, Amount: bt.Amount, FeeColumn: &fee}
	out := []Line{main}
	if bt.Fee != 0 {
		feeRef := stripe.FeeRef(bt.ID)
		if main.Fee {
			feeRef = stripe.FeeOfFeeRef(bt.ID)
		}
		out = append(out, Line{BT: bt, Ref: feeRef, Kind: ledger.KindFee, Fee: true, Type: TypeFee, Amount: -bt.Fee})
	}
	return out
}

// money converts signed minor units to a decimal at the currency's scale. A
// currency the ledger does not know is kept in minor units, so the value
// stays visible rather than guessed.
func money(minor int64, currency string) decimal.Decimal {
	abs := minor
	if abs < 0 {
		abs = -abs
	}
	d, err := ledger.FromMinor(abs, currency)
	if err != nil {
		d = decimal.New(abs, 0)
	}
	if minor < 0 {
		return d.Neg()
	}
	return d
}

// Effect is a ledger transaction's effect on provider_balance (debits −
// credits): the provider's sign convention, positive when money comes into
// the provider balance. A transaction that does not touch provider_balance
// reports its Amount().
func Effect(tx ledger.Transaction) decimal.Decimal {
	sum, touched := decimal.Zero, false
	for _, e := range tx.Entries {
		if e.Account == ledger.AccountProviderBalance {
			sum = sum.Add(e.Debit).Sub(e.Credit)
			touched = true
		}
	}
	if !touched {
		return tx.Amount()
	}
	return sum
}

func ptr(d decimal.Decimal) *decimal.Decimal { return &d }

// Compare judges one line against the ledger transaction with its ref (nil
// when the ledger has none). A missing fee comes back as
// StatusMissingInLedger like anything else; the runner posts it and turns
// the item into StatusFeePosted.
func Compare(l Line, tx *ledger.Transaction) Item {
	it := Item{
		ProviderTxnID:     l.BT.ID,
		SourceID:          l.BT.SourceID,
		Ref:               l.Ref,
		Type:              l.Type,
		ReportingCategory: l.BT.ReportingCategory,
		Currency:          l.BT.Currency,
		ProviderAmount:    ptr(money(l.Amount, l.BT.Currency)),
	}
	if l.FeeColumn != nil {
		it.ProviderFee = ptr(money(*l.FeeColumn, l.BT.Currency))
	}
	if tx == nil || l.Ref == "" {
		it.Status = StatusMissingInLedger
		return it
	}
	it.LedgerCurrency = tx.Currency
	it.LedgerAmount = ptr(Effect(*tx))
	switch {
	case tx.Currency != l.BT.Currency:
		it.Status = StatusCurrencyMismatch
	case !it.ProviderAmount.Abs().Equal(tx.Amount()):
		it.Status = StatusAmountMismatch
	default:
		it.Status = StatusMatched
	}
	return it
}

// FeeTransaction is the ledger transaction that records a fee line the
// ledger lacks: a fee (Dr fees, Cr provider_balance) when the provider
// charged it, an adjustment the other way round when it refunded it (a won
// dispute returns its fee). paymentID ties it to the payment of the movement
// it belongs to, when the ledger knows that movement; postedBy (PostedBy of
// the run) goes where a webhook's posting keeps its event id, so the ledger
// says which run booked the fee.
func FeeTransaction(l Line, paymentID, postedBy string) ledger.Transaction {
	amount := money(l.Amount, l.BT.Currency)
	if amount.IsNegative() {
		return ledger.NewFee(l.Ref, paymentID, postedBy, l.BT.Currency, amount.Neg(), l.BT.Created)
	}
	return ledger.Transaction{
		Ref: l.Ref, Kind: ledger.KindAdjustment, Currency: l.BT.Currency, OccurredAt: l.BT.Created,
		PaymentID: paymentID, EventID: postedBy,
		Entries: []ledger.Entry{
			ledger.Debit(ledger.AccountProviderBalance, amount),
			ledger.Credit(ledger.AccountFees, amount),
		},
	}
}

// PostedBy is the mark a run leaves on the fees it posts (in the ledger
// transaction's event id): a retried attempt of the run recognises the fees
// its earlier attempt posted and still reports them fee_posted.
func PostedBy(runID int64) string { return fmt.Sprintf("reconciliation_run:%d", runID) }

// categoryOfKind is the reporting category a ledger-only transaction falls
// under in the report.
func categoryOfKind(tx ledger.Transaction) string {
	switch tx.Kind {
	case ledger.KindCapture:
		return "charge"
	case ledger.KindRefund:
		return "refund"
	case ledger.KindRefundReversal:
		return "refund_failure"
	case ledger.KindDisputeWithdrawal:
		return "dispute"
	case ledger.KindDisputeReinstatement:
		return "dispute_reversal"
	case ledger.KindPayout:
		return "payout"
	case ledger.KindPayoutReversal:
		return "payout_reversal"
	case ledger.KindFee:
		return "fee"
	}
	if stripe.IsFeeRef(tx.Ref) {
		return "fee"
	}
	return "other_adjustment"
}

// LedgerOnly is the item of a ledger transaction no provider record claims.
// Its Type is the ledger kind ("fee" for fees), since there is no provider
// record to name one.
func LedgerOnly(tx ledger.Transaction) Item {
	return Item{
		Status:            StatusMissingAtProvider,
		Ref:               tx.Ref,
		Type:              string(tx.Kind),
		ReportingCategory: categoryOfKind(tx),
		Currency:          tx.Currency,
		LedgerCurrency:    tx.Currency,
		LedgerAmount:      ptr(Effect(tx)),
	}
}

// Compared reports whether a ledger transaction is one the provider should
// know: paygate's own refs for provider movements start with "stripe:".
// Anything else (a hand-made bank adjustment) is not in the provider's
// balance and is left out of the comparison.
func Compared(tx ledger.Transaction) bool { return stripe.IsRef(tx.Ref) }

// SourceOfRef names where the provider would keep the record of a ledger
// ref: the source object whose balance transactions to list, or the balance
// transaction id itself for fees and settlements. ok is false for refs of no
// known shape.
func SourceOfRef(ref string) (sourceID, txnID string, ok bool) { return stripe.SourceOfRef(ref) }

// TimingDifference is a ledger transaction of the day whose provider record
// is on another day: not an item of this run (the provider's day matches
// it), but listed so that the day's ledger totals can be explained.
type TimingDifference struct {
	Ref              string    `json:"ref"`
	LedgerOccurredAt time.Time `json:"ledger_occurred_at"`
	ProviderTxnID    string    `json:"provider_txn_id"`
	ProviderCreated  time.Time `json:"provider_created"`
}
