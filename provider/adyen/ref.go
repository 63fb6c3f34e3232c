package adyen

import (
	"strconv"
	"strings"
)

// Prefix starts every ledger ref of an Adyen movement.
const Prefix = "adyen:"

// CaptureRef names capture <pspReference> (the capture's own reference,
// not the payment's: a payment may be captured in parts).
func CaptureRef(capturePSP string) string { return Prefix + "capture:" + capturePSP }

// CaptureReversalRef names the correction of a capture that failed.
func CaptureReversalRef(capturePSP string) string { return CaptureRef(capturePSP) + ":reversal" }

// RefundRef names refund <pspReference>, which took money from the balance.
func RefundRef(refundPSP string) string { return Prefix + "refund:" + refundPSP }

// RefundReversalRef names the return to the balance of a refund that failed
// or was reversed.
func RefundReversalRef(refundPSP string) string { return RefundRef(refundPSP) + ":reversal" }

// ChargebackRef names the funds dispute <pspReference> withdrew.
func ChargebackRef(disputePSP string) string { return Prefix + "dispute:" + disputePSP + ":chargeback" }

// ChargebackReversalRef names the funds dispute <pspReference> gave back.
func ChargebackReversalRef(disputePSP string) string {
	return Prefix + "dispute:" + disputePSP + ":chargeback_reversed"
}

// SecondChargebackRef names the funds a second chargeback of dispute
// <pspReference> withdrew again.
func SecondChargebackRef(disputePSP string) string {
	return Prefix + "dispute:" + disputePSP + ":second_chargeback"
}

// FeeRef names the fees (commission, markup, scheme fees, interchange) a
// settlement report charged on the row of type rowType for modification
// <pspReference>: one modification can appear as two row types (a refund
// and its reversal), each with its own fees.
func FeeRef(modificationPSP, rowType string) string {
	return Prefix + "fee:" + modificationPSP + ":" + strings.ToLower(rowType)
}

// BatchRowFeeRef names a fee of settlement batch <batch> that no
// modification names (a Fee row, or the fees of a row without a
// Modification Reference) by its line in the batch's report, which is kept
// once and never changes.
func BatchRowFeeRef(batch int64, line int) string {
	return Prefix + "fee:batch:" + strconv.FormatInt(batch, 10) + ":line:" + strconv.Itoa(line)
}

// PayoutRef names settlement batch <batch>'s payout in currency.
func PayoutRef(batch int64, currency string) string {
	return Prefix + "payout:batch:" + strconv.FormatInt(batch, 10) + ":" + currency
}

// SettlementRefPrefix starts the refs of the legs of the conversion of a
// row of type rowType for modification <pspReference> from its gross
// currency into its net currency; a leg's ref is the prefix followed by
// the leg's currency.
func SettlementRefPrefix(modificationPSP, rowType string) string {
	return Prefix + "fx:" + modificationPSP + ":" + strings.ToLower(rowType) + ":"
}
