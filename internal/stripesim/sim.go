// Package stripesim is a Stripe stand-in that speaks Stripe's real protocol:
// it keeps a small world of payments and money movements, emits the events
// Stripe would emit for them in Stripe's JSON shape, signs and POSTs them as
// Stripe's webhook delivery does, and serves the list endpoints that
// reconciliation reads (GET /v1/events, GET /v1/balance_transactions) with
// Stripe's pagination and auth, and POST /v1/refunds with Stripe's
// idempotency keys.
//
// A scenario is a script of typed calls on a *Sim (Pay, Capture, Refund,
// Dispute, Payout…). Given the same Config.Seed and the same script, every id,
// payload and balance transaction is byte-for-byte the same, and the clock
// only moves when the script moves it (SetNow, Advance), so a test can put a
// whole day of activity on a chosen UTC date. Scenario methods panic when the
// script asks for something Stripe itself would refuse (capturing twice,
// refunding more than was captured): a bad script is a bug in the test, not
// an outcome to handle. Emit builds anything the typed methods refuse, for
// tests that need impossible facts.
//
// The simulator owns only the provider's side of the world. It must never be
// imported by production code, except by cmd's demo and load commands, and it
// never talks to the real Stripe.
package stripesim

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// APIVersion is the Stripe API version the simulator renders objects in, the
// one stripe-go v79 is pinned to.
const APIVersion = "2024-06-20"

// Defaults used when Config leaves a field empty.
const (
	DefaultAPIKey        = "sk_test_stripesim"
	DefaultWebhookSecret = "whsec_stripesim_test_secret"
)

// Config configures a Sim. Every field is optional.
type Config struct {
	// APIKey is the secret key the HTTP API accepts; DefaultAPIKey if empty.
	APIKey string
	// WebhookSecret signs delivered events; DefaultWebhookSecret if empty.
	WebhookSecret string
	// Seed makes ids, shuffles and duplicate draws reproducible. Zero picks
	// a random seed (see Sim.Seed), so two simulators in one test never hand
	// out the same event ids by accident.
	Seed int64
	// Now is the simulator clock's starting time; the wall clock if zero.
	Now time.Time
	// Fees is the fee schedule; nil means Stripe's standard US pricing.
	// Fees are charged in the settlement currency.
	Fees *Fees
	// SettlementCurrency is the account's default currency, the one its
	// balance is kept in. A charge in another (presentment) currency settles
	// converted at ExchangeRates: its balance transactions are in this
	// currency, with exchange_rate set. Empty: every charge settles in its
	// own currency.
	SettlementCurrency string
	// AccountAPIVersion is the account's API version, the one GET
	// /v1/events renders each event in as of its creation
	// (SetAccountAPIVersion changes it later): APIVersion, the webhook
	// endpoint's, when empty, or LegacyAPIVersion.
	AccountAPIVersion string
	// ExchangeRates maps a presentment currency to the rate, a decimal
	// string in major units ("1.085": 10.00 eur settles as 10.85 usd),
	// at which it converts into SettlementCurrency. SetExchangeRate changes
	// a rate later, as the market does.
	ExchangeRates map[string]string
}

// Fees is the fee schedule applied to balance transactions, in minor units.
// The zero value charges no fees at all.
type Fees struct {
	// PercentBP is the share of a charge taken as fee, in basis points
	// (290 is 2.9%); the result is rounded half up to a minor unit.
	PercentBP int64
	// Fixed is added to every charge's fee.
	Fixed int64
	// Dispute is withdrawn with a dispute's funds and returned if it is won.
	Dispute int64
}

// StandardFees is Stripe's standard US card pricing: 2.9% + 30, and 15.00 per
// dispute.
var StandardFees = Fees{PercentBP: 290, Fixed: 30, Dispute: 1500}

// chargeFee is Stripe's processing fee on a charge of amount minor units,
// computed with integers only: round(amount × bp / 10000) + fixed.
func (f Fees) chargeFee(amount int64) int64 {
	return (amount*f.PercentBP+5000)/10000 + f.Fixed
}

// Sim is a simulated Stripe account. It is safe for concurrent use; handles
// it returns (*Payment, *Refund…) belong to the caller.
type Sim struct {
	mu     sync.Mutex
	apiKey string
	secret string
	seed   int64
	rng    *mrand.Rand
	now    time.Time
	fees   Fees
	// settlement and rates: see Config.SettlementCurrency and ExchangeRates.
	settlement string
	rates      map[string]decimal.Decimal
	reqSeq     atomic.Uint64 // request ids of API answers, apart from the seeded ids
	intents    map[string]*paymentIntent
	charges    map[string]*charge
	customers  map[string]*customer
	refunds    map[string]*refund
	disputs    map[string]*dispute
	payouts    map[string]*payout

	events   []Event
	eventIdx map[string]int
	skipped  map[string]bool

	txns     []*BalanceTransaction
	txnIdx   map[string]int
	dropped  map[string]bool
	payoutOf map[string]string // balance transaction id → the payout that paid it out

	account string              // the ten characters of every id that name the account
	issued  map[string]struct{} // every id newID has returned

	accountVersion string // see Config.AccountAPIVersion

	refundAPI refundAPIState // POST /v1/refunds: idempotency keys and test knobs
	limits    limitState     // requests per route and queued rate limits
}

// New returns a simulator with an empty account.
func New(cfg Config) *Sim {
	s := &Sim{
		apiKey:    cfg.APIKey,
		secret:    cfg.WebhookSecret,
		seed:      cfg.Seed,
		now:       cfg.Now,
		fees:      StandardFees,
		intents:   map[string]*paymentIntent{},
		charges:   map[string]*charge{},
		customers: map[string]*customer{},
		refunds:   map[string]*refund{},
		disputs:   map[string]*dispute{},
		payouts:   map[string]*payout{},
		eventIdx:  map[string]int{},
		skipped:   map[string]bool{},
		txnIdx:    map[string]int{},
		dropped:   map[string]bool{},
		payoutOf:  map[string]string{},
		issued:    map[string]struct{}{},
	}
	if s.apiKey == "" {
		s.apiKey = DefaultAPIKey
	}
	if s.secret == "" {
		s.secret = DefaultWebhookSecret
	}
	if s.seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		s.seed = int64(binary.LittleEndian.Uint64(b[:]) >> 1)
		if s.seed == 0 {
			s.seed = 1
		}
	}
	if s.now.IsZero() {
		s.now = time.Now()
	}
	s.now = s.now.UTC().Truncate(time.Second)
	if cfg.Fees != nil {
		s.fees = *cfg.Fees
	}
	if cfg.AccountAPIVersion != "" {
		checkAccountVersion(cfg.AccountAPIVersion)
		s.accountVersion = cfg.AccountAPIVersion
	}
	s.settlement = strings.ToLower(cfg.SettlementCurrency)
	s.rates = map[string]decimal.Decimal{}
	for cur, rate := range cfg.ExchangeRates {
		s.setRateLocked(cur, rate)
	}
	s.rng = mrand.New(mrand.NewPCG(uint64(s.seed), 0x9e3779b97f4a7c15))
	// The account's characters come from their own generator, so that the
	// seeded sequence of everything else does not depend on them.
	acct := mrand.New(mrand.NewPCG(uint64(s.seed), 0xacc7))
	var a [10]byte
	for i := range a {
		a[i] = idAlphabet[acct.IntN(len(idAlphabet))]
	}
	s.account = string(a[:])
	return s
}

// APIKey is the secret key the HTTP API accepts.
func (s *Sim) APIKey() string { return s.apiKey }

// WebhookSecret is the secret Deliver signs with unless told otherwise.
func (s *Sim) WebhookSecret() string { return s.secret }

// Seed is the seed in use; with Config.Seed zero it is the one drawn at
// random, so a failing run can be replayed.
func (s *Sim) Seed() int64 { return s.seed }

// Now is the simulator clock: the created time of the next object or event.
func (s *Sim) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// SetNow sets the simulator clock (to the second, UTC). It may move backwards;
// lists stay ordered by created time, newest first.
func (s *Sim) SetNow(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = t.UTC().Truncate(time.Second)
	s.settleLocked()
}

// Advance moves the simulator clock forward by d.
func (s *Sim) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d).Truncate(time.Second)
	s.settleLocked()
}

// SetExchangeRate sets the rate at which currency converts into the
// settlement currency from now on; balance transactions already created
// keep theirs. It panics if rate is not a positive decimal.
func (s *Sim) SetExchangeRate(currency, rate string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setRateLocked(currency, rate)
}

func (s *Sim) setRateLocked(currency, rate string) {
	r, err := decimal.NewFromString(rate)
	if err != nil || !r.IsPositive() {
		panic(fmt.Sprintf("stripesim: exchange rate %q for %s is not a positive decimal", rate, currency))
	}
	s.rates[strings.ToLower(currency)] = r
}

// convertLocked is how Stripe books amount minor units of currency in the
// balance: in the settlement currency, converted at the current rate and
// rounded half away from zero to its minor unit, with the rate it used
// ("" when currency is the settlement currency). It panics when no rate is
// set for currency.
func (s *Sim) convertLocked(amount int64, currency string) (settled int64, settlement, rate string) {
	if s.settlement == "" || s.settlement == currency {
		return amount, currency, ""
	}
	r, ok := s.rates[currency]
	if !ok {
		panic(fmt.Sprintf("stripesim: no exchange rate from %s to %s", currency, s.settlement))
	}
	major := decimal.New(amount, -minorExponent(currency))
	return major.Mul(r).Shift(minorExponent(s.settlement)).Round(0).IntPart(), s.settlement, r.String()
}

// minorExponent is the number of decimals Stripe counts a currency's
// amounts in: zero-decimal currencies (jpy, krw…) count whole units,
// three-decimal ones (kwd, bhd…) thousandths.
func minorExponent(currency string) int32 {
	switch currency {
	case "bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf":
		return 0
	case "bhd", "jod", "kwd", "omr", "tnd":
		return 3
	}
	return 2
}

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// idEpoch is the Unix second that Stripe's ids count from. Every fixture
// with a real created time in the stripe-mock releases the tests pin (ids
// such as link_1PgbAmB7WZ01zgkWwbZvcvQ8, created 1721950452) decodes to
// it; see TestIDsCountSecondsAsStripesDo.
const idEpoch = 1342389380

// newID returns an id shaped as Stripe's: the prefix, an underscore, a
// version character, five base-62 characters counting the seconds from
// idEpoch to the simulator clock, ten characters of the account, and eight
// drawn from the seeded generator. Ids made later sort later, as Stripe's
// do, so an index on them grows at its right edge; an id already issued is
// drawn again.
func (s *Sim) newID(prefix string) string {
	secs := max(s.now.Unix()-idEpoch, 0)
	for {
		var b strings.Builder
		b.Grow(len(prefix) + 25)
		b.WriteString(prefix)
		b.WriteString("_1")
		var t [5]byte
		for i, n := len(t)-1, secs; i >= 0; i-- {
			t[i] = idAlphabet[n%int64(len(idAlphabet))]
			n /= int64(len(idAlphabet))
		}
		b.Write(t[:])
		b.WriteString(s.account)
		for range 8 {
			b.WriteByte(idAlphabet[s.rng.IntN(len(idAlphabet))])
		}
		id := b.String()
		if _, dup := s.issued[id]; !dup {
			s.issued[id] = struct{}{}
			return id
		}
	}
}

func (s *Sim) unix() int64 { return s.now.Unix() }

func ptr[T any](v T) *T { return &v }

// nullable is nil for the empty string, as Stripe sends null for unset text.
func nullable(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

// Payment is the caller's handle on a PaymentIntent and its charges.
type Payment struct {
	// ID is the PaymentIntent id (pi_…), which paygate uses as the payment id.
	ID string
	// ChargeID is the successful charge, or the last failed one when the
	// payment was declined.
	ChargeID string
	// FailedChargeIDs are the declined attempts, in order.
	FailedChargeIDs []string
	Amount          int64
	Currency        string
	Email           string
	ManualCapture   bool
	// Customer, Description and Metadata are the PaymentIntent's, as Pay
	// or UpdatePayment last set them: Customer a cus_ id, or empty.
	Customer    string
	Description string
	Metadata    map[string]string
	// BalanceTransactionID is the charge's balance transaction; empty until
	// the charge is captured.
	BalanceTransactionID string
}

// PayOpts describes a payment for Sim.Pay.
type PayOpts struct {
	// Amount in the currency's minor unit, as Stripe counts it. Must be > 0.
	Amount int64
	// Currency is an ISO code; lowercased. "usd" if empty.
	Currency string
	// Email is the receipt email and billing email.
	Email string
	// Name is the billing name.
	Name string
	// ManualCapture authorizes only: the charge succeeds uncaptured and the
	// intent waits in requires_capture until Sim.Capture or Sim.Cancel.
	ManualCapture bool
	// Processing emits payment_intent.processing first, as asynchronous
	// payment methods do.
	Processing bool
	// FailFirst is the number of declined attempts before the one that
	// succeeds; each emits charge.failed and payment_intent.payment_failed.
	FailFirst int
	// Declined stops after the declined attempts (at least one): the
	// customer gives up and the intent stays requires_payment_method.
	Declined bool
	// OrderID is the shop's order the payment is for, sent as the
	// metadata key order_id, the key paygate reads a payment's reference
	// from by default. It replaces an order_id in Metadata.
	OrderID string
	// Customer is the Customer paying: a cus_ id CreateCustomer returned.
	Customer string
	// Description is the shop's words for the payment ("Order ord-1001:
	// 2 mugs").
	Description string
	// Metadata is the intent's metadata (with OrderID).
	Metadata map[string]string
}

// The limits Stripe puts on an object's metadata; a request beyond them is
// refused with invalid_request_error.
const (
	maxMetadataKeys     = 50
	maxMetadataKeyLen   = 40
	maxMetadataValueLen = 500
)

// checkMetadata panics, naming op, when m is beyond what Stripe accepts.
func checkMetadata(op string, m map[string]string) {
	if len(m) > maxMetadataKeys {
		panic(fmt.Sprintf("stripesim: %s: %d metadata keys, Stripe takes at most %d", op, len(m), maxMetadataKeys))
	}
	for k, v := range m {
		if k == "" || utf8.RuneCountInString(k) > maxMetadataKeyLen || utf8.RuneCountInString(v) > maxMetadataValueLen {
			panic(fmt.Sprintf("stripesim: %s: metadata %q: keys are 1 to %d characters, values at most %d", op, k, maxMetadataKeyLen, maxMetadataValueLen))
		}
	}
}

// Pay creates a PaymentIntent and runs it to its outcome, emitting, in order:
// payment_intent.processing (if asked), charge.failed and
// payment_intent.payment_failed per declined attempt, then charge.succeeded
// followed by payment_intent.succeeded, or by
// payment_intent.amount_capturable_updated for a manual capture.
//
// Each charge carries a copy of the intent's metadata, customer and
// description, taken when the attempt is confirmed, as Stripe copies them:
// a later UpdatePayment changes the intent, not its charges.
//
// It panics if Amount is not positive, FailFirst is negative, Customer is
// not a Customer of the account or Metadata is beyond Stripe's limits.
func (s *Sim) Pay(opts PayOpts) *Payment {
	if opts.Amount <= 0 {
		panic(fmt.Sprintf("stripesim: Pay: amount must be positive, got %d", opts.Amount))
	}
	if opts.FailFirst < 0 {
		panic("stripesim: Pay: negative FailFirst")
	}
	cur := strings.ToLower(opts.Currency)
	if cur == "" {
		cur = "usd"
	}
	meta := copyMeta(opts.Metadata)
	if opts.OrderID != "" {
		meta["order_id"] = opts.OrderID
	}
	checkMetadata("Pay", meta)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.customers[opts.Customer]; opts.Customer != "" && !ok {
		panic(fmt.Sprintf("stripesim: Pay: no such customer %q", opts.Customer))
	}

	pi := &paymentIntent{
		ID:                 s.newID("pi"),
		Object:             "payment_intent",
		Amount:             opts.Amount,
		CaptureMethod:      "automatic",
		Created:            s.unix(),
		Currency:           cur,
		Customer:           nullable(opts.Customer),
		Description:        nullable(opts.Description),
		Metadata:           meta,
		PaymentMethodTypes: []string{"card"},
		ReceiptEmail:       nullable(opts.Email),
		Status:             "requires_payment_method",
	}
	if opts.ManualCapture {
		pi.CaptureMethod = "manual"
	}
	s.intents[pi.ID] = pi
	p := &Payment{ID: pi.ID, Amount: opts.Amount, Currency: cur, Email: opts.Email, ManualCapture: opts.ManualCapture,
		Customer: opts.Customer, Description: opts.Description, Metadata: copyMeta(meta)}
	req := s.newRequestLocked()

	if opts.Processing {
		pi.Status = "processing"
		s.emitLocked(EventPaymentIntentProcessing, pi, pi.ID, req, nil)
	}
	fails := opts.FailFirst
	if opts.Declined && fails == 0 {
		fails = 1
	}
	for range fails {
		ch := s.newChargeLocked(pi, opts)
		ch.Status = "failed"
		ch.FailureCode = ptr("card_declined")
		ch.FailureMessage = ptr("Your card was declined.")
		ch.Outcome = &outcome{NetworkStatus: "declined_by_network", Reason: ptr("generic_decline"), RiskLevel: "normal", SellerMessage: "The bank did not return any further details with this decline.", Type: "issuer_declined"}
		pi.LatestCharge = ptr(ch.ID)
		pi.Status = "requires_payment_method"
		pi.LastPaymentError = &paymentError{
			Charge: ch.ID, Code: "card_declined", DeclineCode: "generic_decline",
			Message: "Your card was declined.", Type: "card_error",
		}
		p.FailedChargeIDs = append(p.FailedChargeIDs, ch.ID)
		p.ChargeID = ch.ID
		s.emitLocked(EventChargeFailed, ch, pi.ID, req, nil)
		s.emitLocked(EventPaymentIntentPaymentFailed, pi, pi.ID, req, nil)
	}
	if opts.Declined {
		return p
	}

	ch := s.newChargeLocked(pi, opts)
	ch.Status = "succeeded"
	ch.Paid = true
	ch.Outcome = &outcome{NetworkStatus: "approved_by_network", RiskLevel: "normal", SellerMessage: "Payment complete.", Type: "authorized"}
	pi.LatestCharge = ptr(ch.ID)
	pi.LastPaymentError = nil
	p.ChargeID = ch.ID
	if opts.ManualCapture {
		pi.Status = "requires_capture"
		pi.AmountCapturable = pi.Amount
		s.emitLocked(EventChargeSucceeded, ch, pi.ID, req, nil)
		s.emitLocked(EventPaymentIntentAmountCapturableUpdated, pi, pi.ID, req, nil)
		return p
	}
	s.captureChargeLocked(ch)
	pi.Status = "succeeded"
	pi.AmountReceived = pi.Amount
	p.BalanceTransactionID = *ch.BalanceTransaction
	s.emitLocked(EventChargeSucceeded, ch, pi.ID, req, nil)
	s.emitLocked(EventPaymentIntentSucceeded, pi, pi.ID, req, nil)
	return p
}

func (s *Sim) newChargeLocked(pi *paymentIntent, opts PayOpts) *charge {
	ch := &charge{
		ID:     s.newID("ch"),
		Object: "charge",
		Amount: pi.Amount,
		BillingDetails: billingDetails{
			Email: nullable(opts.Email),
			Name:  nullable(opts.Name),
		},
		Created:       s.unix(),
		Currency:      pi.Currency,
		Customer:      copyPtr(pi.Customer),
		Description:   copyPtr(pi.Description),
		Metadata:      copyMeta(pi.Metadata),
		PaymentIntent: ptr(pi.ID),
		PaymentMethod: s.newID("pm"),
		ReceiptEmail:  pi.ReceiptEmail,
	}
	s.charges[ch.ID] = ch
	return ch
}

// captureChargeLocked moves the charge's money: it is captured and its
// balance transaction (amount, processing fee, both in the settlement
// currency) is created.
func (s *Sim) captureChargeLocked(ch *charge) {
	amount, cur, rate := s.convertLocked(ch.Amount, ch.Currency)
	fee := s.fees.chargeFee(amount)
	bt := s.newTxnLocked(TxnCharge, CategoryCharge, amount, fee, cur, ch.ID, "Payment for "+deref(ch.PaymentIntent))
	bt.ExchangeRate = rate
	// Card funds become available two days later, at midnight UTC.
	bt.AvailableOn = s.now.Add(48 * time.Hour).Truncate(24 * time.Hour).Unix()
	bt.Status = "pending"
	if fee != 0 {
		bt.FeeDetails = []FeeDetail{{Amount: fee, Currency: cur, Description: "Stripe processing fees", Type: "stripe_fee"}}
	}
	ch.Captured = true
	ch.AmountCaptured = ch.Amount
	ch.BalanceTransaction = ptr(bt.ID)
}

func (s *Sim) intentLocked(p *Payment, op string) (*paymentIntent, *charge) {
	if p == nil {
		panic("stripesim: " + op + ": nil payment")
	}
	pi, ok := s.intents[p.ID]
	if !ok {
		panic(fmt.Sprintf("stripesim: %s: unknown payment %s", op, p.ID))
	}
	var ch *charge
	if pi.LatestCharge != nil {
		ch = s.charges[*pi.LatestCharge]
	}
	return pi, ch
}

// PaymentUpdate is a change of a PaymentIntent's merchant fields, as
// POST /v1/payment_intents/{id} makes it.
type PaymentUpdate struct {
	// Description, when not empty, replaces the intent's.
	Description string
	// Metadata is merged into the intent's, as Stripe merges it: a key
	// with an empty value is removed, the others are set.
	Metadata map[string]string
}

// UpdatePayment changes the PaymentIntent's description and metadata and
// updates p. Stripe emits no event for it (there is no
// payment_intent.updated), and the charges keep the copy they took when
// they were confirmed: the change shows in the intent's later events only
// (payment_intent.succeeded of a capture, payment_intent.canceled). It
// panics on an unknown payment or metadata beyond Stripe's limits.
func (s *Sim) UpdatePayment(p *Payment, u PaymentUpdate) *Payment {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, _ := s.intentLocked(p, "UpdatePayment")
	meta := copyMeta(pi.Metadata)
	for k, v := range u.Metadata {
		if v == "" {
			delete(meta, k)
		} else {
			meta[k] = v
		}
	}
	checkMetadata("UpdatePayment", meta)
	pi.Metadata = meta
	if u.Description != "" {
		pi.Description = ptr(u.Description)
	}
	p.Description, p.Metadata = deref(pi.Description), copyMeta(meta)
	return p
}

// CustomerOpts describes a Customer for Sim.CreateCustomer.
type CustomerOpts struct {
	Email    string
	Name     string
	Metadata map[string]string
}

// CreateCustomer creates a Customer, as a shop does for a shopper it
// keeps, emitting customer.created (a type paygate does not use), and
// returns its id (cus_…) for PayOpts.Customer. It panics on metadata beyond
// Stripe's limits.
func (s *Sim) CreateCustomer(opts CustomerOpts) string {
	checkMetadata("CreateCustomer", opts.Metadata)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.newCustomerLocked(opts)
	s.emitLocked(EventCustomerCreated, c, "", s.newRequestLocked(), nil)
	return c.ID
}

func (s *Sim) newCustomerLocked(opts CustomerOpts) *customer {
	c := &customer{
		ID: s.newID("cus"), Object: "customer", Created: s.unix(),
		Email: nullable(opts.Email), Name: nullable(opts.Name), Metadata: copyMeta(opts.Metadata),
	}
	s.customers[c.ID] = c
	return c
}

// Capture captures an authorized manual-capture payment in full, emitting
// charge.captured and payment_intent.succeeded, and sets
// p.BalanceTransactionID. It panics unless the intent is requires_capture.
func (s *Sim) Capture(p *Payment) *Payment {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ch := s.intentLocked(p, "Capture")
	if pi.Status != "requires_capture" {
		panic(fmt.Sprintf("stripesim: Capture %s: status is %s, not requires_capture", pi.ID, pi.Status))
	}
	req := s.newRequestLocked()
	s.captureChargeLocked(ch)
	pi.Status = "succeeded"
	pi.AmountReceived = ch.AmountCaptured
	pi.AmountCapturable = 0
	p.BalanceTransactionID = *ch.BalanceTransaction
	s.emitLocked(EventChargeCaptured, ch, pi.ID, req, nil)
	s.emitLocked(EventPaymentIntentSucceeded, pi, pi.ID, req, nil)
	return p
}

// Cancel cancels a payment that has not been captured, emitting
// payment_intent.canceled. An uncaptured authorization is released; the
// simulator does not model the refund object Stripe attaches to it. It
// panics if the intent succeeded or is already canceled.
func (s *Sim) Cancel(p *Payment) *Payment {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, _ := s.intentLocked(p, "Cancel")
	if pi.Status == "succeeded" || pi.Status == "canceled" {
		panic(fmt.Sprintf("stripesim: Cancel %s: status is %s", pi.ID, pi.Status))
	}
	pi.Status = "canceled"
	pi.AmountCapturable = 0
	pi.CanceledAt = ptr(s.unix())
	pi.CancellationReason = ptr("requested_by_customer")
	s.emitLocked(EventPaymentIntentCanceled, pi, pi.ID, s.newRequestLocked(), nil)
	return p
}

// Refunded returns what Stripe says of a payment's charge now: the amount
// captured and the amount refunded (refunds that failed no longer count),
// in minor units. It panics on an unknown payment.
func (s *Sim) Refunded(p *Payment) (captured, refunded int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ch := s.intentLocked(p, "Refunded")
	if ch == nil {
		return 0, 0
	}
	return ch.AmountCaptured, ch.AmountRefunded
}

// SetReceiptEmail gives a payment's charge a receipt email after the fact,
// as a dashboard user or an update of the charge does (Stripe then sends
// the receipt), emitting charge.updated with the old address in
// previous_attributes. It panics if the payment has no charge.
func (s *Sim) SetReceiptEmail(p *Payment, email string) *Payment {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ch := s.intentLocked(p, "SetReceiptEmail")
	if ch == nil {
		panic(fmt.Sprintf("stripesim: SetReceiptEmail %s: no charge", pi.ID))
	}
	prev := map[string]any{"receipt_email": ch.ReceiptEmail}
	ch.ReceiptEmail = nullable(email)
	p.Email = email
	s.emitLocked(EventChargeUpdated, ch, pi.ID, s.newRequestLocked(), prev)
	return p
}

// Refund is the caller's handle on a refund.
type Refund struct {
	ID              string
	ChargeID        string
	PaymentIntentID string
	Amount          int64
	Currency        string
	// Status is the refund's status when the handle was returned.
	Status string
	// BalanceTransactionID is the refund's (negative) balance transaction.
	BalanceTransactionID string
	// FailureBalanceTransactionID is the refund_failure transaction that
	// gives the money back when the refund fails; empty otherwise.
	FailureBalanceTransactionID string
	// Reason is the refund's reason; empty when it has none.
	Reason string
	// Metadata is the refund's metadata, as POST /v1/refunds set it (never
	// nil; empty for Sim.Refund).
	Metadata map[string]string
}

// Refund refunds amount minor units of a captured payment (0 means all that
// is left), emitting refund.created (pending), charge.refunded (its
// refunds.data includes the refund), then refund.updated and
// charge.refund.updated with status succeeded. The refund's balance
// transaction carries no fee. It panics if nothing captured is left to
// refund or amount exceeds what is left.
func (s *Sim) Refund(p *Payment, amount int64) *Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ch := s.intentLocked(p, "Refund")
	if ch == nil || !ch.Captured {
		panic(fmt.Sprintf("stripesim: Refund %s: nothing captured", pi.ID))
	}
	left := ch.AmountCaptured - ch.AmountRefunded
	if amount == 0 {
		amount = left
	}
	if amount <= 0 || amount > left {
		panic(fmt.Sprintf("stripesim: Refund %s: amount %d, refundable %d", pi.ID, amount, left))
	}
	re := s.refundLocked(ch, amount, ptr("requested_by_customer"), nil, s.newRequestLocked())
	return s.refundHandleLocked(re)
}

// refundLocked is Refund once amount is known to be refundable: the refund
// (with a copy of meta), its balance transaction and its events, in the
// order Stripe emits them. req is the API request the first events name.
func (s *Sim) refundLocked(ch *charge, amount int64, reason *string, meta map[string]string, req *string) *refund {
	pi := s.intents[deref(ch.PaymentIntent)]
	re := &refund{
		ID:            s.newID("re"),
		Object:        "refund",
		Amount:        amount,
		Charge:        ch.ID,
		Created:       s.unix(),
		Currency:      ch.Currency,
		Metadata:      copyMeta(meta),
		PaymentIntent: ptr(pi.ID),
		Reason:        reason,
		Status:        "pending",
	}
	settled, cur, rate := s.convertLocked(-amount, ch.Currency)
	bt := s.newTxnLocked(TxnRefund, CategoryRefund, settled, 0, cur, re.ID, "REFUND FOR CHARGE ("+ch.ID+")")
	bt.ExchangeRate = rate
	re.BalanceTransaction = ptr(bt.ID)
	s.refunds[re.ID] = re
	ch.AmountRefunded += amount
	ch.Refunded = ch.AmountRefunded == ch.AmountCaptured

	s.emitLocked(EventRefundCreated, re, pi.ID, req, nil)
	s.emitLocked(EventChargeRefunded, ch, pi.ID, req, map[string]any{"amount_refunded": ch.AmountRefunded - amount})
	re.Status = "succeeded"
	prev := map[string]any{"status": "pending"}
	s.emitLocked(EventRefundUpdated, re, pi.ID, nil, prev)
	s.emitLocked(EventChargeRefundUpdated, re, pi.ID, nil, prev)
	return re
}

// FailRefund reports a pending or succeeded refund as failed, as a bank can
// days later: it emits refund.failed, refund.updated and
// charge.refund.updated (status failed), lowers the charge's
// amount_refunded, and creates a refund_failure balance transaction that
// reverses the refund's. It panics if the refund is unknown or already
// failed or canceled.
func (s *Sim) FailRefund(refundID string) *Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	re, ok := s.refunds[refundID]
	if !ok {
		panic("stripesim: FailRefund: unknown refund " + refundID)
	}
	if re.Status != "pending" && re.Status != "succeeded" {
		panic(fmt.Sprintf("stripesim: FailRefund %s: status is %s", re.ID, re.Status))
	}
	ch := s.charges[re.Charge]
	prev := map[string]any{"status": re.Status, "failure_reason": nil}
	// The failure gives back what the refund took from the balance, in the
	// same currency and at the same rate.
	orig := s.txnLocked("FailRefund", deref(re.BalanceTransaction))
	bt := s.newTxnLocked(TxnRefundFailure, CategoryRefundFailure, -orig.Amount, 0, orig.Currency, re.ID, "REFUND FAILURE FOR CHARGE ("+ch.ID+")")
	bt.ExchangeRate = orig.ExchangeRate
	re.Status = "failed"
	re.FailureReason = ptr("expired_or_canceled_card")
	re.FailureBalanceTransaction = ptr(bt.ID)
	ch.AmountRefunded -= re.Amount
	ch.Refunded = ch.AmountRefunded == ch.AmountCaptured && ch.AmountCaptured > 0
	pi := deref(re.PaymentIntent)
	s.emitLocked(EventRefundFailed, re, pi, nil, nil)
	s.emitLocked(EventRefundUpdated, re, pi, nil, prev)
	s.emitLocked(EventChargeRefundUpdated, re, pi, nil, prev)
	return s.refundHandleLocked(re)
}

func (s *Sim) refundHandleLocked(re *refund) *Refund {
	return &Refund{
		ID: re.ID, ChargeID: re.Charge, PaymentIntentID: deref(re.PaymentIntent),
		Amount: re.Amount, Currency: re.Currency, Status: re.Status,
		BalanceTransactionID:        deref(re.BalanceTransaction),
		FailureBalanceTransactionID: deref(re.FailureBalanceTransaction),
		Reason:                      deref(re.Reason), Metadata: copyMeta(re.Metadata),
	}
}

// Dispute is the caller's handle on a dispute.
type Dispute struct {
	ID              string
	ChargeID        string
	PaymentIntentID string
	Amount          int64
	Currency        string
	// Inquiry is true for an inquiry (warning_* statuses): no money moves.
	Inquiry bool
	// WithdrawalBalanceTransactionID is the dispute's withdrawal; empty for
	// an inquiry.
	WithdrawalBalanceTransactionID string
	// ReinstatementBalanceTransactionID is set when the dispute is won.
	ReinstatementBalanceTransactionID string
}

// Dispute opens a chargeback on a captured payment for amount minor units
// (0 means the whole charge): charge.dispute.created (needs_response), then
// charge.dispute.funds_withdrawn whose balance_transactions hold the
// withdrawal (reporting_category dispute, fee Fees.Dispute). It panics if
// the payment is not captured or amount exceeds the charge.
func (s *Sim) Dispute(p *Payment, amount int64) *Dispute {
	return s.openDispute(p, amount, false)
}

// Inquiry opens an inquiry (charge.dispute.created, status
// warning_needs_response): a dispute that moves no money. CloseDispute ends
// it as warning_closed.
func (s *Sim) Inquiry(p *Payment, amount int64) *Dispute {
	return s.openDispute(p, amount, true)
}

func (s *Sim) openDispute(p *Payment, amount int64, inquiry bool) *Dispute {
	s.mu.Lock()
	defer s.mu.Unlock()
	pi, ch := s.intentLocked(p, "Dispute")
	if ch == nil || !ch.Captured {
		panic(fmt.Sprintf("stripesim: Dispute %s: nothing captured", pi.ID))
	}
	if amount == 0 {
		amount = ch.AmountCaptured
	}
	if amount <= 0 || amount > ch.AmountCaptured {
		panic(fmt.Sprintf("stripesim: Dispute %s: amount %d, captured %d", pi.ID, amount, ch.AmountCaptured))
	}
	dp := &dispute{
		ID:                  s.newID("dp"),
		Object:              "dispute",
		Amount:              amount,
		BalanceTransactions: []*BalanceTransaction{},
		Charge:              ch.ID,
		Created:             s.unix(),
		Currency:            ch.Currency,
		Metadata:            map[string]string{},
		PaymentIntent:       ptr(pi.ID),
		Reason:              "fraudulent",
		Status:              "needs_response",
	}
	if inquiry {
		dp.Status = "warning_needs_response"
		dp.Reason = "general"
	}
	s.disputs[dp.ID] = dp
	ch.Disputed = true
	h := &Dispute{ID: dp.ID, ChargeID: ch.ID, PaymentIntentID: pi.ID, Amount: amount, Currency: ch.Currency, Inquiry: inquiry}
	s.emitLocked(EventChargeDisputeCreated, dp, pi.ID, nil, nil)
	if inquiry {
		return h
	}
	settled, cur, rate := s.convertLocked(-amount, ch.Currency)
	bt := s.newTxnLocked(TxnAdjustment, CategoryDispute, settled, s.fees.Dispute, cur, dp.ID, "Chargeback withdrawal for "+ch.ID)
	bt.ExchangeRate = rate
	if s.fees.Dispute != 0 {
		bt.FeeDetails = []FeeDetail{{Amount: s.fees.Dispute, Currency: cur, Description: "Dispute fee", Type: "stripe_fee"}}
	}
	dp.BalanceTransactions = append(dp.BalanceTransactions, bt)
	dp.IsChargeRefundable = false
	h.WithdrawalBalanceTransactionID = bt.ID
	s.emitLocked(EventChargeDisputeFundsWithdrawn, dp, pi.ID, nil, nil)
	return h
}

// CloseDispute closes an open dispute and updates d. Won: a reinstatement
// balance transaction (reporting_category dispute_reversal, the dispute fee
// returned) with charge.dispute.funds_reinstated, then charge.dispute.closed
// with status won. Lost: charge.dispute.closed with status lost, and the
// money stays withdrawn. An inquiry closes as warning_closed whatever won
// says. It panics if the dispute is unknown or already closed.
func (s *Sim) CloseDispute(d *Dispute, won bool) *Dispute {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d == nil {
		panic("stripesim: CloseDispute: nil dispute")
	}
	dp, ok := s.disputs[d.ID]
	if !ok {
		panic("stripesim: CloseDispute: unknown dispute " + d.ID)
	}
	pi := deref(dp.PaymentIntent)
	switch dp.Status {
	case "warning_needs_response", "warning_under_review":
		dp.Status = "warning_closed"
		s.emitLocked(EventChargeDisputeClosed, dp, pi, nil, map[string]any{"status": "warning_needs_response"})
		return d
	case "needs_response", "under_review":
	default:
		panic(fmt.Sprintf("stripesim: CloseDispute %s: status is %s", dp.ID, dp.Status))
	}
	prev := map[string]any{"status": dp.Status}
	if !won {
		dp.Status = "lost"
		s.emitLocked(EventChargeDisputeClosed, dp, pi, nil, prev)
		return d
	}
	settled, cur, rate := s.convertLocked(dp.Amount, dp.Currency)
	bt := s.newTxnLocked(TxnAdjustment, CategoryDisputeReversal, settled, -s.fees.Dispute, cur, dp.ID, "Chargeback reversal for "+dp.Charge)
	bt.ExchangeRate = rate
	if s.fees.Dispute != 0 {
		bt.FeeDetails = []FeeDetail{{Amount: -s.fees.Dispute, Currency: cur, Description: "Dispute fee refund", Type: "stripe_fee"}}
	}
	dp.BalanceTransactions = append(dp.BalanceTransactions, bt)
	dp.Status = "won"
	d.ReinstatementBalanceTransactionID = bt.ID
	s.emitLocked(EventChargeDisputeFundsReinstated, dp, pi, nil, nil)
	s.emitLocked(EventChargeDisputeClosed, dp, pi, nil, prev)
	return d
}

// Payout is the caller's handle on a payout.
type Payout struct {
	ID       string
	Amount   int64
	Currency string
	// BalanceTransactionID is the payout's (negative) balance transaction.
	BalanceTransactionID string
	// FailureBalanceTransactionID is the payout_failure transaction that
	// returns the money when the payout fails; empty otherwise.
	FailureBalanceTransactionID string
}

// Payout pays amount minor units out to the bank, emitting payout.paid with
// a payout balance transaction. Like an automatic payout it sweeps every
// earlier balance transaction in the currency not yet paid out, so
// GET /v1/balance_transactions?payout=po_… lists them (and the payout's own).
// It panics if amount is not positive.
func (s *Sim) Payout(amount int64, currency string) *Payout {
	if amount <= 0 {
		panic(fmt.Sprintf("stripesim: Payout: amount must be positive, got %d", amount))
	}
	cur := strings.ToLower(currency)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur == "" {
		cur = or(s.settlement, "usd")
	}
	po := &payout{
		ID:          s.newID("po"),
		Object:      "payout",
		Amount:      amount,
		ArrivalDate: s.now.Add(24 * time.Hour).Truncate(24 * time.Hour).Unix(),
		Automatic:   true,
		Created:     s.unix(),
		Currency:    cur,
		Description: "STRIPE PAYOUT",
		Metadata:    map[string]string{},
		Method:      "standard",
		SourceType:  "card",
		Status:      "paid",
		Type:        "bank_account",
	}
	po.Destination = ptr(s.newID("ba"))
	for _, bt := range s.txns {
		if bt.Currency == cur && s.payoutOf[bt.ID] == "" {
			s.payoutOf[bt.ID] = po.ID
		}
	}
	bt := s.newTxnLocked(TxnPayout, CategoryPayout, -amount, 0, cur, po.ID, "STRIPE PAYOUT")
	s.payoutOf[bt.ID] = po.ID
	po.BalanceTransaction = ptr(bt.ID)
	s.payouts[po.ID] = po
	s.emitLocked(EventPayoutPaid, po, "", nil, nil)
	return &Payout{ID: po.ID, Amount: amount, Currency: cur, BalanceTransactionID: bt.ID}
}

// FailPayout reports a paid payout as failed (the bank returned it),
// emitting payout.failed with failure_code account_closed and creating a
// payout_failure balance transaction (reporting_category payout_reversal)
// that returns the money. It updates po. It panics if the payout is unknown
// or not paid.
func (s *Sim) FailPayout(po *Payout) *Payout {
	s.mu.Lock()
	defer s.mu.Unlock()
	if po == nil {
		panic("stripesim: FailPayout: nil payout")
	}
	p, ok := s.payouts[po.ID]
	if !ok {
		panic("stripesim: FailPayout: unknown payout " + po.ID)
	}
	if p.Status != "paid" {
		panic(fmt.Sprintf("stripesim: FailPayout %s: status is %s", p.ID, p.Status))
	}
	bt := s.newTxnLocked(TxnPayoutFailure, CategoryPayoutReversal, p.Amount, 0, p.Currency, p.ID, "Payout failure ("+p.ID+")")
	p.Status = "failed"
	p.FailureCode = ptr("account_closed")
	p.FailureMessage = ptr("The bank account has been closed.")
	p.FailureBalanceTransaction = ptr(bt.ID)
	po.FailureBalanceTransactionID = bt.ID
	s.emitLocked(EventPayoutFailed, p, "", nil, map[string]any{"status": "paid", "failure_code": nil})
	return po
}

// Ignored emits customer.created, an event type paygate does not use, and
// returns it.
func (s *Sim) Ignored() Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.newCustomerLocked(CustomerOpts{Email: "customer@example.com"})
	return s.emitLocked(EventCustomerCreated, c, "", s.newRequestLocked(), nil)
}

func copyMeta(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func copyPtr(p *string) *string {
	if p == nil {
		return nil
	}
	return ptr(*p)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
