// Package stripe is paygate's Stripe adapter: it verifies Stripe's
// signatures on the raw body, decodes the event envelope (whose id is the
// dedupe key), maps Stripe's events to facts and ledger postings, and
// spells the ledger refs of Stripe's money movements in one place, so the
// worker that posts a movement from a webhook and the reconciliation that
// looks it up from a balance transaction always agree on its name.
//
// It must never know the inbox's tables or another provider.
package stripe

import "strings"

// Prefix starts every ref of a Stripe movement: a ledger transaction whose
// ref lacks it is not in Stripe's balance (a hand-made bank adjustment).
const Prefix = "stripe:"

// CaptureRef names the capture of charge ch_….
func CaptureRef(chargeID string) string { return Prefix + "charge:" + chargeID + ":capture" }

// RefundRef names refund re_…, which took money from the balance.
func RefundRef(refundID string) string { return Prefix + "refund:" + refundID }

// RefundReversalRef names the return to the balance of refund re_… when it
// failed.
func RefundReversalRef(refundID string) string { return RefundRef(refundID) + ":reversal" }

// DisputeWithdrawalRef names the funds dispute dp_… withdrew.
func DisputeWithdrawalRef(disputeID string) string {
	return Prefix + "dispute:" + disputeID + ":withdrawal"
}

// DisputeReinstatementRef names the funds dispute dp_… gave back.
func DisputeReinstatementRef(disputeID string) string {
	return Prefix + "dispute:" + disputeID + ":reinstatement"
}

// PayoutRef names payout po_….
func PayoutRef(payoutID string) string { return Prefix + "payout:" + payoutID }

// PayoutReversalRef names the return of payout po_… when it failed.
func PayoutReversalRef(payoutID string) string { return PayoutRef(payoutID) + ":reversal" }

// FeeRef names the fee of balance transaction txn_… (or the standalone fee
// that balance transaction is).
func FeeRef(txnID string) string { return Prefix + "fee:" + txnID }

// FeeOfFeeRef names a fee carried in the fee field of a balance transaction
// that is itself a fee, should Stripe ever set one.
func FeeOfFeeRef(txnID string) string { return FeeRef(txnID) + ":fee" }

// SettlementRef names one leg of the conversion of balance transaction
// txn_… from the presentment currency into the settlement currency: one
// transaction per currency (see ledger.NewSettlement).
func SettlementRef(txnID, currency string) string {
	return Prefix + "fx:" + txnID + ":" + currency
}

// IsSettlementRefOf reports whether ref names a leg of the conversion of
// balance transaction txn_….
func IsSettlementRefOf(ref, txnID string) bool {
	return strings.HasPrefix(ref, SettlementRef(txnID, "")) && len(ref) > len(SettlementRef(txnID, ""))
}

// IsRef reports whether ref names a Stripe movement.
func IsRef(ref string) bool { return strings.HasPrefix(ref, Prefix) }

// IsFeeRef reports whether ref names a fee.
func IsFeeRef(ref string) bool { return strings.HasPrefix(ref, Prefix+"fee:") }

// SourceOfRef names where Stripe keeps the record of a ref: the source
// object whose balance transactions to list (charge, refund, dispute,
// payout), or the balance transaction itself (fees, settlements). ok is
// false for refs of no known shape.
func SourceOfRef(ref string) (sourceID, txnID string, ok bool) {
	parts := strings.Split(ref, ":")
	if len(parts) < 3 || parts[0]+":" != Prefix || parts[2] == "" {
		return "", "", false
	}
	switch parts[1] {
	case "fee", "fx":
		return "", parts[2], true
	case "charge", "refund", "dispute", "payout":
		return parts[2], "", true
	}
	return "", "", false
}
