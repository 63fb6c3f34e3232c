package stripe

import (
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
)

// Stripe's statement for reconciliation is its balance transactions of a
// day. Each one is matched by an exact key to the ledger transaction the
// worker derives for the same movement:
//
//	balance transaction (type / reporting_category)   ledger ref
//	charge (charge, payment)                          stripe:charge:<source>:capture
//	refund (refund, payment_refund)                   stripe:refund:<source>
//	refund_failure                                    stripe:refund:<source>:reversal
//	dispute (adjustment)                              stripe:dispute:<source>:withdrawal
//	dispute_reversal (adjustment)                     stripe:dispute:<source>:reinstatement
//	payout                                            stripe:payout:<source>
//	payout_reversal (payout_failure)                  stripe:payout:<source>:reversal
//	fee (stripe_fee), and the fee of any of the above stripe:fee:<balance transaction id>

// ledgerRef maps a balance transaction to the ref and kind of the ledger
// transaction applying the event derives for the same movement. ok is
// false for types paygate does not post.
func ledgerRef(bt provider.BalanceTransaction) (ref string, kind ledger.Kind, ok bool) {
	src := bt.SourceID
	cat, typ := bt.ReportingCategory, bt.Type
	switch {
	case typ == "stripe_fee" || cat == "fee":
		return FeeRef(bt.ID), ledger.KindFee, true
	case src == "":
		return "", "", false
	case cat == "charge" || typ == "charge" || typ == "payment":
		return CaptureRef(src), ledger.KindCapture, true
	case cat == "refund" || typ == "refund" || typ == "payment_refund":
		return RefundRef(src), ledger.KindRefund, true
	case cat == "refund_failure" || typ == "refund_failure" || typ == "payment_failure_refund":
		return RefundReversalRef(src), ledger.KindRefundReversal, true
	case cat == "dispute":
		return DisputeWithdrawalRef(src), ledger.KindDisputeWithdrawal, true
	case cat == "dispute_reversal":
		return DisputeReinstatementRef(src), ledger.KindDisputeReinstatement, true
	case cat == "payout" || typ == "payout":
		return PayoutRef(src), ledger.KindPayout, true
	case cat == "payout_reversal" || typ == "payout_failure":
		return PayoutReversalRef(src), ledger.KindPayoutReversal, true
	}
	return "", "", false
}

// StatementLines derives a balance transaction's lines: its movement, then
// its fee when it has one. A standalone fee record (type stripe_fee) is
// itself a fee line; a fee in its fee field, should Stripe ever set one,
// gets the ref suffix :fee. A movement Stripe converted into the
// balance's currency has its conversion's legs under
// stripe:fx:<balance transaction id>:<currency>.
func StatementLines(bt provider.BalanceTransaction) []provider.StatementLine {
	fee := bt.Fee
	ref, kind, _ := ledgerRef(bt)
	main := provider.StatementLine{Ref: ref, Kind: kind, Post: kind == ledger.KindFee, Type: bt.Type, Amount: bt.Amount, FeeColumn: &fee}
	if ref != "" && !main.Post {
		main.Conversion = SettlementRef(bt.ID, "")
	}
	out := []provider.StatementLine{main}
	if bt.Fee != 0 {
		feeRef := FeeRef(bt.ID)
		if main.Post {
			feeRef = FeeOfFeeRef(bt.ID)
		}
		out = append(out, provider.StatementLine{Ref: feeRef, Kind: ledger.KindFee, Post: true, Type: feeLineType, Amount: -bt.Fee})
	}
	return out
}

// feeLineType is the Type of the line that carries a balance transaction's
// fee.
const feeLineType = "fee"

// Name is the provider's name; runs and the inbox carry it.
func (a *API) Name() string { return Name }

// Lines derives a balance transaction's lines (see StatementLines).
func (a *API) Lines(bt provider.BalanceTransaction) []provider.StatementLine {
	return StatementLines(bt)
}

// Owns reports whether a ledger ref names a Stripe movement: one Stripe's
// balance should know.
func (a *API) Owns(ref string) bool { return IsRef(ref) }

// SourceOfRef names where Stripe keeps the record of a ref (see the
// package function SourceOfRef).
func (a *API) SourceOfRef(ref string) (sourceID, txnID string, ok bool) { return SourceOfRef(ref) }
