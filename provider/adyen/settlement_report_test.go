package adyen_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
)

// referenceHeader is the standard columns, in Adyen's documented order
// (shared/reference/finance-adyen.md, section 2).
const referenceHeader = "Company Account,Merchant Account,Psp Reference,Merchant Reference,Payment Method,Creation Date," +
	"TimeZone,Type,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC),Exchange Rate,Net Currency," +
	"Net Debit (NC),Net Credit (NC),Commission (NC),Markup (NC),Scheme Fees (NC),Interchange (NC),Payment Method Variant," +
	"Modification Merchant Reference,Batch Number,Reserved4,Reserved5,Reserved6,Reserved7,Reserved8,Reserved9,Reserved10\n"

// referenceRows are Adyen's documented sample rows: a Settled row under
// Interchange++ (5.00 − markup 0.04 − scheme 0.01 − interchange 0.07 = net
// 4.88, Commission empty) and a Chargeback (gross debit 349.99 +
// commission 7.50 = net debit 357.49), then the batch's payout.
const referenceRows = "Company,Merchant,8816000000000001,order-1,visa,2026-03-02 10:15:00,CET,Settled,8826000000000001,GBP,,5.00,1,GBP,,4.88,,0.04,0.01,0.07,visaclassic,,7,,,,,,,\n" +
	"Company,Merchant,8816000000000002,order-2,visa,2026-03-02 11:00:00,CET,Chargeback,8836000000000002,EUR,349.99,,1,EUR,357.49,,7.50,,,,visaclassic,,7,,,,,,,\n" +
	"Company,Merchant,,,,2026-03-03 09:00:00,CET,MerchantPayout,\"TX1234567890XT batch 7, Merchant\",,,,,GBP,4.88,,,,,,,,7,,,,,,,\n"

func TestSettlementReportReferenceRows(t *testing.T) {
	t.Parallel()
	rows, err := adyen.ParseSettlementReport([]byte(referenceHeader + referenceRows))
	require.NoError(t, err)
	require.Len(t, rows, 3)
	settled := rows[0]
	require.Equal(t, "Settled", settled.Type)
	require.Equal(t, 2, settled.Line)
	require.Equal(t, "gbp", settled.NetCurrency)
	require.Equal(t, "4.88", settled.Net().StringFixed(2))
	require.Equal(t, "0.12", settled.Fees().StringFixed(2))
	require.Equal(t, time.Date(2026, 3, 2, 9, 15, 0, 0, time.UTC), settled.Created, "CET is UTC+1")
	require.Equal(t, int64(7), settled.Batch)

	recs, err := adyen.Settlements{}.Statement(7, []byte(referenceHeader+referenceRows))
	require.NoError(t, err)
	require.Len(t, recs, 3)

	s := recs[0]
	require.Equal(t, int64(500), s.Amount, "the movement is its gross: net plus the fees taken from it")
	require.Equal(t, int64(12), s.Fee)
	require.Equal(t, int64(488), s.Net)
	require.Equal(t, "8816000000000001", s.ID, "the payment's Psp Reference")
	require.Equal(t, "8826000000000001", s.SourceID, "the capture's Modification Reference")
	require.Equal(t, "charge", s.ReportingCategory)
	require.Equal(t, []provider.StatementLine{
		{Ref: adyen.CaptureRef("8826000000000001"), Kind: ledger.KindCapture, Type: "Settled", Amount: 500, FeeColumn: ptr(int64(12)),
			Conversion: "adyen:fx:8826000000000001:settled:"},
		{Ref: "adyen:fee:8826000000000001:settled", Kind: ledger.KindFee, Post: true, Type: "fee", Amount: -12},
	}, s.Lines)

	cb := recs[1]
	require.Equal(t, "eur", cb.Currency)
	require.Equal(t, int64(-34999), cb.Amount, "gross debit 349.99")
	require.Equal(t, int64(-35749), cb.Net)
	require.Equal(t, adyen.ChargebackRef("8836000000000002"), cb.Lines[0].Ref)
	require.Equal(t, ledger.KindDisputeWithdrawal, cb.Lines[0].Kind)
	require.Equal(t, int64(-750), cb.Lines[1].Amount, "the chargeback fee leaves the balance")

	po := recs[2]
	require.Equal(t, []provider.StatementLine{
		{Ref: "adyen:payout:batch:7:gbp", Kind: ledger.KindPayout, Post: true, Type: "MerchantPayout", Amount: -488, FeeColumn: ptr(int64(0))},
	}, po.Lines)
	require.Equal(t, "payout", po.ReportingCategory)
}

func ptr[T any](v T) *T { return &v }

// simJSON is a simulator item as Adyen sends it.
func simJSON(t *testing.T, it adyensim.Item) []byte {
	t.Helper()
	raw, err := json.Marshal(it)
	require.NoError(t, err)
	return raw
}

// TestSettlementRowTypes: every row type maps to the ref its webhook posts
// the movement under; Fee rows are fees to post; a type paygate does not
// post, or a movement naming no modification, is kept with no ref.
func TestSettlementRowTypes(t *testing.T) {
	t.Parallel()
	row := func(typ, mod, netDebit, netCredit, commission string) string {
		return "C,M,PSP1,ref,visa,2026-03-02 10:00:00,UTC," + typ + "," + mod + ",EUR,,,1,EUR," + netDebit + "," + netCredit + "," + commission + ",,,,v,,3,,,,,,,\n"
	}
	file := referenceHeader +
		row("Refunded", "R1", "10.10", "", "0.10") +
		row("RefundedReversed", "R1", "", "10.00", "") +
		row("SecondChargeback", "D1", "20.00", "", "") +
		row("ChargebackReversed", "D1", "", "20.00", "") +
		row("Fee", "Transaction Fees March", "1.50", "", "") +
		row("DepositCorrection", "X1", "", "3.00", "") +
		row("Settled", "", "", "9.90", "0.10") +
		row("MerchantPayout", "TX batch 3", "", "5.00", "")
	recs, err := adyen.Settlements{}.Statement(3, []byte(file))
	require.NoError(t, err)
	type want struct {
		ref      string
		kind     ledger.Kind
		post     bool
		amount   int64
		category string
	}
	got := func(r provider.StatementRecord) want {
		l := r.Lines[0]
		return want{l.Ref, l.Kind, l.Post, l.Amount, r.ReportingCategory}
	}
	require.Equal(t, want{adyen.RefundRef("R1"), ledger.KindRefund, false, -1000, "refund"}, got(recs[0]))
	require.Equal(t, "adyen:fee:R1:refunded", recs[0].Lines[1].Ref)
	require.Equal(t, want{adyen.RefundReversalRef("R1"), ledger.KindRefundReversal, false, 1000, "refund_failure"}, got(recs[1]))
	require.Equal(t, want{adyen.SecondChargebackRef("D1"), ledger.KindDisputeWithdrawal, false, -2000, "dispute"}, got(recs[2]))
	require.Equal(t, want{adyen.ChargebackReversalRef("D1"), ledger.KindDisputeReinstatement, false, 2000, "dispute_reversal"}, got(recs[3]))
	require.Equal(t, want{"adyen:fee:batch:3:line:6", ledger.KindFee, true, -150, "fee"}, got(recs[4]), "a Fee row is a fee, keyed by its line")
	require.Equal(t, want{"", "", false, 300, "other_adjustment"}, got(recs[5]), "a type paygate never posts: listed, no ref")
	require.Equal(t, want{"", "", false, 1000, "charge"}, got(recs[6]), "a movement naming no modification: no ref")
	require.Equal(t, "adyen:fee:batch:3:line:8", recs[6].Lines[1].Ref, "its fee is keyed by its line")
	require.Equal(t, want{"adyen:payout:batch:3:eur", ledger.KindPayoutReversal, true, 500, "payout"}, got(recs[7]),
		"a payout in Net Credit is money the bank sent back")

	_, err = adyen.Settlements{}.Statement(4, []byte(file))
	require.ErrorIs(t, err, adyen.ErrInvalidReport)
	require.Contains(t, err.Error(), "line 2 is of batch 3, not 4")
}

// TestSettlementReportReorderedColumns: Adyen adds and reorders columns; a
// report read by header name gives the same records whatever the order,
// and whatever columns it does not know.
func TestSettlementReportReorderedColumns(t *testing.T) {
	t.Parallel()
	sim := adyensim.New(adyensim.Config{Seed: 5, Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
	psp, _ := sim.Authorise(12345, "EUR", "order-1", true)
	capture, _ := sim.Capture(psp, 12345)
	refundPSP, _ := sim.Refund(psp, 2345, true)
	kwd, _ := sim.Authorise(1500, "KWD", "order-2", true)
	kwdCapture, _ := sim.Capture(kwd, 1500)
	sim.Advance(24 * time.Hour)
	b := sim.NewBatch(9)
	b.Settled(capture, adyensim.Fees{Markup: 12, SchemeFees: 3, Interchange: 40})
	b.Refunded(refundPSP, adyensim.Fees{Commission: 10})
	b.Settled(kwdCapture, adyensim.Fees{Commission: 25})
	b.Fee("EUR", 199, "Transaction Fees March 2026")
	rep := b.Close()

	want, err := adyen.Settlements{}.Statement(9, rep.CSV)
	require.NoError(t, err)
	require.Len(t, want, 6, "3 movements, a fee, a payout per currency")

	columns := append(slices.Clone(adyensim.Columns), "Something Adyen Added Later", "Another One")
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(columns), func(i, j int) { columns[i], columns[j] = columns[j], columns[i] })
	require.NotEqual(t, adyensim.Columns, columns[:len(adyensim.Columns)])
	moved := sim.WriteCSV(rep.Rows, columns)
	require.NotEqual(t, rep.CSV, moved)
	got, err := adyen.Settlements{}.Statement(9, moved)
	require.NoError(t, err)
	for i := range want {
		// Lines differ only by the line numbers of row-keyed refs, which
		// are the same here: the rows keep their order.
		require.Equal(t, want[i], got[i], "record %d", i)
	}

	kwdRec := want[2]
	require.Equal(t, "kwd", kwdRec.Currency)
	require.Equal(t, int64(1500), kwdRec.Amount, "1.500 KWD: three decimals")
}

func TestSettlementReportRefusals(t *testing.T) {
	t.Parallel()
	for _, missing := range []string{"Type", "Net Credit (NC)", "Modification Reference", "Interchange (NC)", "Batch Number"} {
		header := strings.Replace(referenceHeader, missing+",", "Renamed,", 1)
		_, err := adyen.ParseSettlementReport([]byte(header + referenceRows))
		require.ErrorIs(t, err, adyen.ErrInvalidReport, missing)
		require.Contains(t, err.Error(), `no "`+missing+`" column`)
	}
	_, err := adyen.ParseSettlementReport(nil)
	require.ErrorIs(t, err, adyen.ErrInvalidReport)

	bad := func(gross, zone, currency string) string {
		return referenceHeader + "C,M,P,r,visa,2026-03-02 10:00:00," + zone + ",Settled,M1," + currency + ",," + gross + ",1," + currency + ",,1.00,,,,,v,,7,,,,,,,\n"
	}
	for name, file := range map[string]string{
		"a float's exponent":        bad("1e3", "CET", "EUR"),
		"grouping":                  bad("1,000.00", "CET", "EUR"),
		"cents of a zero-decimal":   bad("5.5", "CET", "JPY"),
		"four decimals of a euro":   bad("5.0001", "CET", "EUR"),
		"an ambiguous zone":         bad("1.00", "IST", "EUR"),
		"a currency no ledger has":  bad("1.00", "CET", "XYZ"),
		"a currency in lower case ": bad("1.00", "CET", "eur"),
	} {
		_, err := adyen.ParseSettlementReport([]byte(file))
		require.ErrorIs(t, err, adyen.ErrInvalidReport, name)
		require.Contains(t, err.Error(), "line 2", name)
	}
	rows, err := adyen.ParseSettlementReport([]byte(bad("1.00", "Europe/Amsterdam", "EUR")))
	require.NoError(t, err, "an IANA zone")
	require.Equal(t, time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC), rows[0].Created)
	rows, err = adyen.ParseSettlementReport([]byte("\xef\xbb\xbf" + bad("1.00", "+02:00", "EUR")))
	require.NoError(t, err, "a byte order mark and an offset")
	require.Equal(t, time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC), rows[0].Created)
}

func TestSettlementReportBatch(t *testing.T) {
	t.Parallel()
	n, ok := adyen.SettlementReportBatch("settlement_detail_report_batch_12.csv")
	require.True(t, ok)
	require.Equal(t, int64(12), n)
	for _, name := range []string{"settlement_detail_report_batch_0.csv", "settlement_detail_report_batch_012.csv",
		"settlement_detail_report_batch_12.csv.gz", "payments_accounting_report_2026_03_02.csv",
		"settlement_detail_report_batch_.csv", "../settlement_detail_report_batch_1.csv"} {
		_, ok := adyen.SettlementReportBatch(name)
		require.False(t, ok, name)
	}
}

// TestReportAvailableEffects: a settlement details report's REPORT_AVAILABLE
// asks for its download; any other report is acknowledged and ignored; an
// announcement whose URL does not name its file can never be applied.
func TestReportAvailableEffects(t *testing.T) {
	t.Parallel()
	sim := adyensim.New(adyensim.Config{Seed: 3})
	item := sim.ReportAvailable("settlement_detail_report_batch_12.csv")
	fx, err := adyen.Effects(simJSON(t, item))
	require.NoError(t, err)
	require.Equal(t, []provider.ReportNotice{{FileName: "settlement_detail_report_batch_12.csv", URL: item.Reason, Batch: 12}}, fx.Reports)
	require.Empty(t, fx.PaymentID)
	require.Empty(t, fx.Postings)
	require.Contains(t, item.Reason, "https://ca-test.adyen.com/reports/download/MerchantAccount/")

	other := sim.ReportAvailable("payments_accounting_report_2026_03_02.csv")
	_, err = adyen.Effects(simJSON(t, other))
	require.ErrorIs(t, err, provider.ErrIgnored)

	for name, reason := range map[string]string{
		"no URL":           "",
		"another file":     "https://ca-test.adyen.com/reports/download/MerchantAccount/M/settlement_detail_report_batch_13.csv",
		"credentials":      "https://user:pw@ca-test.adyen.com/reports/download/MerchantAccount/M/settlement_detail_report_batch_12.csv",
		"another protocol": "ftp://ca-test.adyen.com/settlement_detail_report_batch_12.csv",
		"a relative URL":   "settlement_detail_report_batch_12.csv",
	} {
		it := item
		it.Reason = reason
		_, err := adyen.Effects(simJSON(t, sim.Sign(it)))
		require.ErrorIs(t, err, provider.ErrPermanent, name)
	}
}
