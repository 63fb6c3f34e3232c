package stripesim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// The objects below are Stripe's API objects as API version 2024-06-20
// renders them, trimmed to the fields a payments backend reads. Amounts are
// integers in the currency's minor unit; unset text is null, not "".

type paymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CanceledAt         *int64            `json:"canceled_at"`
	CancellationReason *string           `json:"cancellation_reason"`
	CaptureMethod      string            `json:"capture_method"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Customer           *string           `json:"customer"`
	Description        *string           `json:"description"`
	LastPaymentError   *paymentError     `json:"last_payment_error"`
	LatestCharge       *string           `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	ReceiptEmail       *string           `json:"receipt_email"`
	Status             string            `json:"status"`
}

// MarshalJSON renders the intent; confirmation_method is automatic unless
// set, as the simulator's intents are confirmed in one step.
func (pi paymentIntent) MarshalJSON() ([]byte, error) {
	type plain paymentIntent
	p := plain(pi)
	if p.ConfirmationMethod == "" {
		p.ConfirmationMethod = "automatic"
	}
	return marshalObject(p)
}

type paymentError struct {
	Charge      string `json:"charge"`
	Code        string `json:"code"`
	DeclineCode string `json:"decline_code"`
	Message     string `json:"message"`
	Type        string `json:"type"`
}

// charge has no refunds list: since API version 2022-11-15 Stripe includes
// it only when expanded, and never in a webhook's data.object, so a
// charge.refunded event says how much was refunded (amount_refunded) but not
// by which refunds.
type charge struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCaptured     int64             `json:"amount_captured"`
	AmountRefunded     int64             `json:"amount_refunded"`
	BalanceTransaction *string           `json:"balance_transaction"`
	BillingDetails     billingDetails    `json:"billing_details"`
	Captured           bool              `json:"captured"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Customer           *string           `json:"customer"`
	Description        *string           `json:"description"`
	Disputed           bool              `json:"disputed"`
	FailureCode        *string           `json:"failure_code"`
	FailureMessage     *string           `json:"failure_message"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	Outcome            *outcome          `json:"outcome"`
	Paid               bool              `json:"paid"`
	PaymentIntent      *string           `json:"payment_intent"`
	PaymentMethod      string            `json:"payment_method"`
	ReceiptEmail       *string           `json:"receipt_email"`
	Refunded           bool              `json:"refunded"`
	Status             string            `json:"status"`
}

type billingDetails struct {
	Address *struct{} `json:"address"`
	Email   *string   `json:"email"`
	Name    *string   `json:"name"`
	Phone   *string   `json:"phone"`
}

type outcome struct {
	NetworkStatus string  `json:"network_status"`
	Reason        *string `json:"reason"`
	RiskLevel     string  `json:"risk_level"`
	SellerMessage string  `json:"seller_message"`
	Type          string  `json:"type"`
}

type refund struct {
	ID                        string            `json:"id"`
	Object                    string            `json:"object"`
	Amount                    int64             `json:"amount"`
	BalanceTransaction        *string           `json:"balance_transaction"`
	Charge                    string            `json:"charge"`
	Created                   int64             `json:"created"`
	Currency                  string            `json:"currency"`
	FailureBalanceTransaction *string           `json:"failure_balance_transaction,omitempty"`
	FailureReason             *string           `json:"failure_reason,omitempty"`
	Metadata                  map[string]string `json:"metadata"`
	PaymentIntent             *string           `json:"payment_intent"`
	Reason                    *string           `json:"reason"`
	Status                    string            `json:"status"`
}

type dispute struct {
	ID                  string                 `json:"id"`
	Object              string                 `json:"object"`
	Amount              int64                  `json:"amount"`
	BalanceTransactions []*BalanceTransaction  `json:"balance_transactions"`
	Charge              string                 `json:"charge"`
	Created             int64                  `json:"created"`
	Currency            string                 `json:"currency"`
	Evidence            disputeEvidence        `json:"evidence"`
	EvidenceDetails     disputeEvidenceDetails `json:"evidence_details"`
	IsChargeRefundable  bool                   `json:"is_charge_refundable"`
	Livemode            bool                   `json:"livemode"`
	Metadata            map[string]string      `json:"metadata"`
	PaymentIntent       *string                `json:"payment_intent"`
	Reason              string                 `json:"reason"`
	Status              string                 `json:"status"`
}

// disputeEvidence is what the merchant submitted to fight a dispute, with
// API 2024-06-20's fields; the simulator submits none, so each is null.
type disputeEvidence struct {
	AccessActivityLog            *string `json:"access_activity_log"`
	BillingAddress               *string `json:"billing_address"`
	CancellationPolicy           *string `json:"cancellation_policy"`
	CancellationPolicyDisclosure *string `json:"cancellation_policy_disclosure"`
	CancellationRebuttal         *string `json:"cancellation_rebuttal"`
	CustomerCommunication        *string `json:"customer_communication"`
	CustomerEmailAddress         *string `json:"customer_email_address"`
	CustomerName                 *string `json:"customer_name"`
	CustomerPurchaseIP           *string `json:"customer_purchase_ip"`
	CustomerSignature            *string `json:"customer_signature"`
	DuplicateChargeDocumentation *string `json:"duplicate_charge_documentation"`
	DuplicateChargeExplanation   *string `json:"duplicate_charge_explanation"`
	DuplicateChargeID            *string `json:"duplicate_charge_id"`
	ProductDescription           *string `json:"product_description"`
	Receipt                      *string `json:"receipt"`
	RefundPolicy                 *string `json:"refund_policy"`
	RefundPolicyDisclosure       *string `json:"refund_policy_disclosure"`
	RefundRefusalExplanation     *string `json:"refund_refusal_explanation"`
	ServiceDate                  *string `json:"service_date"`
	ServiceDocumentation         *string `json:"service_documentation"`
	ShippingAddress              *string `json:"shipping_address"`
	ShippingCarrier              *string `json:"shipping_carrier"`
	ShippingDate                 *string `json:"shipping_date"`
	ShippingDocumentation        *string `json:"shipping_documentation"`
	ShippingTrackingNumber       *string `json:"shipping_tracking_number"`
	UncategorizedFile            *string `json:"uncategorized_file"`
	UncategorizedText            *string `json:"uncategorized_text"`
}

// disputeEvidenceDetails is the state of the evidence submission: none
// staged, none submitted. DueBy is null when the network allows no response.
type disputeEvidenceDetails struct {
	DueBy           *int64 `json:"due_by"`
	HasEvidence     bool   `json:"has_evidence"`
	PastDue         bool   `json:"past_due"`
	SubmissionCount int64  `json:"submission_count"`
}

type payout struct {
	ID                        string            `json:"id"`
	Object                    string            `json:"object"`
	Amount                    int64             `json:"amount"`
	ArrivalDate               int64             `json:"arrival_date"`
	Automatic                 bool              `json:"automatic"`
	BalanceTransaction        *string           `json:"balance_transaction"`
	Created                   int64             `json:"created"`
	Currency                  string            `json:"currency"`
	Description               string            `json:"description"`
	Destination               *string           `json:"destination"`
	FailureBalanceTransaction *string           `json:"failure_balance_transaction"`
	FailureCode               *string           `json:"failure_code"`
	FailureMessage            *string           `json:"failure_message"`
	Livemode                  bool              `json:"livemode"`
	Metadata                  map[string]string `json:"metadata"`
	Method                    string            `json:"method"`
	ReconciliationStatus      string            `json:"reconciliation_status"`
	SourceType                string            `json:"source_type"`
	Status                    string            `json:"status"`
	Type                      string            `json:"type"`
}

// MarshalJSON renders the payout. Unless set, reconciliation_status is
// completed for an automatic payout, whose balance transactions the
// simulator assigns to it when it is created (GET
// /v1/balance_transactions?payout= lists them at once), and not_applicable
// for a manual one, as Stripe reconciles only automatic payouts.
func (po payout) MarshalJSON() ([]byte, error) {
	type plain payout
	p := plain(po)
	if p.ReconciliationStatus == "" {
		p.ReconciliationStatus = "not_applicable"
		if p.Automatic {
			p.ReconciliationStatus = "completed"
		}
	}
	return marshalObject(p)
}

// marshalObject encodes v as the event encoder does, without escaping HTML
// characters (Stripe sends "&" as it is).
func marshalObject(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

type customer struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Created  int64             `json:"created"`
	Email    *string           `json:"email"`
	Livemode bool              `json:"livemode"`
	Metadata map[string]string `json:"metadata"`
	Name     *string           `json:"name"`
}

// BalanceTransactionType is a balance transaction's type, as Stripe names it.
type BalanceTransactionType string

// The balance transaction types the simulator produces.
const (
	TxnCharge        BalanceTransactionType = "charge"
	TxnRefund        BalanceTransactionType = "refund"
	TxnRefundFailure BalanceTransactionType = "refund_failure"
	TxnAdjustment    BalanceTransactionType = "adjustment"
	TxnPayout        BalanceTransactionType = "payout"
	TxnPayoutFailure BalanceTransactionType = "payout_failure"
	TxnStripeFee     BalanceTransactionType = "stripe_fee"
)

// ReportingCategory is Stripe's accounting classification of a balance
// transaction, the field reconciliation should group by.
type ReportingCategory string

// The reporting categories the simulator produces.
const (
	CategoryCharge          ReportingCategory = "charge"
	CategoryRefund          ReportingCategory = "refund"
	CategoryRefundFailure   ReportingCategory = "refund_failure"
	CategoryDispute         ReportingCategory = "dispute"
	CategoryDisputeReversal ReportingCategory = "dispute_reversal"
	CategoryPayout          ReportingCategory = "payout"
	CategoryPayoutReversal  ReportingCategory = "payout_reversal"
	CategoryFee             ReportingCategory = "fee"
	CategoryOtherAdjustment ReportingCategory = "other_adjustment"
)

// BalanceTransaction is a movement of money in the Stripe balance, with
// Stripe's fields. Amount is gross and signed (negative leaves the balance);
// Net is Amount − Fee. Created and AvailableOn are unix seconds.
//
// Currency is the settlement currency: the balance's, which differs from
// the charge's (the presentment currency) when the account settles in
// another one. Then ExchangeRate is the rate Stripe converted at, in major
// units (10.00 eur × 1.085 = 10.85 usd), and Amount and Fee are in the
// settlement currency.
type BalanceTransaction struct {
	ID          string
	Amount      int64
	AvailableOn int64
	Created     int64
	Currency    string
	Description string
	// ExchangeRate is a decimal string ("1.085"), empty when no conversion
	// took place; rendered as a JSON number, as Stripe sends it.
	ExchangeRate      string
	Fee               int64
	FeeDetails        []FeeDetail
	Net               int64
	ReportingCategory ReportingCategory
	// Source is the id of the object that moved the money (ch_, re_, dp_,
	// po_), or empty, rendered as null, for a standalone fee.
	Source string
	// Status is pending until AvailableOn on the simulator clock, then
	// available.
	Status string
	Type   BalanceTransactionType
}

// FeeDetail is one line of a balance transaction's fee breakdown.
type FeeDetail struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Description string `json:"description"`
	Type        string `json:"type"`
}

// MarshalJSON renders the transaction exactly as Stripe's API does.
func (b BalanceTransaction) MarshalJSON() ([]byte, error) {
	fd := b.FeeDetails
	if fd == nil {
		fd = []FeeDetail{}
	}
	return json.Marshal(struct {
		ID                string            `json:"id"`
		Object            string            `json:"object"`
		Amount            int64             `json:"amount"`
		AvailableOn       int64             `json:"available_on"`
		Created           int64             `json:"created"`
		Currency          string            `json:"currency"`
		Description       *string           `json:"description"`
		ExchangeRate      *json.RawMessage  `json:"exchange_rate"`
		Fee               int64             `json:"fee"`
		FeeDetails        []FeeDetail       `json:"fee_details"`
		Net               int64             `json:"net"`
		ReportingCategory ReportingCategory `json:"reporting_category"`
		Source            *string           `json:"source"`
		Status            string            `json:"status"`
		Type              string            `json:"type"`
	}{
		ID: b.ID, Object: "balance_transaction", Amount: b.Amount, AvailableOn: b.AvailableOn,
		Created: b.Created, Currency: b.Currency, Description: nullable(b.Description),
		ExchangeRate: rawNumber(b.ExchangeRate), Fee: b.Fee, FeeDetails: fd, Net: b.Net, ReportingCategory: b.ReportingCategory,
		Source: nullable(b.Source), Status: b.Status, Type: string(b.Type),
	})
}

// rawNumber renders a decimal string as a JSON number, or null when empty.
func rawNumber(d string) *json.RawMessage {
	if d == "" {
		return nil
	}
	raw := json.RawMessage(d)
	return &raw
}

func (s *Sim) newTxnLocked(typ BalanceTransactionType, cat ReportingCategory, amount, fee int64, currency, source, desc string) *BalanceTransaction {
	bt := &BalanceTransaction{
		ID:                s.newID("txn"),
		Amount:            amount,
		AvailableOn:       s.unix(),
		Created:           s.unix(),
		Currency:          currency,
		Description:       desc,
		Fee:               fee,
		FeeDetails:        []FeeDetail{},
		Net:               amount - fee,
		ReportingCategory: cat,
		Source:            source,
		Status:            "available",
		Type:              typ,
	}
	s.txnIdx[bt.ID] = len(s.txns)
	s.txns = append(s.txns, bt)
	return bt
}

// settleLocked makes funds available once the clock passes their
// available_on, as Stripe's balance does.
func (s *Sim) settleLocked() {
	now := s.unix()
	for _, bt := range s.txns {
		if now >= bt.AvailableOn {
			bt.Status = "available"
		} else {
			bt.Status = "pending"
		}
	}
}

// BalanceTransactions returns what the provider lists, in creation order:
// every balance transaction except those removed with
// DropBalanceTransaction, including any tampering.
func (s *Sim) BalanceTransactions() []BalanceTransaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]BalanceTransaction, 0, len(s.txns))
	for _, bt := range s.txns {
		if !s.dropped[bt.ID] {
			out = append(out, cloneTxn(bt))
		}
	}
	return out
}

// BalanceTransaction returns one balance transaction by id; false if it does
// not exist or was dropped.
func (s *Sim) BalanceTransaction(id string) (BalanceTransaction, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.txnIdx[id]
	if !ok || s.dropped[id] {
		return BalanceTransaction{}, false
	}
	return cloneTxn(s.txns[i]), true
}

func cloneTxn(bt *BalanceTransaction) BalanceTransaction {
	c := *bt
	c.FeeDetails = slices.Clone(bt.FeeDetails)
	return c
}

func (s *Sim) txnLocked(op, id string) *BalanceTransaction {
	i, ok := s.txnIdx[id]
	if !ok {
		panic(fmt.Sprintf("stripesim: %s: unknown balance transaction %s", op, id))
	}
	return s.txns[i]
}

// TamperBalanceTransaction changes the amount the provider lists for a
// balance transaction (Net follows, the fee stays), so the ledger built from
// the events disagrees with it: an amount_mismatch for reconciliation.
// Events already emitted keep the old values. It panics on an unknown id.
func (s *Sim) TamperBalanceTransaction(txnID string, amount int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bt := s.txnLocked("TamperBalanceTransaction", txnID)
	bt.Amount = amount
	bt.Net = amount - bt.Fee
}

// TamperBalanceTransactionCurrency changes the currency the provider lists
// for a balance transaction: a currency_mismatch for reconciliation. It
// panics on an unknown id.
func (s *Sim) TamperBalanceTransactionCurrency(txnID, currency string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bt := s.txnLocked("TamperBalanceTransactionCurrency", txnID)
	bt.Currency = strings.ToLower(currency)
	for i := range bt.FeeDetails {
		bt.FeeDetails[i].Currency = bt.Currency
	}
}

// DropBalanceTransaction hides a balance transaction from the API, though
// its events were emitted: the ledger has it and the provider does not
// (missing_at_provider). It panics on an unknown id.
func (s *Sim) DropBalanceTransaction(txnID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.txnLocked("DropBalanceTransaction", txnID)
	s.dropped[txnID] = true
}

// BalanceTransactionOpts describes a balance transaction with no event
// behind it, for BalanceTransactionOnly.
type BalanceTransactionOpts struct {
	// Type defaults to stripe_fee.
	Type BalanceTransactionType
	// ReportingCategory defaults from Type (stripe_fee → fee, adjustment →
	// other_adjustment, otherwise the type's own name).
	ReportingCategory ReportingCategory
	// Amount is signed: a fee the account pays is negative.
	Amount int64
	// Fee is kept in the transaction's fee field; Net is Amount − Fee.
	Fee int64
	// Currency defaults to usd.
	Currency string
	// Source is the related object's id, if any.
	Source      string
	Description string
}

// BalanceTransactionOnly creates a provider record that no event announces,
// such as a Radar or billing fee (type stripe_fee): the provider has it and
// the ledger does not (missing_in_ledger, or a fee to post).
func (s *Sim) BalanceTransactionOnly(opts BalanceTransactionOpts) BalanceTransaction {
	typ := opts.Type
	if typ == "" {
		typ = TxnStripeFee
	}
	cat := opts.ReportingCategory
	if cat == "" {
		switch typ {
		case TxnStripeFee:
			cat = CategoryFee
		case TxnAdjustment:
			cat = CategoryOtherAdjustment
		default:
			cat = ReportingCategory(typ)
		}
	}
	cur := strings.ToLower(opts.Currency)
	if cur == "" {
		cur = "usd"
	}
	desc := opts.Description
	if desc == "" && typ == TxnStripeFee {
		desc = "Radar for Fraud Teams"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	bt := s.newTxnLocked(typ, cat, opts.Amount, opts.Fee, cur, opts.Source, desc)
	if opts.Fee != 0 {
		bt.FeeDetails = []FeeDetail{{Amount: opts.Fee, Currency: cur, Description: desc, Type: "stripe_fee"}}
	}
	return cloneTxn(bt)
}
