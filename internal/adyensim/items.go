package adyensim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Item is a NotificationRequestItem as Adyen sends it. Fields are in
// Adyen's order (alphabetical), and optional ones are left out when empty,
// as Adyen does.
type Item struct {
	AdditionalData      map[string]string `json:"additionalData,omitempty"`
	Amount              Amount            `json:"amount"`
	EventCode           string            `json:"eventCode"`
	EventDate           string            `json:"eventDate"`
	MerchantAccountCode string            `json:"merchantAccountCode"`
	MerchantReference   string            `json:"merchantReference"`
	Operations          []string          `json:"operations,omitempty"`
	OriginalReference   string            `json:"originalReference,omitempty"`
	PaymentMethod       string            `json:"paymentMethod,omitempty"`
	PspReference        string            `json:"pspReference"`
	Reason              string            `json:"reason"`
	Success             string            `json:"success"`
}

// Amount is an item's amount: minor units of an upper-case ISO 4217
// currency.
type Amount struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

// Event codes the simulator emits.
const (
	EventAuthorisation      = "AUTHORISATION"
	EventCapture            = "CAPTURE"
	EventCaptureFailed      = "CAPTURE_FAILED"
	EventCancellation       = "CANCELLATION"
	EventCancelOrRefund     = "CANCEL_OR_REFUND"
	EventRefund             = "REFUND"
	EventRefundFailed       = "REFUND_FAILED"
	EventRefundedReversed   = "REFUNDED_REVERSED"
	EventChargeback         = "CHARGEBACK"
	EventChargebackReversed = "CHARGEBACK_REVERSED"
	EventSecondChargeback   = "SECOND_CHARGEBACK"
	EventReportAvailable    = "REPORT_AVAILABLE"
)

// The card every payment is made with: Adyen's Visa test card.
const (
	paymentMethod = "visa"
	cardSummary   = "1111"
	cardExpiry    = "03/2030"
)

// The dispute every chargeback is: Visa's "Other Fraud – Card-Absent
// Environment".
const (
	chargebackReasonCode = "10.4"
	chargebackReason     = "Other Fraud-Card Absent Environment"
	defensePeriod        = 14 * 24 * time.Hour
)

// DisputeStatuses are the disputeStatus values Adyen's Webhooks-v1 schema
// allows.
var DisputeStatuses = []string{"Unresponded", "Responded", "Expired", "Undefended", "Accepted", "Pending", "Lost", "Won"}

// itemLocked builds an item of payment p dated now and signs it. An item
// about a modification whose request gave a reference carries that
// reference as merchantReference, as Adyen sends it; one whose request gave
// none carries the payment's.
func (s *Sim) itemLocked(code, psp string, p *payment, value int64, success bool, reason string, extra map[string]string) Item {
	it := Item{
		AdditionalData:      map[string]string{},
		Amount:              Amount{Currency: p.currency, Value: value},
		EventCode:           code,
		EventDate:           s.dateLocked(s.now),
		MerchantAccountCode: s.merchant,
		MerchantReference:   p.reference,
		PaymentMethod:       paymentMethod,
		PspReference:        psp,
		Reason:              reason,
		Success:             fmt.Sprint(success),
	}
	if psp != p.psp {
		it.OriginalReference = p.psp
		if ref := s.modRefs[psp]; ref != "" {
			it.MerchantReference = ref
		}
	}
	maps.Copy(it.AdditionalData, extra)
	return s.signLocked(it)
}

// Authorise makes a payment of value minor units of currency (upper-cased)
// for the merchant's reference, and returns its pspReference and the
// AUTHORISATION Adyen sends: on success with the operations it allows and
// the reason "<auth code>:<card summary>:<expiry>", else refused. It panics
// if value is not positive or currency is not three letters.
func (s *Sim) Authorise(value int64, currency, merchantRef string, success bool) (string, Item) {
	return s.AuthoriseWith(AuthoriseOpts{Value: value, Currency: currency, Reference: merchantRef, Refused: !success})
}

// AuthoriseOpts describes a payment request for AuthoriseWith.
type AuthoriseOpts struct {
	// Value is in minor units of Currency, an ISO 4217 code (upper-cased).
	Value    int64
	Currency string
	// Reference is the merchant's reference of the payment: the order.
	Reference string
	// ShopperReference is the merchant's id of the shopper, sent back as
	// additionalData.shopperReference.
	ShopperReference string
	// Metadata is the request's metadata: each entry is sent back as
	// additionalData["metadata.<key>"], as Adyen does when the merchant
	// account is set to include it.
	Metadata map[string]string
	// Refused makes the issuer refuse the payment.
	Refused bool
}

// AuthoriseWith makes the payment opts describes and returns its
// pspReference and its AUTHORISATION, as Authorise does; only the
// AUTHORISATION carries the shopper's reference and the metadata, as
// Adyen sends them (a modification's items do not). It panics as
// Authorise does, and on an empty metadata key.
func (s *Sim) AuthoriseWith(opts AuthoriseOpts) (string, Item) {
	positive("Authorise", opts.Value)
	cur := strings.ToUpper(opts.Currency)
	if len(cur) != 3 || strings.Trim(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		panic(fmt.Sprintf("adyensim: Authorise: %q is not an ISO 4217 code", opts.Currency))
	}
	if _, ok := opts.Metadata[""]; ok {
		panic("adyensim: Authorise: an empty metadata key")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &payment{
		psp: s.newPSPLocked(), value: opts.Value, currency: cur, reference: opts.Reference, authorised: !opts.Refused,
		shopperReference: opts.ShopperReference, metadata: maps.Clone(opts.Metadata),
		captures: map[string]bool{}, refunds: map[string]bool{}, disputes: map[string]bool{},
	}
	s.payments[p.psp] = p
	extra := map[string]string{"cardSummary": cardSummary, "expiryDate": cardExpiry}
	if p.shopperReference != "" {
		extra["shopperReference"] = p.shopperReference
	}
	for k, v := range p.metadata {
		extra["metadata."+k] = v
	}
	var it Item
	if !opts.Refused {
		auth := fmt.Sprintf("%06d", s.rng.IntN(1_000_000))
		p.authCode = auth
		extra["authCode"], extra["cardBin"] = auth, "411111"
		it = s.itemLocked(EventAuthorisation, p.psp, p, opts.Value, true, auth+":"+cardSummary+":"+cardExpiry, extra)
		it.Operations = []string{"CANCEL", "CAPTURE", "REFUND"}
	} else {
		// A refused payment allows no operation, and Adyen then sends none.
		extra["refusalReasonRaw"] = "DECLINED"
		it = s.itemLocked(EventAuthorisation, p.psp, p, opts.Value, false, "Refused", extra)
	}
	return p.psp, it
}

// ReferenceNextModification makes the script's next modification request
// (Capture, Cancel, CancelOrRefund or Refund) give ref as its reference:
// its item, and every later item about it (CAPTURE_FAILED, REFUND_FAILED,
// REFUNDED_REVERSED), carries ref as merchantReference, and its settlement
// row as Modification Merchant Reference. Without it a modification's
// items carry the payment's merchantReference, as Adyen sends them for a
// request that gave no reference.
func (s *Sim) ReferenceNextModification(ref string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextModRef = ref
}

// newModificationLocked returns the pspReference of a modification the
// script asks for, noting the reference its request gave.
func (s *Sim) newModificationLocked() (psp, ref string) {
	psp, ref = s.newPSPLocked(), s.nextModRef
	s.nextModRef = ""
	if ref != "" {
		s.modRefs[psp] = ref
	}
	return psp, ref
}

// Capture captures value of the authorised payment paymentPSP and returns
// the capture's pspReference and the successful CAPTURE.
func (s *Sim) Capture(paymentPSP string, value int64) (string, Item) {
	positive("Capture", value)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.authorisedLocked("Capture", paymentPSP)
	psp, ref := s.newModificationLocked()
	p.captures[psp] = true
	p.captured += value
	s.moveLocked(RowSettled, psp, p, value).modMerchantRef = ref
	return psp, s.itemLocked(EventCapture, psp, p, value, true, "", nil)
}

// CaptureFailed is the CAPTURE_FAILED Adyen sends when the scheme rejects
// capture capturePSP of paymentPSP after the CAPTURE: success "true"
// (the failure is the event), the capture's pspReference.
func (s *Sim) CaptureFailed(paymentPSP, capturePSP string, value int64) Item {
	positive("CaptureFailed", value)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.authorisedLocked("CaptureFailed", paymentPSP)
	if !p.captures[capturePSP] {
		panic(fmt.Sprintf("adyensim: CaptureFailed: %s is not a capture of %s", capturePSP, paymentPSP))
	}
	p.captured -= value
	s.reports.moves[moveKey{RowSettled, capturePSP}].failed = true
	return s.itemLocked(EventCaptureFailed, capturePSP, p, value, true, "Capture Failed", map[string]string{"paymentMethodVariant": paymentMethod})
}

// Cancel cancels the authorised payment paymentPSP and returns the
// cancellation's pspReference and the CANCELLATION, for the authorised
// amount.
func (s *Sim) Cancel(paymentPSP string) (string, Item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.authorisedLocked("Cancel", paymentPSP)
	psp, _ := s.newModificationLocked()
	return psp, s.itemLocked(EventCancellation, psp, p, p.value, true, "", nil)
}

// CancelOrRefund reverses the authorised payment paymentPSP (a /reversals
// request) and returns the reversal's pspReference and the
// CANCEL_OR_REFUND, whose additionalData modification.action says what
// Adyen did: "cancel" or "refund". It panics on another action.
func (s *Sim) CancelOrRefund(paymentPSP, action string) (string, Item) {
	if action != "cancel" && action != "refund" {
		panic(fmt.Sprintf("adyensim: CancelOrRefund: action %q is not cancel or refund", action))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.authorisedLocked("CancelOrRefund", paymentPSP)
	psp, ref := s.newModificationLocked()
	if action == "refund" {
		p.refunds[psp] = true
		s.moveLocked(RowRefunded, psp, p, p.value).modMerchantRef = ref
	}
	return psp, s.itemLocked(EventCancelOrRefund, psp, p, p.value, true, "", map[string]string{"modification.action": action})
}

// Refund refunds value of the authorised payment paymentPSP and returns
// the refund's pspReference and the REFUND: successful, or refused with
// Adyen's reason when success is false.
func (s *Sim) Refund(paymentPSP string, value int64, success bool) (string, Item) {
	positive("Refund", value)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.authorisedLocked("Refund", paymentPSP)
	psp, ref := s.newModificationLocked()
	p.refunds[psp] = true
	reason := ""
	if !success {
		reason = "Insufficient balance on payment"
	} else {
		p.refunded += value
		s.moveLocked(RowRefunded, psp, p, value).modMerchantRef = ref
	}
	return psp, s.itemLocked(EventRefund, psp, p, value, success, reason, nil)
}

// RefundFailed is the REFUND_FAILED Adyen sends when the scheme rejects
// refund refundPSP of paymentPSP after its REFUND: success "true", the
// refund's pspReference.
func (s *Sim) RefundFailed(paymentPSP, refundPSP string, value int64) Item {
	positive("RefundFailed", value)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.refundOfLocked("RefundFailed", paymentPSP, refundPSP)
	p.refunded -= value
	s.moveLocked(RowRefundedReversed, refundPSP, p, value)
	return s.itemLocked(EventRefundFailed, refundPSP, p, value, true, "Refund Failed", map[string]string{"paymentMethodVariant": paymentMethod})
}

// RefundedReversed is the REFUNDED_REVERSED Adyen sends when the money of
// refund refundPSP of paymentPSP came back to the merchant: success
// "true", the refund's pspReference.
func (s *Sim) RefundedReversed(paymentPSP, refundPSP string, value int64) Item {
	positive("RefundedReversed", value)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.refundOfLocked("RefundedReversed", paymentPSP, refundPSP)
	p.refunded -= value
	s.moveLocked(RowRefundedReversed, refundPSP, p, value)
	return s.itemLocked(EventRefundedReversed, refundPSP, p, value, true, "", nil)
}

func (s *Sim) refundOfLocked(method, paymentPSP, refundPSP string) *payment {
	p := s.authorisedLocked(method, paymentPSP)
	if !p.refunds[refundPSP] {
		panic(fmt.Sprintf("adyensim: %s: %s is not a refund of %s", method, refundPSP, paymentPSP))
	}
	return p
}

// Chargeback opens a dispute of value on the authorised payment
// paymentPSP and returns the dispute's pspReference, which every later
// event of the dispute carries, and the CHARGEBACK: the funds withdrawn,
// with disputeStatus (one of DisputeStatuses) and the reason and scheme
// codes. It panics on another status.
func (s *Sim) Chargeback(paymentPSP string, value int64, disputeStatus string) (string, Item) {
	positive("Chargeback", value)
	if !slices.Contains(DisputeStatuses, disputeStatus) {
		panic(fmt.Sprintf("adyensim: Chargeback: disputeStatus %q is not one Adyen sends", disputeStatus))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.authorisedLocked("Chargeback", paymentPSP)
	psp := s.newPSPLocked()
	p.disputes[psp] = true
	s.moveLocked(RowChargeback, psp, p, value)
	extra := disputeData(disputeStatus)
	extra["defendable"] = "true"
	extra["defensePeriodEndsAt"] = s.dateLocked(s.now.Add(defensePeriod))
	return psp, s.itemLocked(EventChargeback, psp, p, value, true, chargebackReason, extra)
}

// ChargebackReversed is the CHARGEBACK_REVERSED of dispute disputePSP of
// paymentPSP: the defense won, the funds given back (disputeStatus Won).
func (s *Sim) ChargebackReversed(paymentPSP, disputePSP string, value int64) Item {
	positive("ChargebackReversed", value)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.disputeOfLocked("ChargebackReversed", paymentPSP, disputePSP)
	s.moveLocked(RowChargebackReversed, disputePSP, p, value)
	return s.itemLocked(EventChargebackReversed, disputePSP, p, value, true, chargebackReason, disputeData("Won"))
}

// SecondChargeback is the SECOND_CHARGEBACK of dispute disputePSP of
// paymentPSP: the issuer disputes again after a reversal, the funds
// withdrawn for good (disputeStatus Lost).
func (s *Sim) SecondChargeback(paymentPSP, disputePSP string, value int64) Item {
	positive("SecondChargeback", value)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.disputeOfLocked("SecondChargeback", paymentPSP, disputePSP)
	s.moveLocked(RowSecondChargeback, disputePSP, p, value)
	return s.itemLocked(EventSecondChargeback, disputePSP, p, value, true, chargebackReason, disputeData("Lost"))
}

func (s *Sim) disputeOfLocked(method, paymentPSP, disputePSP string) *payment {
	p := s.authorisedLocked(method, paymentPSP)
	if !p.disputes[disputePSP] {
		panic(fmt.Sprintf("adyensim: %s: %s is not a dispute of %s", method, disputePSP, paymentPSP))
	}
	return p
}

func disputeData(status string) map[string]string {
	return map[string]string{
		"chargebackReasonCode": chargebackReasonCode,
		"chargebackSchemeCode": paymentMethod,
		"disputeStatus":        status,
	}
}

// Redeliver is it as Adyen sends it again: the same event (same signed
// fields, so the same signature) dated at the clock. Adyen repeats items
// with unsigned fields changed; a test changes more (Reason,
// AdditionalData) on the copy it gets, which shares nothing with it.
func (s *Sim) Redeliver(it Item) Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	it.AdditionalData = maps.Clone(it.AdditionalData)
	it.Operations = slices.Clone(it.Operations)
	it.EventDate = s.dateLocked(s.now)
	return s.signLocked(it)
}
