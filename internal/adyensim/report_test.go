package adyensim_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
)

// documentedHeader is the header of a settlement detail report as Adyen
// writes it in 2026: the standard columns in Adyen's documented order
// (docs.adyen.com/reporting/settlement-detail-report), then the newer
// ones, as in the report kept in wikimedia-fundraising-SmashPig's Adyen
// test data (settlement_detail_report_payment_cost.csv).
const documentedHeader = "Company Account,Merchant Account,Psp Reference,Merchant Reference,Payment Method," +
	"Creation Date,TimeZone,Type,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC)," +
	"Exchange Rate,Net Currency,Net Debit (NC),Net Credit (NC),Commission (NC),Markup (NC),Scheme Fees (NC)," +
	"Interchange (NC),Payment Method Variant,Modification Merchant Reference,Batch Number,Reserved4,Reserved5," +
	"Reserved6,Reserved7,Reserved8,Reserved9,Reserved10," +
	"Booking Date,Booking Date TimeZone,Metadata,Balance Currency,Net Debit (BC),Net Credit (BC)," +
	"Payment Fees (NC),DCC Markup (NC),Funds Destination,Balance Platform Debit,Balance Platform Credit," +
	"Shopper Country,Clearing Network,Merchant Order Reference,Dispute Reference,ARN,Settlement Flow," +
	"Authorisation Code,Gross Fees (NC)"

// The sample rows of Adyen's documentation of the report: a Settled
// payment under Interchange++ (no Commission) and a Chargeback with its
// fee. Their Batch Number is empty; their Psp References are Adyen's.
const (
	documentedSettled    = "TestCompany,TestMerchant,1813702551707653,3vpzf7,visa,2013-06-03 11:26:49,CET,Settled,1713702551795048,GBP,,5.00,1,GBP,,4.88,,0.04,0.01,0.07,visaclassic,,,,,,,,,"
	documentedChargeback = "TestCompany,TestMerchant,1313642467023511,324959451,visa,2013-03-26 22:37:26,CET,Chargeback,2313642467170922,EUR,349.99,,1,EUR,357.49,,7.5,,,,visaclassic,,,,,,,,,"
)

// amountColumns are compared as numbers: Adyen writes 7.5 where the
// simulator writes 7.50.
var amountColumns = []string{"Gross Debit (GC)", "Gross Credit (GC)", "Exchange Rate", "Net Debit (NC)",
	"Net Credit (NC)", "Commission (NC)", "Markup (NC)", "Scheme Fees (NC)", "Interchange (NC)"}

// report is a downloaded CSV read by header name, as a consumer must read
// it.
type report struct {
	header []string
	rows   []map[string]string
	lines  [][]string
}

func parseReport(t *testing.T, raw []byte) report {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	r := report{header: recs[0], lines: recs[1:]}
	for _, rec := range recs[1:] {
		require.Len(t, rec, len(r.header), "every line has a field per column")
		row := map[string]string{}
		for i, c := range r.header {
			row[c] = rec[i]
		}
		r.rows = append(r.rows, row)
	}
	return r
}

func (r report) ofType(typ string) []map[string]string {
	var out []map[string]string
	for _, row := range r.rows {
		if row["Type"] == typ {
			out = append(out, row)
		}
	}
	return out
}

func dec(t *testing.T, s string) decimal.Decimal {
	t.Helper()
	if s == "" {
		return decimal.Zero
	}
	d, err := decimal.NewFromString(s)
	require.NoError(t, err, "%q is a decimal amount", s)
	return d
}

func splitLine(t *testing.T, line string) []string {
	t.Helper()
	rec, err := csv.NewReader(strings.NewReader(line)).Read()
	require.NoError(t, err)
	return rec
}

func TestReportHeaderIsAdyens(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	rep := sim.NewBatch(1).Close()
	firstLine, _, _ := strings.Cut(string(rep.CSV), "\n")
	require.Equal(t, documentedHeader, firstLine, "the header, byte for byte")
	require.Equal(t, adyensim.StandardColumns, strings.Split(documentedHeader, ",")[:30],
		"the standard columns in Adyen's documented order")
	require.Equal(t, "settlement_detail_report_batch_1.csv", rep.FileName)
}

// TestReportReproducesAdyensSampleRows plays the two payments of Adyen's
// sample rows on a simulator set up as Adyen's test account, and finds
// the sample rows in its report, column for column.
func TestReportReproducesAdyensSampleRows(t *testing.T) {
	t.Parallel()
	cet := time.FixedZone("CET", 3600)
	sim := adyensim.New(adyensim.Config{Seed: 7, CompanyAccount: "TestCompany", MerchantAccount: "TestMerchant", Location: cet,
		Start: time.Date(2013, 3, 26, 22, 37, 26, 0, cet)})
	chargedBack, _ := sim.Authorise(34999, "EUR", "324959451", true)
	sim.Capture(chargedBack, 34999)
	dispute, _ := sim.Chargeback(chargedBack, 34999, "Accepted")
	sim.SetNow(time.Date(2013, 6, 3, 11, 26, 49, 0, cet))
	settled, _ := sim.Authorise(500, "GBP", "3vpzf7", true)
	capture, _ := sim.Capture(settled, 500)

	batch := sim.NewBatch(7)
	batch.Chargeback(dispute, adyensim.Fees{Commission: 750})
	batch.Settled(capture, adyensim.Fees{Markup: 4, SchemeFees: 1, Interchange: 7})
	rep := parseReport(t, batch.Close().CSV)

	for _, c := range []struct {
		sample, typ, payment, modification string
	}{
		{documentedSettled, "Settled", settled, capture},
		{documentedChargeback, "Chargeback", chargedBack, dispute},
	} {
		want := splitLine(t, c.sample)
		require.Len(t, want, len(adyensim.StandardColumns))
		rows := rep.ofType(c.typ)
		require.Len(t, rows, 1)
		got := rows[0]
		for i, col := range adyensim.StandardColumns {
			switch {
			case col == "Psp Reference":
				require.Equal(t, c.payment, got[col])
			case col == "Modification Reference":
				require.Equal(t, c.modification, got[col])
			case col == "Batch Number":
				require.Equal(t, "7", got[col], "the simulator names the batch the sample leaves blank")
			case slices.Contains(amountColumns, col) && want[i] != "":
				require.True(t, dec(t, want[i]).Equal(dec(t, got[col])), "%s %s: Adyen %s, simulator %s", c.typ, col, want[i], got[col])
			default:
				require.Equal(t, want[i], got[col], "%s %s", c.typ, col)
			}
		}
	}

	// The arithmetic of the samples, in the simulator's own file.
	s := rep.ofType("Settled")[0]
	require.Equal(t, "4.88", s["Net Credit (NC)"])
	require.True(t, dec(t, s["Gross Credit (GC)"]).Sub(dec(t, s["Markup (NC)"])).Sub(dec(t, s["Scheme Fees (NC)"])).
		Sub(dec(t, s["Interchange (NC)"])).Sub(dec(t, s["Commission (NC)"])).Equal(dec(t, s["Net Credit (NC)"])),
		"5.00 − 0.04 − 0.01 − 0.07 = 4.88")
	cb := rep.ofType("Chargeback")[0]
	require.Equal(t, "357.49", cb["Net Debit (NC)"])
	require.True(t, dec(t, cb["Gross Debit (GC)"]).Add(dec(t, cb["Commission (NC)"])).Equal(dec(t, cb["Net Debit (NC)"])),
		"349.99 + 7.50 = 357.49")
}

var payoutReference = regexp.MustCompile(`^TX[0-9A-Z]{11}XT batch (\d+), (.+)$`)

// requirePayouts checks that the report pays out, per Net currency, the
// sum of its rows' nets, in one MerchantPayout each, and returns them by
// currency.
func requirePayouts(t *testing.T, rep report) map[string]decimal.Decimal {
	t.Helper()
	sums := map[string]decimal.Decimal{}
	for _, row := range rep.rows {
		if row["Type"] == "MerchantPayout" {
			continue
		}
		sums[row["Net Currency"]] = sums[row["Net Currency"]].Add(dec(t, row["Net Credit (NC)"])).Sub(dec(t, row["Net Debit (NC)"]))
	}
	payouts := map[string]decimal.Decimal{}
	for _, row := range rep.ofType("MerchantPayout") {
		cur := row["Net Currency"]
		require.NotContains(t, payouts, cur, "one MerchantPayout per currency")
		payouts[cur] = dec(t, row["Net Debit (NC)"]).Sub(dec(t, row["Net Credit (NC)"]))
		m := payoutReference.FindStringSubmatch(row["Modification Reference"])
		require.NotNil(t, m, "a payout's Modification Reference: %q", row["Modification Reference"])
		require.Equal(t, row["Batch Number"], m[1])
		require.Equal(t, row["Merchant Account"], m[2])
		require.Empty(t, row["Psp Reference"]+row["Gross Currency"]+row["Gross Debit (GC)"]+row["Gross Credit (GC)"])
	}
	for cur, sum := range sums {
		if sum.IsZero() {
			continue
		}
		require.Contains(t, payouts, cur)
		require.True(t, sum.Equal(payouts[cur]), "%s: rows net %s, payout %s", cur, sum, payouts[cur])
	}
	return payouts
}

// TestReportRowTypesAndExponents: every movement a script makes has its
// row, amounts are written at each currency's exponent (EUR 2, JPY 0, KWD
// 3), Fee rows and payouts follow the movements, and the batch pays out
// what its rows add up to, per currency.
func TestReportRowTypesAndExponents(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	srv := sim.StartCheckout(t)
	eur, _ := sim.Authorise(20000, "EUR", "order-eur", true)
	eurCapture, _ := sim.Capture(eur, 20000)
	refund, _ := sim.Refund(eur, 2500, true)
	sim.Advance(48 * time.Hour)
	sim.RefundedReversed(eur, refund, 2500)
	dispute, _ := sim.Chargeback(eur, 20000, "Pending")
	sim.ChargebackReversed(eur, dispute, 20000)
	sim.SecondChargeback(eur, dispute, 20000)
	jpy, _ := sim.Authorise(5000, "JPY", "order-jpy", true)
	jpyCapture, _ := sim.Capture(jpy, 5000)
	kwd, _ := sim.Authorise(1500, "KWD", "order-kwd", true)
	kwdCapture, _ := sim.Capture(kwd, 1500)

	// A refund paygate asks for through the Checkout API is settled once
	// its REFUND succeeded, under the reference paygate sent.
	checkoutRefund := checkoutRefundOf(t, sim, srv.URL, kwd, 500, "KWD", "request-1")
	sim.RefundOutcome(checkoutRefund, true, "")

	b := sim.NewBatch(3)
	b.Settled(eurCapture, adyensim.Fees{Markup: 12, SchemeFees: 3, Interchange: 30})
	b.Refunded(refund, adyensim.Fees{})
	b.RefundedReversed(refund, adyensim.Fees{})
	b.Chargeback(dispute, adyensim.Fees{Commission: 1500})
	b.ChargebackReversed(dispute, adyensim.Fees{})
	b.SecondChargeback(dispute, adyensim.Fees{})
	b.Settled(jpyCapture, adyensim.Fees{Commission: 100})
	b.Settled(kwdCapture, adyensim.Fees{Interchange: 15})
	b.Refunded(checkoutRefund, adyensim.Fees{})
	b.Fee("EUR", 250, "Transaction Fees March 2026")
	closed := b.Close()
	rep := parseReport(t, closed.CSV)

	var types []string
	for _, row := range rep.rows {
		types = append(types, row["Type"])
		require.Equal(t, "3", row["Batch Number"])
		require.Equal(t, adyensim.DefaultCompanyAccount, row["Company Account"])
	}
	require.Equal(t, []string{"Settled", "Refunded", "RefundedReversed", "Chargeback", "ChargebackReversed",
		"SecondChargeback", "Settled", "Settled", "Refunded", "Fee", "MerchantPayout", "MerchantPayout", "MerchantPayout"},
		types, "movements, then fees, then a payout per currency")

	byMod := map[string]map[string]string{}
	for _, row := range rep.rows {
		byMod[row["Type"]+" "+row["Modification Reference"]] = row
	}
	jp := byMod["Settled "+jpyCapture]
	require.Equal(t, []string{"5000", "1", "4900", "100"}, []string{jp["Gross Credit (GC)"], jp["Exchange Rate"], jp["Net Credit (NC)"], jp["Commission (NC)"]},
		"JPY has no decimals")
	kw := byMod["Settled "+kwdCapture]
	require.Equal(t, []string{"1.500", "1.485", "0.015"}, []string{kw["Gross Credit (GC)"], kw["Net Credit (NC)"], kw["Interchange (NC)"]},
		"KWD has three")
	require.Equal(t, kwd, kw["Psp Reference"])
	require.Equal(t, "order-kwd", kw["Merchant Reference"])
	require.Regexp(t, `^\d{6}$`, kw["Authorisation Code"])
	ref := byMod["Refunded "+checkoutRefund]
	require.Equal(t, []string{"0.500", "0.500", "request-1", kwd}, []string{ref["Gross Debit (GC)"], ref["Net Debit (NC)"],
		ref["Modification Merchant Reference"], ref["Psp Reference"]})
	cb := byMod["Chargeback "+dispute]
	require.Equal(t, []string{"200.00", "215.00", "15.00"}, []string{cb["Gross Debit (GC)"], cb["Net Debit (NC)"], cb["Commission (NC)"]})
	require.Equal(t, "200.00", byMod["ChargebackReversed "+dispute]["Net Credit (NC)"])
	require.Equal(t, "25.00", byMod["RefundedReversed "+refund]["Gross Credit (GC)"])
	fee := byMod["Fee Transaction Fees March 2026"]
	require.Equal(t, []string{"EUR", "2.50", "", ""}, []string{fee["Net Currency"], fee["Net Debit (NC)"], fee["Gross Currency"], fee["Psp Reference"]})
	settledAt := byMod["Settled "+eurCapture]
	require.Equal(t, winter.In(amsterdam(t)).Format("2006-01-02 15:04:05"), settledAt["Creation Date"])
	require.Equal(t, "CET", settledAt["TimeZone"])
	require.Equal(t, sim.Now().In(amsterdam(t)).Format("2006-01-02 15:04:05"), settledAt["Booking Date"], "booked when the batch closed")

	payouts := requirePayouts(t, rep)
	// EUR: 200.00 − 0.45 − 25.00 + 25.00 − 215.00 + 200.00 − 200.00 − 2.50
	require.Equal(t, "-17.95", payouts["EUR"].StringFixed(2), "more went out than came in: collected from the bank")
	require.Equal(t, "4900", payouts["JPY"].String())
	require.Equal(t, "0.985", payouts["KWD"].StringFixed(3))
	require.Len(t, closed.Rows, len(rep.rows))
	require.True(t, closed.Rows[len(closed.Rows)-1].NetAmount().Equal(payouts["KWD"].Neg()), "Row amounts are signed by the balance's view")
}

func amsterdam(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(adyensim.DefaultLocation)
	require.NoError(t, err)
	return loc
}

// checkoutRefundOf asks the Checkout API for a refund and returns its
// pspReference.
func checkoutRefundOf(t *testing.T, sim *adyensim.Sim, base, payment string, value int64, currency, reference string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"merchantAccount": sim.MerchantAccount(), "reference": reference,
		"amount": map[string]any{"currency": currency, "value": value}})
	req, err := http.NewRequest(http.MethodPost, base+adyensim.CheckoutPath+"/payments/"+payment+"/refunds", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", sim.APIKey())
	req.Header.Set("Idempotency-Key", "key-"+reference)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusCreated, res.StatusCode)
	var ans struct{ PspReference string }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&ans))
	return ans.PspReference
}

// TestReportFaults: what a test adds that Adyen would not write — a row
// misstating its amount, a payout off from its rows, a payment the
// simulator never notified — and an explicit Fee, each as asked.
func TestReportFaults(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p, _ := sim.Authorise(10000, "EUR", "order-1", true)
	capture, _ := sim.Capture(p, 10000)
	q, _ := sim.Authorise(3000, "EUR", "order-2", true)
	other, _ := sim.Capture(q, 3000)
	refund, _ := sim.Refund(q, 1000, true)

	b := sim.NewBatch(9)
	b.Settled(capture, adyensim.Fees{Commission: 100})
	b.Settled(other, adyensim.Fees{})
	b.Refunded(refund, adyensim.Fees{})
	misstated := b.Misstate(capture, 1)
	require.Equal(t, int64(10001), misstated.Gross)
	require.Equal(t, int64(9901), misstated.Net)
	require.Equal(t, int64(-999), b.Misstate(refund, -1).Gross, "a debit misstated by less")
	unknown := b.UnknownPayment(777, "EUR", adyensim.Fees{Interchange: 7})
	b.Fee("EUR", 50, "Transaction Fees")
	b.MisstatePayout("EUR", -3)
	b.MisstatePayout("JPY", 400)
	rep := parseReport(t, b.Close().CSV)

	rows := map[string]map[string]string{}
	for _, row := range rep.rows {
		rows[row["Modification Reference"]] = row
	}
	require.Equal(t, "100.01", rows[capture]["Gross Credit (GC)"])
	require.Equal(t, "99.01", rows[capture]["Net Credit (NC)"])
	require.Equal(t, "9.99", rows[refund]["Net Debit (NC)"])
	u := rows[unknown.ModificationReference]
	require.Equal(t, []string{"Settled", unknown.PspReference, "7.77", "7.70"}, []string{u["Type"], u["Psp Reference"], u["Gross Credit (GC)"], u["Net Credit (NC)"]})
	require.NotContains(t, []string{p, q, capture, other, refund}, unknown.PspReference)
	require.Equal(t, "0.50", rows["Transaction Fees"]["Net Debit (NC)"])

	payouts := map[string]string{}
	for _, row := range rep.ofType("MerchantPayout") {
		payouts[row["Net Currency"]] = row["Net Debit (NC)"]
	}
	// 99.01 + 30.00 − 9.99 + 7.70 − 0.50, less the 0.03 misstated
	require.Equal(t, map[string]string{"EUR": "126.19", "JPY": "400"}, payouts)
}

func TestReportScriptBugsPanic(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p, _ := sim.Authorise(1000, "EUR", "order-1", true)
	capture, _ := sim.Capture(p, 1000)
	failed, _ := sim.Capture(p, 500)
	sim.CaptureFailed(p, failed, 500)
	b := sim.NewBatch(1)
	b.Settled(capture, adyensim.Fees{})
	closed := sim.NewBatch(2)
	closed.Close()
	for name, f := range map[string]func(){
		"settled twice":           func() { sim.NewBatch(3).Settled(capture, adyensim.Fees{}) },
		"a capture that failed":   func() { b.Settled(failed, adyensim.Fees{}) },
		"no such refund":          func() { b.Refunded(capture, adyensim.Fees{}) },
		"a batch number again":    func() { sim.NewBatch(1) },
		"a closed batch":          func() { closed.Fee("EUR", 1, "late") },
		"negative fees":           func() { b.UnknownPayment(100, "EUR", adyensim.Fees{Markup: -1}) },
		"an unknown currency":     func() { b.Fee("XXX", 1, "fee") },
		"misstating a stray row":  func() { b.Misstate("nothing", 1) },
		"a fee that is not money": func() { b.Fee("EUR", 0, "fee") },
	} {
		require.Panics(t, f, name)
	}
}

func get(t *testing.T, url string, auth func(*http.Request)) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if auth != nil {
		auth(req)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, res.Header, string(body)
}

// TestReportDownload: the report host serves a closed batch's file to the
// report user only, and fails when told to.
func TestReportDownload(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	srv := sim.StartReports(t)
	p, _ := sim.Authorise(1000, "EUR", "order-1", true)
	capture, _ := sim.Capture(p, 1000)
	b := sim.NewBatch(12)
	b.Settled(capture, adyensim.Fees{})
	rep := b.Close()

	url := sim.ReportURL(rep.FileName)
	require.Equal(t, srv.URL+"/reports/download/MerchantAccount/"+sim.MerchantAccount()+"/settlement_detail_report_batch_12.csv", url)
	user, password := sim.ReportUser()
	asReportUser := func(r *http.Request) { r.SetBasicAuth(user, password) }

	status, h, body := get(t, url, asReportUser)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, string(rep.CSV), body)
	require.Equal(t, "text/csv", h.Get("Content-Type"))
	require.Equal(t, 1, sim.ReportDownloads(rep.FileName))

	status, h, _ = get(t, url, nil)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, h.Get("WWW-Authenticate"), "Basic")
	status, _, _ = get(t, url, func(r *http.Request) { r.SetBasicAuth(user, password+"x") })
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = get(t, url, func(r *http.Request) { r.SetBasicAuth("ws@Company.PaygateCompany", password) })
	require.Equal(t, http.StatusUnauthorized, status, "another user with the report user's password")
	status, _, _ = get(t, strings.Replace(url, sim.MerchantAccount(), "OtherMerchant", 1), asReportUser)
	require.Equal(t, http.StatusForbidden, status)
	status, _, _ = get(t, strings.Replace(url, "batch_12", "batch_13", 1), asReportUser)
	require.Equal(t, http.StatusNotFound, status)

	sim.FailNextReportDownloads(2, http.StatusServiceUnavailable)
	for range 2 {
		status, _, _ = get(t, url, asReportUser)
		require.Equal(t, http.StatusServiceUnavailable, status)
	}
	status, _, _ = get(t, url, asReportUser)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, 2, sim.ReportDownloads(rep.FileName))
	require.Equal(t, 9, sim.ReportRequests())

	// A report whose columns Adyen moved and added to.
	reversed := slices.Clone(adyensim.Columns)
	slices.Reverse(reversed)
	cols := append([]string{"Some Future Column"}, reversed...)
	sim.PublishReport(rep.FileName, sim.WriteCSV(rep.Rows, cols))
	_, _, body = get(t, url, asReportUser)
	moved := parseReport(t, []byte(body))
	require.Equal(t, cols, moved.header)
	require.Equal(t, capture, moved.ofType("Settled")[0]["Modification Reference"])
	require.Equal(t, "", moved.rows[0]["Some Future Column"])
}

// TestReportAvailable: the notification of a report, as Adyen sends it,
// through paygate's own receiver: pspReference the file name, reason the
// URL, no amount, signed.
func TestReportAvailable(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	sim.StartReports(t)
	ep, url := serve(t, sim)
	it := sim.ReportAvailable("settlement_detail_report_batch_4.csv")

	status, body := answer(t)(sim.Deliver(context.Background(), url, basicAuth, it))
	require.Equal(t, http.StatusOK, status, body)
	require.Len(t, ep.events, 1)
	ev := ep.events[0]
	require.Equal(t, "settlement_detail_report_batch_4.csv:REPORT_AVAILABLE:true", ev.ID)
	var got map[string]any
	require.NoError(t, json.Unmarshal(ev.Payload, &got))
	require.Equal(t, sim.ReportURL("settlement_detail_report_batch_4.csv"), got["reason"])
	require.Equal(t, "settlement_detail_report_batch_4.csv", got["pspReference"])
	require.Equal(t, map[string]any{"currency": "EUR", "value": float64(0)}, got["amount"])
	require.Equal(t, "true", got["success"])
	require.Equal(t, "REPORT_AVAILABLE", got["eventCode"])
	require.NotContains(t, got, "paymentMethod")
	require.NotContains(t, got, "originalReference")
	require.Equal(t, adyensim.Sign(it, sim.HMACKey()), got["additionalData"].(map[string]any)[adyensim.SignatureField])

	// Without a server the URL is Adyen's own test host.
	require.Equal(t, "https://ca-test.adyen.com/reports/download/MerchantAccount/PaygateECOM/settlement_detail_report_batch_4.csv",
		adyensim.New(adyensim.Config{}).ReportURL("settlement_detail_report_batch_4.csv"))
}
