package adyen

import (
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/statemachine"
)

// Adyen's event codes that paygate maps. Any other code (payouts of a
// marketplace, NOTIFICATION_OF_CHARGEBACK…) is stored and ignored, as is a
// REPORT_AVAILABLE of any report but a settlement details report.
const (
	CodeAuthorisation     = "AUTHORISATION"
	CodeCapture           = "CAPTURE"
	CodeCaptureFailed     = "CAPTURE_FAILED"
	CodeCancellation      = "CANCELLATION"
	CodeCancelOrRefund    = "CANCEL_OR_REFUND"
	CodeRefund            = "REFUND"
	CodeRefundFailed      = "REFUND_FAILED"
	CodeRefundedReversed  = "REFUNDED_REVERSED"
	CodeChargeback        = "CHARGEBACK"
	CodeChargebackReverse = "CHARGEBACK_REVERSED"
	CodeSecondChargeback  = "SECOND_CHARGEBACK"
	CodeReportAvailable   = "REPORT_AVAILABLE"
)

// Mapper maps stored Adyen items with Effects.
var Mapper provider.Mapper = provider.MapperFunc(Effects)

// Effects maps one notification item, as stored in the inbox, to its
// effects. It is pure: no clock, no I/O.
//
// A payment is named by the pspReference of its AUTHORISATION; every
// modification and dispute names it in originalReference. Each money
// movement is keyed by the pspReference of the modification that made it
// (a capture, a refund) or of the dispute, and dated at the item's
// eventDate, which is when Adyen booked it. A failure reported after the
// fact (CAPTURE_FAILED, REFUND_FAILED, REFUNDED_REVERSED) posts only its
// correction and a fact that cancels the movement in the state, so that
// each movement keeps its own date whichever report arrives first.
//
// It fails with an error wrapping provider.ErrIgnored for a code paygate
// does not map and for a refused modification that moved nothing, and with
// one wrapping provider.ErrPermanent for an item that can never be applied
// (unreadable, no payment named, a missing or negative amount, a currency
// the ledger does not know or cannot hold exactly).
func Effects(payload []byte) (provider.Effects, error) {
	it, err := DecodeItem(payload)
	if err != nil {
		return provider.Effects{}, fmt.Errorf("%w: %w", provider.ErrPermanent, err)
	}
	at, err := it.EventTime()
	if err != nil {
		return provider.Effects{}, fmt.Errorf("%w: %w", provider.ErrPermanent, err)
	}
	m := mapper{item: it, eventID: EventID(it), at: at}
	if err := m.mapItem(); err != nil {
		return provider.Effects{}, err
	}
	if err := provider.Validate(m.out); err != nil {
		return provider.Effects{}, err
	}
	return m.out, nil
}

type mapper struct {
	item    Item
	eventID string
	at      time.Time
	out     provider.Effects
}

func permanent(format string, args ...any) error {
	return fmt.Errorf("%w: %s", provider.ErrPermanent, fmt.Sprintf(format, args...))
}

func (m *mapper) mapItem() error {
	it := m.item
	success := it.Success == "true"
	switch it.EventCode {
	case CodeAuthorisation:
		return m.authorisation(success)
	case CodeReportAvailable:
		return m.reportAvailable(success)
	case CodeCapture, CodeCaptureFailed, CodeCancellation, CodeCancelOrRefund,
		CodeRefund, CodeRefundFailed, CodeRefundedReversed,
		CodeChargeback, CodeChargebackReverse, CodeSecondChargeback:
	default:
		return fmt.Errorf("%w: %s", provider.ErrIgnored, it.EventCode)
	}
	if it.OriginalReference == "" {
		return permanent("%s names no payment (originalReference is empty)", it.EventCode)
	}
	m.out.PaymentID = it.OriginalReference
	if !success && it.EventCode != CodeRefund {
		// A modification Adyen refused (a capture, a cancellation) moved no
		// money and changes no state; a refused refund is kept (below).
		return fmt.Errorf("%w: %s refused: nothing moved", provider.ErrIgnored, it.EventCode)
	}
	switch it.EventCode {
	case CodeCapture:
		amount, cur, err := m.amount()
		if err != nil {
			return err
		}
		m.fact(statemachine.FactCaptured, it.PspReference, amount, cur)
		m.post(ledger.NewCapture(CaptureRef(it.PspReference), m.out.PaymentID, m.eventID, cur, amount, m.at))
	case CodeCaptureFailed:
		amount, cur, err := m.amount()
		if err != nil {
			return err
		}
		m.fact(statemachine.FactCaptureFailed, it.PspReference, amount, cur)
		m.post(ledger.NewCaptureReversal(CaptureReversalRef(it.PspReference), m.out.PaymentID, m.eventID, cur, amount, m.at))
	case CodeCancellation:
		m.fact(statemachine.FactCanceled, it.PspReference, decimal.Decimal{}, "")
	case CodeCancelOrRefund:
		// Adyen cancels an uncaptured payment and refunds a captured one,
		// and says which it did.
		switch action, _ := it.AdditionalData["modification.action"].(string); strings.ToLower(action) {
		case "cancel":
			m.fact(statemachine.FactCanceled, it.PspReference, decimal.Decimal{}, "")
		case "refund":
			return m.refund()
		default:
			return permanent("CANCEL_OR_REFUND without additionalData.modification.action cancel or refund")
		}
	case CodeRefund:
		// A refund paygate asked for waits on this: the item names it by
		// the refund's pspReference (which the request recorded) and by
		// merchantReference, the reference paygate sent (its request id).
		m.report(success, "Adyen refused the refund")
		if !success {
			// Refused: no money left the balance, but the refund is known
			// to have failed.
			amount, cur, err := m.amount()
			if err != nil {
				return err
			}
			m.fact(statemachine.FactRefundFailed, it.PspReference, amount, cur)
			return nil
		}
		return m.refund()
	case CodeRefundFailed, CodeRefundedReversed:
		// The scheme returned a refund that had succeeded: the money is
		// back in the balance, dated now; the refund keeps its own date.
		amount, cur, err := m.amount()
		if err != nil {
			return err
		}
		m.report(false, "Adyen reported "+it.EventCode)
		m.fact(statemachine.FactRefundFailed, it.PspReference, amount, cur)
		m.post(ledger.NewRefundReversal(RefundReversalRef(it.PspReference), m.out.PaymentID, m.eventID, cur, amount, m.at))
	case CodeChargeback:
		amount, cur, err := m.amount()
		if err != nil {
			return err
		}
		m.fact(statemachine.FactDisputeOpened, it.PspReference, decimal.Decimal{}, cur)
		m.fact(statemachine.FactDisputeFundsWithdrawn, it.PspReference, amount, cur)
		m.post(ledger.NewDisputeWithdrawal(ChargebackRef(it.PspReference), m.out.PaymentID, m.eventID, cur, amount, m.at))
		if m.disputeLost() {
			m.fact(statemachine.FactDisputeClosedLost, it.PspReference, decimal.Decimal{}, cur)
		}
	case CodeChargebackReverse:
		amount, cur, err := m.amount()
		if err != nil {
			return err
		}
		m.fact(statemachine.FactDisputeOpened, it.PspReference, decimal.Decimal{}, cur)
		m.fact(statemachine.FactDisputeFundsReinstated, it.PspReference, amount, cur)
		m.fact(statemachine.FactDisputeClosedWon, it.PspReference, decimal.Decimal{}, cur)
		m.post(ledger.NewDisputeReinstatement(ChargebackReversalRef(it.PspReference), m.out.PaymentID, m.eventID, cur, amount, m.at))
	case CodeSecondChargeback:
		// The issuer came back after the reversal: a dispute of its own,
		// lost, so that the first one's withdrawal and reinstatement stay
		// as they were and the money withdrawn again counts once.
		amount, cur, err := m.amount()
		if err != nil {
			return err
		}
		second := it.PspReference + ":second"
		m.fact(statemachine.FactDisputeOpened, second, decimal.Decimal{}, cur)
		m.fact(statemachine.FactDisputeFundsWithdrawn, second, amount, cur)
		m.fact(statemachine.FactDisputeClosedLost, second, decimal.Decimal{}, cur)
		m.post(ledger.NewDisputeWithdrawal(SecondChargebackRef(it.PspReference), m.out.PaymentID, m.eventID, cur, amount, m.at))
	}
	return nil
}

// reportAvailable announces a report: pspReference is its file name, and
// reason its URL. A settlement details report is downloaded and its batch
// reconciled; any other report is acknowledged and ignored.
func (m *mapper) reportAvailable(success bool) error {
	it := m.item
	batch, ok := SettlementReportBatch(it.PspReference)
	if !success || !ok {
		return fmt.Errorf("%w: REPORT_AVAILABLE of a report paygate does not read", provider.ErrIgnored)
	}
	if err := checkReportURL(it.Reason, it.PspReference); err != nil {
		return permanent("REPORT_AVAILABLE of %s: %v", it.PspReference, err)
	}
	m.out.Reports = append(m.out.Reports, provider.ReportNotice{FileName: it.PspReference, URL: it.Reason, Batch: batch})
	return nil
}

func (m *mapper) authorisation(success bool) error {
	it := m.item
	m.out.PaymentID = it.PspReference
	if email, _ := it.AdditionalData["shopperEmail"].(string); email != "" {
		// Adyen includes the shopper's email only when the account is set
		// up to; without it the address is unknown, not known to be absent.
		m.out.ReceiptEmail, m.out.ReceiptEmailKnown = email, true
	}
	// Only the AUTHORISATION speaks of the order: a modification's
	// merchantReference is the reference of the modification's own request
	// (a refund's is paygate's refund request id).
	m.out.Details = statemachine.Reported(it.MerchantReference, stringOf(it.AdditionalData["shopperReference"]), "",
		metadataOf(it.AdditionalData), statemachine.Stamp{At: m.at, EventID: m.eventID})
	amount, cur, err := m.amount()
	if err != nil {
		return err
	}
	if !success {
		m.fact(statemachine.FactPaymentFailed, it.PspReference, decimal.Decimal{}, cur)
		return nil
	}
	if amount.IsZero() {
		// A zero-value authorisation checks a card (to store it for later
		// payments); it is no payment and moves no money.
		return fmt.Errorf("%w: zero-value AUTHORISATION (a card check)", provider.ErrIgnored)
	}
	m.fact(statemachine.FactAmountKnown, it.PspReference, amount, cur)
	m.fact(statemachine.FactAuthorized, it.PspReference, amount, cur)
	return nil
}

// refund records a refund that took money from the balance.
func (m *mapper) refund() error {
	amount, cur, err := m.amount()
	if err != nil {
		return err
	}
	psp := m.item.PspReference
	m.fact(statemachine.FactRefundSucceeded, psp, amount, cur)
	m.post(ledger.NewRefund(RefundRef(psp), m.out.PaymentID, m.eventID, cur, amount, m.at))
	return nil
}

// report records the item's word on a refund paygate may have asked for.
// A failure's reason is what, then Adyen's own reason when it gives one.
func (m *mapper) report(succeeded bool, what string) {
	rep := provider.RefundReport{Reference: m.item.MerchantReference, ProviderRefundID: m.item.PspReference, Succeeded: succeeded}
	if !succeeded {
		rep.FailureReason = what
		if m.item.Reason != "" {
			rep.FailureReason += ": " + m.item.Reason
		}
	}
	m.out.Refunds = append(m.out.Refunds, rep)
}

// disputeLost reports a chargeback Adyen already counts as lost: accepted
// by the merchant, undefended past its window, or decided.
func (m *mapper) disputeLost() bool {
	status, _ := m.item.AdditionalData["disputeStatus"].(string)
	switch strings.ToLower(status) {
	case "lost", "accepted", "expired":
		return true
	}
	return false
}

func (m *mapper) amount() (decimal.Decimal, string, error) {
	return FromMinor(m.item.Amount.Value, m.item.Amount.Currency, m.item.EventCode+" amount")
}

func (m *mapper) fact(kind statemachine.FactKind, objectID string, amount decimal.Decimal, currency string) {
	m.out.Facts = append(m.out.Facts, statemachine.Fact{
		Kind: kind, ObjectID: objectID, Amount: amount, Currency: currency, EventID: m.eventID, At: m.at,
	})
}

func (m *mapper) post(t ledger.Transaction) { m.out.Postings = append(m.out.Postings, t) }

// metadataPrefix marks the additionalData entries that carry the
// payment's metadata (metadata.<key>), as Adyen sends what the merchant
// gave in the payment request's metadata.
const metadataPrefix = "metadata."

// metadataOf collects the metadata.<key> entries of additionalData.
func metadataOf(additional map[string]any) map[string]string {
	var out map[string]string
	for k, v := range additional {
		key, ok := strings.CutPrefix(k, metadataPrefix)
		if s := stringOf(v); ok && s != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[key] = s
		}
	}
	return out
}

// stringOf is v when it is a string; additionalData's values are strings
// by Adyen's contract, and anything else is not kept.
func stringOf(v any) string {
	s, _ := v.(string)
	return s
}
