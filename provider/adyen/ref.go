package adyen

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
