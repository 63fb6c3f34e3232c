// Package adyensim is an Adyen stand-in for tests: it keeps a small world
// of payments and their modifications and disputes, and for each step
// builds the NotificationRequestItem Adyen's standard webhooks send, in
// Adyen's real shape (the schemas of Webhooks-v1 in Adyen's OpenAPI
// definitions), dated by a clock the test moves and signed with the HMAC
// Adyen computes. It marshals batches as Adyen does and POSTs them like
// Adyen's delivery, with Basic auth when asked. It serves the Checkout
// API's refund endpoint (refunds.go), and writes and serves the
// settlement detail reports of payout batches built from what it did
// (report.go).
//
// A scenario is a script of typed calls (Authorise, Capture, Refund,
// Chargeback…). Given the same Config.Seed and script, every reference and
// item is byte for byte the same. Methods panic when the script asks for
// what Adyen itself would refuse (capturing a refused payment, failing a
// capture of another payment): a bad script is a bug in the test. Adyen's
// HMAC covers only some fields, so a test builds anything else (a repeat
// with other unsigned fields, a tampered item) by editing a returned Item,
// and re-signs it with Sign.
//
// It signs with its own code, not paygate's provider/adyen, so the two
// check each other. It must never be imported by production code, except
// by cmd's demo and load commands, and it never talks to the real Adyen.
package adyensim

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // the default Location must load on any machine
)

// Defaults used when Config leaves a field empty.
const (
	DefaultMerchantAccount = "PaygateECOM"
	// DefaultHMACKey is the key items are signed with, in hex as Adyen's
	// Customer Area shows it (and as PAYGATE_ADYEN_HMAC_KEYS takes it).
	DefaultHMACKey = "0F1E2D3C4B5A69788796A5B4C3D2E1F00112233445566778899AABBCCDDEEFF0"
	// DefaultLocation is the zone eventDates are written in: Adyen writes
	// them in Amsterdam time, +01:00 in winter and +02:00 in summer.
	DefaultLocation = "Europe/Amsterdam"
	// DefaultAPIKey is the web service user's key the Checkout API takes.
	DefaultAPIKey = "AQEyhmfxsim_test_api_key_not_a_secret"
	// DefaultCompanyAccount is the company account the merchant account
	// belongs to.
	DefaultCompanyAccount = "PaygateCompany"
	// DefaultReportUser and DefaultReportPassword are the report user's
	// credentials, named as Adyen names report users.
	DefaultReportUser     = "report_000001@Company.PaygateCompany"
	DefaultReportPassword = "sim-report-password-not-a-secret"
)

// Config configures a Sim. Every field is optional.
type Config struct {
	// MerchantAccount is every item's merchantAccountCode.
	MerchantAccount string
	// HMACKey signs items: the raw key bytes; DefaultHMACKey if empty.
	HMACKey []byte
	// Start is the clock's first reading; the wall clock if zero.
	Start time.Time
	// Location is the zone eventDates are written in; DefaultLocation if
	// nil.
	Location *time.Location
	// Seed makes references and authorisation codes reproducible. Zero
	// picks one at random (see Sim.Seed), so two simulators in one test
	// never hand out the same references by accident.
	Seed int64
	// Live is the batch's live flag: "true" for the live environment.
	Live bool
	// EscapeSlashes writes '/' in strings as "\/", as the notifications
	// in Adyen's Node library's test mocks are written: a receiver must
	// keep such bytes as they are and still read the same values.
	EscapeSlashes bool
	// Client sends Deliver's requests; one with a 10s timeout if nil.
	Client *http.Client
	// APIKey is the key the Checkout API takes (X-API-Key);
	// DefaultAPIKey if empty.
	APIKey string
	// CompanyAccount is the Company Account column of settlement
	// reports; DefaultCompanyAccount if empty.
	CompanyAccount string
	// ReportUser and ReportPassword are the report user's credentials
	// the report downloads take (HTTP Basic auth); DefaultReportUser and
	// DefaultReportPassword if empty.
	ReportUser, ReportPassword string
}

// Sim is a simulated Adyen merchant account. It is safe for concurrent use.
type Sim struct {
	mu       sync.Mutex
	merchant string
	key      []byte
	loc      *time.Location
	seed     int64
	rng      *mrand.Rand
	now      time.Time
	live     bool
	escape   bool
	client   *http.Client

	refs     map[string]bool     // every pspReference handed out
	payments map[string]*payment // by the payment's pspReference
	// modRefs are the references modification requests gave, by the
	// modification's pspReference; nextModRef is the one the script's
	// next modification gives (ReferenceNextModification).
	modRefs    map[string]string
	nextModRef string

	checkout checkout // the Checkout API's refunds (refunds.go)
	reports  reports  // settlement batches and their files (report.go)
}

type payment struct {
	psp       string
	value     int64
	currency  string
	reference string
	// shopperReference and metadata are what the payment request gave
	// besides the merchant's reference; the AUTHORISATION carries them.
	shopperReference string
	metadata         map[string]string
	authorised       bool
	authCode         string
	captures         map[string]bool
	refunds          map[string]bool
	disputes         map[string]bool
	// captured and refunded are Adyen's accounting of the payment, in
	// minor units: refunds asked through the Checkout API may not exceed
	// captured − refunded (refunds not refused count).
	captured, refunded int64
}

// New returns a simulator with no payments. It panics if Location is nil
// and DefaultLocation cannot be loaded.
func New(cfg Config) *Sim {
	s := &Sim{
		merchant: cfg.MerchantAccount,
		key:      append([]byte(nil), cfg.HMACKey...),
		loc:      cfg.Location,
		seed:     cfg.Seed,
		now:      cfg.Start,
		live:     cfg.Live,
		escape:   cfg.EscapeSlashes,
		client:   cfg.Client,
		refs:     map[string]bool{},
		payments: map[string]*payment{},
		modRefs:  map[string]string{},
		checkout: newCheckout(cfg.APIKey),
		reports:  newReports(cfg),
	}
	if s.merchant == "" {
		s.merchant = DefaultMerchantAccount
	}
	if len(s.key) == 0 {
		s.key, _ = hex.DecodeString(DefaultHMACKey)
	}
	if s.loc == nil {
		loc, err := time.LoadLocation(DefaultLocation)
		if err != nil {
			panic(fmt.Sprintf("adyensim: load %s: %v", DefaultLocation, err))
		}
		s.loc = loc
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
	s.now = s.now.Truncate(time.Second)
	if s.client == nil {
		s.client = defaultClient
	}
	s.rng = mrand.New(mrand.NewPCG(uint64(s.seed), 0x5ad1e9b0c3a7f2d1))
	return s
}

// MerchantAccount is every item's merchantAccountCode.
func (s *Sim) MerchantAccount() string { return s.merchant }

// HMACKey is a copy of the raw key items are signed with.
func (s *Sim) HMACKey() []byte { return append([]byte(nil), s.key...) }

// HMACKeyHex is the key as Adyen's Customer Area shows it: upper-case hex.
func (s *Sim) HMACKeyHex() string { return strings.ToUpper(hex.EncodeToString(s.key)) }

// Seed is the seed in use; with Config.Seed zero it is the one drawn at
// random, so a failing run can be replayed.
func (s *Sim) Seed() int64 { return s.seed }

// Now is the clock: the eventDate of the next item.
func (s *Sim) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// SetNow sets the clock, to the second (eventDates carry no fraction). It
// may move backwards: Adyen promises no order.
func (s *Sim) SetNow(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = t.Truncate(time.Second)
}

// Advance moves the clock forward by d.
func (s *Sim) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d).Truncate(time.Second)
}

// eventDateLayout is Adyen's eventDate: ISO 8601 with a numeric offset,
// "+00:00" rather than "Z" for UTC.
const eventDateLayout = "2006-01-02T15:04:05-07:00"

func (s *Sim) dateLocked(t time.Time) string { return t.In(s.loc).Format(eventDateLayout) }

const pspAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// newPSPLocked returns a pspReference never handed out before: 16 digits
// and capital letters, as Adyen's are.
func (s *Sim) newPSPLocked() string {
	for {
		var b [16]byte
		for i := range b {
			b[i] = pspAlphabet[s.rng.IntN(len(pspAlphabet))]
		}
		if psp := string(b[:]); !s.refs[psp] {
			s.refs[psp] = true
			return psp
		}
	}
}

func (s *Sim) paymentLocked(method, psp string) *payment {
	p, ok := s.payments[psp]
	if !ok {
		panic(fmt.Sprintf("adyensim: %s: no payment %q", method, psp))
	}
	return p
}

// authorisedLocked is the payment psp, which must have been authorised:
// Adyen refuses any modification of a refused payment.
func (s *Sim) authorisedLocked(method, psp string) *payment {
	p := s.paymentLocked(method, psp)
	if !p.authorised {
		panic(fmt.Sprintf("adyensim: %s: payment %s was refused", method, psp))
	}
	return p
}

func positive(method string, value int64) {
	if value <= 0 {
		panic(fmt.Sprintf("adyensim: %s: value must be positive, got %d", method, value))
	}
}
