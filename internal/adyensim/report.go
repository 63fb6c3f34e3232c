package adyensim

import (
	"bytes"
	"crypto/subtle"
	"encoding/csv"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/provider/adyen"
)

// Settlement detail reports. Adyen closes a payout batch of the merchant
// account, writes one CSV for it, settlement_detail_report_batch_<n>.csv,
// with a row per movement of the balance the batch settles (Settled,
// Refunded, Chargeback…), a Fee row per fee charged apart, and a
// MerchantPayout row per currency paid out to the bank; then it sends
// REPORT_AVAILABLE, and the report user downloads the file with Basic
// auth (docs.adyen.com/reporting/settlement-detail-report). A test builds
// a batch from what the simulator's script did (NewBatch, then a row per
// capture, refund or dispute it names), may add what Adyen would not
// (a misstated amount, a payment paygate never heard of), and closes it.

// ReportDownloadPath is where reports are served: the path is
// ReportDownloadPath + <merchant account> + "/" + <file name>, as at
// https://ca-test.adyen.com/reports/download/MerchantAccount/….
const ReportDownloadPath = "/reports/download/MerchantAccount/"

// StandardColumns are the settlement detail report's columns in the order
// Adyen documents them.
var StandardColumns = []string{
	"Company Account", "Merchant Account", "Psp Reference", "Merchant Reference", "Payment Method",
	"Creation Date", "TimeZone", "Type", "Modification Reference", "Gross Currency", "Gross Debit (GC)",
	"Gross Credit (GC)", "Exchange Rate", "Net Currency", "Net Debit (NC)", "Net Credit (NC)",
	"Commission (NC)", "Markup (NC)", "Scheme Fees (NC)", "Interchange (NC)", "Payment Method Variant",
	"Modification Merchant Reference", "Batch Number", "Reserved4", "Reserved5", "Reserved6", "Reserved7",
	"Reserved8", "Reserved9", "Reserved10",
}

// Columns are the columns the simulator writes: the standard ones, then
// those a 2026 report adds after them (as in the report in
// wikimedia-fundraising-SmashPig's Adyen test data).
var Columns = append(slices.Clone(StandardColumns),
	"Booking Date", "Booking Date TimeZone", "Metadata", "Balance Currency", "Net Debit (BC)",
	"Net Credit (BC)", "Payment Fees (NC)", "DCC Markup (NC)", "Funds Destination", "Balance Platform Debit",
	"Balance Platform Credit", "Shopper Country", "Clearing Network", "Merchant Order Reference",
	"Dispute Reference", "ARN", "Settlement Flow", "Authorisation Code", "Gross Fees (NC)",
)

// RowType is a report row's Type.
type RowType string

// The row types the simulator writes.
const (
	RowSettled            RowType = "Settled"
	RowRefunded           RowType = "Refunded"
	RowRefundedReversed   RowType = "RefundedReversed"
	RowChargeback         RowType = "Chargeback"
	RowSecondChargeback   RowType = "SecondChargeback"
	RowChargebackReversed RowType = "ChargebackReversed"
	RowFee                RowType = "Fee"
	RowMerchantPayout     RowType = "MerchantPayout"
)

// credits reports whether a row of type t pays the merchant (Gross and Net
// Credit) rather than takes from it (Debit).
func (t RowType) credits() bool {
	return t == RowSettled || t == RowRefundedReversed || t == RowChargebackReversed
}

// Fees are what Adyen keeps of a movement, in minor units of its Net
// currency: Commission (blended pricing) or Markup, Scheme Fees and
// Interchange (Interchange++).
type Fees struct {
	Commission, Markup, SchemeFees, Interchange int64
}

// Total is the sum of the fees.
func (f Fees) Total() int64 { return f.Commission + f.Markup + f.SchemeFees + f.Interchange }

// Row is one line of a settlement detail report. Amounts are in minor
// units of their currency, as Adyen counts them (see adyen.Exponent), and
// signed by their effect on the merchant's balance at Adyen: positive in
// the Credit columns, negative in the Debit ones.
type Row struct {
	CompanyAccount, MerchantAccount string
	// PspReference and MerchantReference are the payment's; empty on Fee
	// and MerchantPayout rows.
	PspReference, MerchantReference string
	PaymentMethod                   string
	Type                            RowType
	// ModificationReference is the capture's, refund's or dispute's
	// pspReference; a Fee's description; "TX… batch <n>, <merchant>" on a
	// MerchantPayout.
	ModificationReference string
	// ModificationMerchantReference is the reference the merchant gave
	// the modification: a Checkout refund's reference.
	ModificationMerchantReference string
	PaymentMethodVariant          string
	AuthorisationCode             string
	// CreatedAt is when the money moved; BookedAt when the batch closed.
	CreatedAt, BookedAt time.Time
	GrossCurrency       string // empty on Fee and MerchantPayout rows
	Gross               int64
	NetCurrency         string
	Net                 int64 // Gross less Fees
	Fees                Fees
	BatchNumber         int
}

// GrossAmount is Gross in major units, signed.
func (r Row) GrossAmount() decimal.Decimal { return major(r.Gross, r.GrossCurrency) }

// NetAmount is Net in major units, signed.
func (r Row) NetAmount() decimal.Decimal { return major(r.Net, r.NetCurrency) }

// Report is a closed batch's settlement detail report.
type Report struct {
	Batch    int
	FileName string
	Rows     []Row
	CSV      []byte // the rows under Columns, as the simulator serves them
}

// ReportFileName is the name of batch n's settlement detail report.
func ReportFileName(batch int) string {
	return fmt.Sprintf("settlement_detail_report_batch_%d.csv", batch)
}

// reports is the simulator's settlement state, under Sim.mu.
type reports struct {
	company, user, password string
	moves                   map[moveKey]*move
	batches                 map[int]bool
	files                   map[string][]byte
	baseURL                 string // where reports are served; Adyen's test host until StartReports
	failures                []int  // statuses the next downloads answer
	requests                int
	downloads               map[string]int
}

// move is money Adyen moved on the balance, which one batch settles.
type move struct {
	typ            RowType
	psp            string
	payment        *payment
	value          int64
	at             time.Time
	modMerchantRef string
	failed         bool // a capture the scheme rejected: never settled
	batch          int  // the batch that settled it; 0 until then
}

type moveKey struct {
	typ RowType
	psp string
}

func newReports(cfg Config) reports {
	r := reports{company: cfg.CompanyAccount, user: cfg.ReportUser, password: cfg.ReportPassword,
		moves: map[moveKey]*move{}, batches: map[int]bool{}, files: map[string][]byte{}, downloads: map[string]int{},
		baseURL: "https://ca-test.adyen.com"}
	if cfg.Live {
		r.baseURL = "https://ca-live.adyen.com"
	}
	if r.company == "" {
		r.company = DefaultCompanyAccount
	}
	if r.user == "" {
		r.user = DefaultReportUser
	}
	if r.password == "" {
		r.password = DefaultReportPassword
	}
	return r
}

// moveLocked records that the modification psp of p moved value now; a
// second movement of the same kind and reference adds to it.
func (s *Sim) moveLocked(typ RowType, psp string, p *payment, value int64) *move {
	k := moveKey{typ, psp}
	if m, ok := s.reports.moves[k]; ok {
		m.value += value
		m.at = s.now
		return m
	}
	m := &move{typ: typ, psp: psp, payment: p, value: value, at: s.now}
	s.reports.moves[k] = m
	return m
}

// Batch is a payout batch being put together. Its methods panic, as the
// simulator's do, when the script asks for what Adyen would not report: a
// movement that never happened or that another batch settled, a batch
// already closed.
type Batch struct {
	sim    *Sim
	number int
	rows   []Row
	fees   []Row
	skew   map[string]int64 // payout misstatements by currency
	closed bool
}

// NewBatch opens payout batch number (1 or more, once per simulator).
func (s *Sim) NewBatch(number int) *Batch {
	s.mu.Lock()
	defer s.mu.Unlock()
	if number < 1 || s.reports.batches[number] {
		panic(fmt.Sprintf("adyensim: NewBatch: batch %d is not a new batch number", number))
	}
	s.reports.batches[number] = true
	return &Batch{sim: s, number: number, skew: map[string]int64{}}
}

// Number is the batch's number.
func (b *Batch) Number() int { return b.number }

// FileName is the batch's report file name.
func (b *Batch) FileName() string { return ReportFileName(b.number) }

// Settled adds the Settled row of capture capturePSP: its amount in Gross
// Credit, less fees in Net Credit. Modification Reference is the capture's
// pspReference, Psp Reference the payment's.
func (b *Batch) Settled(capturePSP string, fees Fees) Row {
	return b.add("Settled", RowSettled, capturePSP, fees)
}

// Refunded adds the Refunded row of refund refundPSP (a script's Refund or
// CancelOrRefund, or a Checkout refund whose REFUND succeeded): its amount
// in Gross Debit, plus fees in Net Debit; a Checkout refund's reference
// in Modification Merchant Reference.
func (b *Batch) Refunded(refundPSP string, fees Fees) Row {
	return b.add("Refunded", RowRefunded, refundPSP, fees)
}

// RefundedReversed adds the row of the money of refund refundPSP coming
// back (REFUND_FAILED or REFUNDED_REVERSED): Gross Credit, less fees in
// Net Credit.
func (b *Batch) RefundedReversed(refundPSP string, fees Fees) Row {
	return b.add("RefundedReversed", RowRefundedReversed, refundPSP, fees)
}

// Chargeback adds the Chargeback row of dispute disputePSP: the amount
// withdrawn in Gross Debit, plus fees (the chargeback fee is Commission)
// in Net Debit.
func (b *Batch) Chargeback(disputePSP string, fees Fees) Row {
	return b.add("Chargeback", RowChargeback, disputePSP, fees)
}

// SecondChargeback adds the SecondChargeback row of dispute disputePSP, as
// Chargeback does.
func (b *Batch) SecondChargeback(disputePSP string, fees Fees) Row {
	return b.add("SecondChargeback", RowSecondChargeback, disputePSP, fees)
}

// ChargebackReversed adds the ChargebackReversed row of dispute
// disputePSP: the amount given back in Gross Credit, less fees in Net
// Credit.
func (b *Batch) ChargebackReversed(disputePSP string, fees Fees) Row {
	return b.add("ChargebackReversed", RowChargebackReversed, disputePSP, fees)
}

func (b *Batch) add(method string, typ RowType, psp string, fees Fees) Row {
	s := b.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	b.open(method)
	m, ok := s.reports.moves[moveKey{typ, psp}]
	switch {
	case !ok:
		panic(fmt.Sprintf("adyensim: %s: no %s movement %s", method, typ, psp))
	case m.failed:
		panic(fmt.Sprintf("adyensim: %s: capture %s failed and is never settled", method, psp))
	case m.batch != 0:
		panic(fmt.Sprintf("adyensim: %s: batch %d already settled %s %s", method, m.batch, typ, psp))
	}
	m.batch = b.number
	p := m.payment
	r := s.paymentRowLocked(b, p, typ, fees)
	r.CreatedAt, r.ModificationReference, r.ModificationMerchantReference = m.at, psp, m.modMerchantRef
	r.setAmount(m.value, fees)
	b.rows = append(b.rows, r)
	return r
}

func (s *Sim) paymentRowLocked(b *Batch, p *payment, typ RowType, fees Fees) Row {
	if fees.Commission < 0 || fees.Markup < 0 || fees.SchemeFees < 0 || fees.Interchange < 0 {
		panic(fmt.Sprintf("adyensim: %s row: fees must not be negative, got %+v", typ, fees))
	}
	return Row{
		CompanyAccount: s.reports.company, MerchantAccount: s.merchant, PspReference: p.psp, MerchantReference: p.reference,
		PaymentMethod: paymentMethod, Type: typ, PaymentMethodVariant: reportVariant, AuthorisationCode: p.authCode,
		GrossCurrency: p.currency, NetCurrency: p.currency, Fees: fees, BatchNumber: b.number,
	}
}

// setAmount sets Gross from value and Net from it and fees, signed by the
// row's direction.
func (r *Row) setAmount(value int64, fees Fees) {
	if r.Type.credits() {
		r.Gross, r.Net = value, value-fees.Total()
	} else {
		r.Gross, r.Net = -value, -value-fees.Total()
	}
}

// reportVariant is the Payment Method Variant of the simulator's card, as
// Adyen's sample report names a Visa classic card.
const reportVariant = "visaclassic"

// Fee adds a Fee row: value minor units of currency charged apart from any
// movement (Adyen's monthly "Transaction Fees"), in Net Debit, with
// description as its Modification Reference.
func (b *Batch) Fee(currency string, value int64, description string) Row {
	positive("Fee", value)
	s := b.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	b.open("Fee")
	r := Row{CompanyAccount: s.reports.company, MerchantAccount: s.merchant, Type: RowFee, ModificationReference: description,
		CreatedAt: s.now, NetCurrency: isoCode("Fee", currency), Net: -value, BatchNumber: b.number}
	b.fees = append(b.fees, r)
	return r
}

// UnknownPayment adds a Settled row for a payment the simulator never
// made, and so never notified: value minor units of currency captured,
// less fees, under fresh references.
func (b *Batch) UnknownPayment(value int64, currency string, fees Fees) Row {
	positive("UnknownPayment", value)
	s := b.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	b.open("UnknownPayment")
	p := &payment{psp: s.newPSPLocked(), currency: isoCode("UnknownPayment", currency),
		reference: "unknown-" + strconv.Itoa(len(b.rows)+1), authCode: fmt.Sprintf("%06d", s.rng.IntN(1_000_000))}
	r := s.paymentRowLocked(b, p, RowSettled, fees)
	r.CreatedAt, r.ModificationReference = s.now, s.newPSPLocked()
	r.setAmount(value, fees)
	b.rows = append(b.rows, r)
	return r
}

// Misstate makes the movement row (not a Fee) whose Modification
// Reference is modRef report
// delta minor units more than Adyen moved (less when delta is negative),
// in Gross and Net alike; the payout follows the rows as written. It
// returns the row as it now stands.
func (b *Batch) Misstate(modRef string, delta int64) Row {
	s := b.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	b.open("Misstate")
	for i := range b.rows {
		r := &b.rows[i]
		if r.ModificationReference != modRef {
			continue
		}
		if r.Gross < 0 {
			delta = -delta
		}
		r.Gross += delta
		r.Net += delta
		return *r
	}
	panic(fmt.Sprintf("adyensim: Misstate: batch %d has no row %s", b.number, modRef))
}

// MisstatePayout makes the MerchantPayout of currency pay delta minor
// units more than the batch's rows add up to (less when negative).
func (b *Batch) MisstatePayout(currency string, delta int64) {
	s := b.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	b.open("MisstatePayout")
	b.skew[isoCode("MisstatePayout", currency)] += delta
}

func (b *Batch) open(method string) {
	if b.closed {
		panic(fmt.Sprintf("adyensim: %s: batch %d is closed", method, b.number))
	}
}

// Close closes the batch at the clock: its rows, its Fee rows, and one
// MerchantPayout per Net currency whose rows do not add up to zero, paying
// out their sum in Net Debit ("TX… batch <n>, <merchant>"). A batch whose
// rows sum to less than zero in a currency collects that from the bank:
// the simulator writes its MerchantPayout in Net Credit. Every row is
// booked at the close. The report is stored for download under the
// batch's file name, and returned.
func (b *Batch) Close() Report {
	s := b.sim
	s.mu.Lock()
	defer s.mu.Unlock()
	b.open("Close")
	b.closed = true
	rows := append(slices.Clone(b.rows), b.fees...)
	sums := map[string]int64{}
	for _, r := range rows {
		sums[r.NetCurrency] += r.Net
	}
	for cur := range b.skew {
		if _, ok := sums[cur]; !ok {
			sums[cur] = 0
		}
	}
	for _, cur := range slices.Sorted(maps.Keys(sums)) {
		total := sums[cur] + b.skew[cur]
		if total == 0 {
			continue
		}
		tx := make([]byte, 11)
		for i := range tx {
			tx[i] = pspAlphabet[s.rng.IntN(len(pspAlphabet))]
		}
		rows = append(rows, Row{CompanyAccount: s.reports.company, MerchantAccount: s.merchant, Type: RowMerchantPayout,
			ModificationReference: fmt.Sprintf("TX%sXT batch %d, %s", tx, b.number, s.merchant),
			CreatedAt:             s.now, NetCurrency: cur, Net: -total, BatchNumber: b.number})
	}
	for i := range rows {
		rows[i].BookedAt = s.now
	}
	rep := Report{Batch: b.number, FileName: b.FileName(), Rows: rows, CSV: s.writeCSVLocked(rows, Columns)}
	s.reports.files[rep.FileName] = rep.CSV
	return rep
}

// WriteCSV writes rows under columns, in that order, as Adyen writes a
// report: a header line, then a line per row; a column the simulator
// does not fill (one of Adyen's newer ones, or one a test invents) is
// empty. Tests use it to write a report whose columns Adyen moved.
func (s *Sim) WriteCSV(rows []Row, columns []string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeCSVLocked(rows, columns)
}

func (s *Sim) writeCSVLocked(rows []Row, columns []string) []byte {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write(columns) // a bytes.Buffer does not fail
	for _, r := range rows {
		line := make([]string, len(columns))
		for i, c := range columns {
			line[i] = s.cellLocked(r, c)
		}
		_ = w.Write(line)
	}
	w.Flush()
	return buf.Bytes()
}

// reportDate is how reports write dates: in the account's zone, named in
// the TimeZone column.
const reportDate = "2006-01-02 15:04:05"

func (s *Sim) cellLocked(r Row, column string) string {
	gross := r.GrossCurrency != ""
	switch column {
	case "Company Account":
		return r.CompanyAccount
	case "Merchant Account":
		return r.MerchantAccount
	case "Psp Reference":
		return r.PspReference
	case "Merchant Reference":
		return r.MerchantReference
	case "Payment Method":
		return r.PaymentMethod
	case "Creation Date":
		return r.CreatedAt.In(s.loc).Format(reportDate)
	case "TimeZone":
		return r.CreatedAt.In(s.loc).Format("MST")
	case "Type":
		return string(r.Type)
	case "Modification Reference":
		return r.ModificationReference
	case "Gross Currency":
		return r.GrossCurrency
	case "Gross Debit (GC)":
		return debit(r.Gross, r.GrossCurrency)
	case "Gross Credit (GC)":
		return credit(r.Gross, r.GrossCurrency)
	case "Exchange Rate":
		if gross {
			return "1" // the simulator settles in the currency it was paid in
		}
		return ""
	case "Net Currency":
		return r.NetCurrency
	case "Net Debit (NC)":
		return debit(r.Net, r.NetCurrency)
	case "Net Credit (NC)":
		return credit(r.Net, r.NetCurrency)
	case "Commission (NC)":
		return fee(r.Fees.Commission, r.NetCurrency)
	case "Markup (NC)":
		return fee(r.Fees.Markup, r.NetCurrency)
	case "Scheme Fees (NC)":
		return fee(r.Fees.SchemeFees, r.NetCurrency)
	case "Interchange (NC)":
		return fee(r.Fees.Interchange, r.NetCurrency)
	case "Payment Method Variant":
		return r.PaymentMethodVariant
	case "Modification Merchant Reference":
		return r.ModificationMerchantReference
	case "Batch Number":
		return strconv.Itoa(r.BatchNumber)
	case "Booking Date":
		return r.BookedAt.In(s.loc).Format(reportDate)
	case "Booking Date TimeZone":
		return r.BookedAt.In(s.loc).Format("MST")
	case "Authorisation Code":
		return r.AuthorisationCode
	}
	return ""
}

// major is minor units of currency in major units, at Adyen's exponent.
func major(minor int64, currency string) decimal.Decimal {
	if currency == "" {
		return decimal.Zero
	}
	exp, err := adyen.Exponent(strings.ToLower(currency))
	if err != nil {
		panic(fmt.Sprintf("adyensim: report: %v", err))
	}
	return decimal.New(minor, -exp)
}

// amount writes |minor| at the currency's exponent: 5.00 GBP, 500 JPY,
// 1.500 KWD.
func amount(minor int64, currency string) string {
	exp, err := adyen.Exponent(strings.ToLower(currency))
	if err != nil {
		panic(fmt.Sprintf("adyensim: report: %v", err))
	}
	return decimal.New(minor, -exp).Abs().StringFixed(exp)
}

func debit(signed int64, currency string) string {
	if signed >= 0 || currency == "" {
		return ""
	}
	return amount(signed, currency)
}

func credit(signed int64, currency string) string {
	if signed <= 0 || currency == "" {
		return ""
	}
	return amount(signed, currency)
}

// fee writes a fee, empty when there is none (as Commission is under
// Interchange++ pricing).
func fee(minor int64, currency string) string {
	if minor == 0 {
		return ""
	}
	return amount(minor, currency)
}

func isoCode(method, currency string) string {
	cur := strings.ToUpper(currency)
	if _, err := adyen.Exponent(strings.ToLower(cur)); err != nil || len(cur) != 3 {
		panic(fmt.Sprintf("adyensim: %s: %q is not a currency the simulator can write", method, currency))
	}
	return cur
}

// PublishReport stores content under fileName for download, replacing
// what was there: a report whose columns Adyen moved (see WriteCSV), or
// a broken file.
func (s *Sim) PublishReport(fileName string, content []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reports.files[fileName] = slices.Clone(content)
}

// ReportUser returns the report user's name and password.
func (s *Sim) ReportUser() (user, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reports.user, s.reports.password
}

// ReportURL is where fileName is downloaded: on the server StartReports
// started, else on Adyen's own host (ca-test, or ca-live for a live
// simulator), which a test's gateway must never reach.
func (s *Sim) ReportURL(fileName string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reportURLLocked(fileName)
}

func (s *Sim) reportURLLocked(fileName string) string {
	return s.reports.baseURL + ReportDownloadPath + url.PathEscape(s.merchant) + "/" + url.PathEscape(fileName)
}

// ReportAvailable is the REPORT_AVAILABLE Adyen sends when fileName can be
// downloaded, signed: pspReference the file name, reason its URL (see
// ReportURL), an amount of 0 EUR, success "true", no payment method.
// Send it with Deliver.
func (s *Sim) ReportAvailable(fileName string) Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signLocked(Item{
		AdditionalData:      map[string]string{},
		Amount:              Amount{Currency: "EUR", Value: 0},
		EventCode:           EventReportAvailable,
		EventDate:           s.dateLocked(s.now),
		MerchantAccountCode: s.merchant,
		PspReference:        fileName,
		Reason:              s.reportURLLocked(fileName),
		Success:             "true",
	})
}

// FailNextReportDownloads makes the next n authenticated downloads answer
// status without the file, as a report host in trouble does.
func (s *Sim) FailNextReportDownloads(n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.reports.failures = append(s.reports.failures, status)
	}
}

// ReportRequests is how many requests the report host received, refused
// ones included.
func (s *Sim) ReportRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reports.requests
}

// ReportDownloads is how many times fileName was served.
func (s *Sim) ReportDownloads(fileName string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reports.downloads[fileName]
}

// StartReports serves the reports until the test ends, and makes
// ReportURL and ReportAvailable point at the server.
func (s *Sim) StartReports(t testing.TB) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(s.ReportsHandler())
	t.Cleanup(srv.Close)
	s.mu.Lock()
	s.reports.baseURL = srv.URL
	s.mu.Unlock()
	return srv
}

// ReportsHandler serves GET ReportDownloadPath<merchant>/<file> as
// Adyen's report host does: the report user's Basic auth checked (401
// with a challenge otherwise), another merchant account refused (403), an
// unknown file 404, else the file as text/csv.
func (s *Sim) ReportsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+ReportDownloadPath+"{merchant}/{file}", s.serveReport)
	return mux
}

func (s *Sim) serveReport(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.reports.requests++
	user, password, ok := r.BasicAuth()
	if !ok || subtle.ConstantTimeCompare([]byte(user), []byte(s.reports.user)) != 1 ||
		subtle.ConstantTimeCompare([]byte(password), []byte(s.reports.password)) != 1 {
		s.mu.Unlock()
		w.Header().Set("WWW-Authenticate", `Basic realm="Adyen"`)
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	if r.PathValue("merchant") != s.merchant {
		s.mu.Unlock()
		http.Error(w, "Forbidden", http.StatusForbidden)
		return
	}
	if len(s.reports.failures) > 0 {
		status := s.reports.failures[0]
		s.reports.failures = s.reports.failures[1:]
		s.mu.Unlock()
		http.Error(w, http.StatusText(status), status)
		return
	}
	name := r.PathValue("file")
	content, found := s.reports.files[name]
	if found {
		s.reports.downloads[name]++
	}
	s.mu.Unlock()
	if !found {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/csv")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	_, _ = w.Write(content)
}
