package reconcile_test

import (
	"bytes"
	"encoding/csv"
	"errors"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/reconcile"
)

var t0 = time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)

func TestLinesDeriveTheWorkersRefs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		bt       reconcile.BalanceTransaction
		refs     []string
		kinds    []ledger.Kind
		feeLines int
	}{
		{"charge with its fee", reconcile.BalanceTransaction{ID: "txn_1", Type: "charge", ReportingCategory: "charge", SourceID: "ch_1", Amount: 10000, Fee: 320},
			[]string{"stripe:charge:ch_1:capture", "stripe:fee:txn_1"}, []ledger.Kind{ledger.KindCapture, ledger.KindFee}, 1},
		{"payment type is a charge", reconcile.BalanceTransaction{ID: "txn_2", Type: "payment", ReportingCategory: "charge", SourceID: "py_1", Amount: 500},
			[]string{"stripe:charge:py_1:capture"}, []ledger.Kind{ledger.KindCapture}, 0},
		{"refund", reconcile.BalanceTransaction{ID: "txn_3", Type: "refund", ReportingCategory: "refund", SourceID: "re_1", Amount: -2000},
			[]string{"stripe:refund:re_1"}, []ledger.Kind{ledger.KindRefund}, 0},
		{"refund failure", reconcile.BalanceTransaction{ID: "txn_4", Type: "refund_failure", ReportingCategory: "refund_failure", SourceID: "re_1", Amount: 2000},
			[]string{"stripe:refund:re_1:reversal"}, []ledger.Kind{ledger.KindRefundReversal}, 0},
		{"dispute withdrawal with its fee", reconcile.BalanceTransaction{ID: "txn_5", Type: "adjustment", ReportingCategory: "dispute", SourceID: "dp_1", Amount: -7000, Fee: 1500},
			[]string{"stripe:dispute:dp_1:withdrawal", "stripe:fee:txn_5"}, []ledger.Kind{ledger.KindDisputeWithdrawal, ledger.KindFee}, 1},
		{"dispute reinstatement refunds its fee", reconcile.BalanceTransaction{ID: "txn_6", Type: "adjustment", ReportingCategory: "dispute_reversal", SourceID: "dp_1", Amount: 7000, Fee: -1500},
			[]string{"stripe:dispute:dp_1:reinstatement", "stripe:fee:txn_6"}, []ledger.Kind{ledger.KindDisputeReinstatement, ledger.KindFee}, 1},
		{"payout", reconcile.BalanceTransaction{ID: "txn_7", Type: "payout", ReportingCategory: "payout", SourceID: "po_1", Amount: -1000},
			[]string{"stripe:payout:po_1"}, []ledger.Kind{ledger.KindPayout}, 0},
		{"payout failure", reconcile.BalanceTransaction{ID: "txn_8", Type: "payout_failure", ReportingCategory: "payout_reversal", SourceID: "po_1", Amount: 1000},
			[]string{"stripe:payout:po_1:reversal"}, []ledger.Kind{ledger.KindPayoutReversal}, 0},
		{"standalone stripe fee", reconcile.BalanceTransaction{ID: "txn_9", Type: "stripe_fee", ReportingCategory: "fee", Amount: -75},
			[]string{"stripe:fee:txn_9"}, []ledger.Kind{ledger.KindFee}, 0},
		{"other adjustment has no ref", reconcile.BalanceTransaction{ID: "txn_10", Type: "adjustment", ReportingCategory: "other_adjustment", Amount: 500},
			[]string{""}, []ledger.Kind{""}, 0},
		{"charge without source has no ref", reconcile.BalanceTransaction{ID: "txn_11", Type: "charge", ReportingCategory: "charge", Amount: 500},
			[]string{""}, []ledger.Kind{""}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := reconcile.Lines(c.bt)
			var refs []string
			var kinds []ledger.Kind
			fees := 0
			for _, l := range lines {
				refs, kinds = append(refs, l.Ref), append(kinds, l.Kind)
				if l.Type == reconcile.TypeFee {
					fees++
					require.Equal(t, -c.bt.Fee, l.Amount, "a fee line moves the fee out of the balance")
					require.Nil(t, l.FeeColumn, "the fee is counted once, on its record's line")
				}
			}
			require.Equal(t, c.refs, refs)
			require.Equal(t, c.kinds, kinds)
			require.Equal(t, c.feeLines, fees)
		})
	}
}

func capture(ref, currency, amount string) ledger.Transaction {
	return ledger.NewCapture(ref, "pi_1", "evt_1", currency, decimal.RequireFromString(amount), t0)
}

func TestCompare(t *testing.T) {
	t.Parallel()
	bt := reconcile.BalanceTransaction{ID: "txn_1", Type: "charge", ReportingCategory: "charge", SourceID: "ch_1", Currency: "usd", Amount: 10000, Fee: 320, Created: t0}
	main := reconcile.Lines(bt)[0]

	tx := capture("stripe:charge:ch_1:capture", "usd", "100.00")
	it := reconcile.Compare(main, &tx)
	require.Equal(t, reconcile.StatusMatched, it.Status)
	require.Equal(t, []string{"matched", "txn_1", "ch_1", "stripe:charge:ch_1:capture", "charge", "usd", "100.00", "3.20", "100.00", "", "", ""}, it.Record())

	wrong := capture("stripe:charge:ch_1:capture", "usd", "99.99")
	require.Equal(t, reconcile.StatusAmountMismatch, reconcile.Compare(main, &wrong).Status)

	eur := capture("stripe:charge:ch_1:capture", "eur", "100.00")
	it = reconcile.Compare(main, &eur)
	require.Equal(t, reconcile.StatusCurrencyMismatch, it.Status)
	require.Equal(t, "eur", it.LedgerCurrency)

	it = reconcile.Compare(main, nil)
	require.Equal(t, reconcile.StatusMissingInLedger, it.Status)
	require.Equal(t, "", it.Record()[8], "no ledger amount: an empty cell")

	// Outflows compare by absolute amount and show the provider's sign on
	// both sides.
	rbt := reconcile.BalanceTransaction{ID: "txn_2", Type: "refund", ReportingCategory: "refund", SourceID: "re_1", Currency: "jpy", Amount: -500, Created: t0}
	refund := ledger.NewRefund("stripe:refund:re_1", "pi_1", "evt_2", "jpy", decimal.RequireFromString("500"), t0)
	it = reconcile.Compare(reconcile.Lines(rbt)[0], &refund)
	require.Equal(t, reconcile.StatusMatched, it.Status)
	require.Equal(t, []string{"-500", "0", "-500"}, it.Record()[6:9])

	// Three-decimal currencies keep their scale.
	kbt := reconcile.BalanceTransaction{ID: "txn_3", Type: "charge", ReportingCategory: "charge", SourceID: "ch_k", Currency: "kwd", Amount: 1234, Fee: 5, Created: t0}
	ktx := capture("stripe:charge:ch_k:capture", "kwd", "1.234")
	require.Equal(t, []string{"1.234", "0.005", "1.234"}, reconcile.Compare(reconcile.Lines(kbt)[0], &ktx).Record()[6:9])
}

func TestFeeTransaction(t *testing.T) {
	t.Parallel()
	charged := reconcile.Lines(reconcile.BalanceTransaction{ID: "txn_w", Type: "adjustment", ReportingCategory: "dispute", SourceID: "dp_1", Currency: "usd", Amount: -7000, Fee: 1500, Created: t0})[1]
	fee := reconcile.FeeTransaction(charged, "pi_1", reconcile.PostedBy(7))
	require.NoError(t, fee.Validate())
	require.Equal(t, ledger.KindFee, fee.Kind)
	require.Equal(t, "stripe:fee:txn_w", fee.Ref)
	require.Equal(t, "15.00", ledger.Format(fee.Amount(), "usd"))
	require.Equal(t, "-15.00", ledger.Format(reconcile.Effect(fee), "usd"))
	require.Equal(t, "pi_1", fee.PaymentID)
	require.Equal(t, "reconciliation_run:7", fee.EventID, "the ledger says which run booked it")

	refunded := reconcile.Lines(reconcile.BalanceTransaction{ID: "txn_r", Type: "adjustment", ReportingCategory: "dispute_reversal", SourceID: "dp_1", Currency: "usd", Amount: 7000, Fee: -1500, Created: t0})[1]
	back := reconcile.FeeTransaction(refunded, "", reconcile.PostedBy(7))
	require.NoError(t, back.Validate())
	require.Equal(t, ledger.KindAdjustment, back.Kind, "a refunded fee is Dr provider_balance, Cr fees")
	require.Equal(t, "15.00", ledger.Format(reconcile.Effect(back), "usd"))
	require.Equal(t, reconcile.StatusMatched, reconcile.Compare(refunded, &back).Status)
}

func TestSourceOfRef(t *testing.T) {
	t.Parallel()
	for ref, want := range map[string][2]string{
		"stripe:charge:ch_1:capture":        {"ch_1", ""},
		"stripe:refund:re_1":                {"re_1", ""},
		"stripe:refund:re_1:reversal":       {"re_1", ""},
		"stripe:dispute:dp_1:withdrawal":    {"dp_1", ""},
		"stripe:dispute:dp_1:reinstatement": {"dp_1", ""},
		"stripe:payout:po_1":                {"po_1", ""},
		"stripe:payout:po_1:reversal":       {"po_1", ""},
		"stripe:fee:txn_1":                  {"", "txn_1"},
	} {
		src, txn, ok := reconcile.SourceOfRef(ref)
		require.True(t, ok, ref)
		require.Equal(t, want, [2]string{src, txn}, ref)
	}
	for _, ref := range []string{"manual:1", "stripe:", "stripe:charge", "stripe:unknown:x"} {
		_, _, ok := reconcile.SourceOfRef(ref)
		require.False(t, ok, ref)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	d := func(s string) *decimal.Decimal { v := decimal.RequireFromString(s); return &v }
	items := []reconcile.Item{
		{Status: reconcile.StatusMatched, Type: "charge", ReportingCategory: "charge", Currency: "usd", ProviderAmount: d("100.00"), ProviderFee: d("3.20"), LedgerAmount: d("100.00")},
		{Status: reconcile.StatusFeePosted, Type: "fee", ReportingCategory: "charge", Currency: "usd", ProviderAmount: d("-3.20"), LedgerAmount: d("-3.20")},
		{Status: reconcile.StatusAmountMismatch, Type: "charge", ReportingCategory: "charge", Currency: "usd", ProviderAmount: d("41.00"), ProviderFee: d("1.49"), LedgerAmount: d("40.00")},
		{Status: reconcile.StatusMissingAtProvider, Type: "capture", ReportingCategory: "charge", Currency: "usd", LedgerAmount: d("15.00")},
		{Status: reconcile.StatusCurrencyMismatch, Type: "charge", ReportingCategory: "charge", Currency: "usd", ProviderAmount: d("25.00"), ProviderFee: d("0"), LedgerAmount: d("25.00"), LedgerCurrency: "eur"},
		{Status: reconcile.StatusMatched, Type: "refund", ReportingCategory: "refund", Currency: "jpy", ProviderAmount: d("-500"), ProviderFee: d("0"), LedgerAmount: d("-500")},
	}
	summary, cur := reconcile.Summarize(items)
	require.Equal(t, map[reconcile.Status]int{"matched": 2, "amount_mismatch": 1, "currency_mismatch": 1,
		"missing_in_ledger": 0, "missing_at_provider": 1, "fee_posted": 1}, summary)
	require.Len(t, cur, 2)
	require.Equal(t, "jpy", cur[0].Currency)
	require.Equal(t, reconcile.CategoryTotal{ReportingCategory: "refund", ProviderGross: "-500", ProviderFee: "0", ProviderNet: "-500",
		LedgerGross: "-500", LedgerFee: "0", LedgerNet: "-500", Difference: "0"}, cur[0].Categories[0])
	usd := cur[1].Categories[0]
	require.Equal(t, reconcile.CategoryTotal{ReportingCategory: "charge",
		ProviderGross: "166.00", ProviderFee: "4.69", ProviderNet: "161.31",
		// The currency mismatch's ledger amount is in another currency: left out.
		LedgerGross: "155.00", LedgerFee: "3.20", LedgerNet: "151.80",
		Difference: "9.51"}, usd)
	require.Equal(t, "total", cur[1].Total.ReportingCategory)
	require.Equal(t, usd.Difference, cur[1].Total.Difference)
}

func TestWriteCSV(t *testing.T) {
	t.Parallel()
	v := decimal.RequireFromString("-3.2")
	var buf bytes.Buffer
	require.NoError(t, reconcile.WriteCSV(&buf, []reconcile.Item{
		{Status: reconcile.StatusFeePosted, ProviderTxnID: "txn_1", SourceID: "ch_1", Ref: "stripe:fee:txn_1", Type: "fee", Currency: "usd", ProviderAmount: &v, LedgerAmount: &v},
		{Status: reconcile.StatusMissingInLedger, ProviderTxnID: "txn_2", Type: "adjustment", Currency: "usd", ProviderAmount: &v, ProviderFee: &v},
	}))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Equal(t, [][]string{
		{"status", "provider_txn_id", "source_id", "ref", "type", "currency", "provider_amount", "provider_fee", "ledger_amount",
			"presentment_currency", "presentment_amount", "exchange_rate"},
		{"fee_posted", "txn_1", "ch_1", "stripe:fee:txn_1", "fee", "usd", "-3.20", "", "-3.20", "", "", ""},
		{"missing_in_ledger", "txn_2", "", "", "adjustment", "usd", "-3.20", "-3.20", "", "", "", ""},
	}, rows)
}

func TestParseDate(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 15, 1, 0, 0, 0, time.UTC)
	d, err := reconcile.ParseDate("2025-03-14", now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC), d)
	_, err = reconcile.ParseDate("2025-03-15", now)
	require.NoError(t, err, "today is allowed: a partial day")
	_, err = reconcile.ParseDate("2025-03-16", now)
	require.True(t, errors.Is(err, reconcile.ErrFutureDate), "%v", err)
	for _, bad := range []string{"", "2025-3-14", "2025-02-30", "14/03/2025", "2025-03-14T00:00:00Z", " 2025-03-14"} {
		_, err := reconcile.ParseDate(bad, now)
		require.True(t, errors.Is(err, reconcile.ErrInvalidDate), "%q: %v", bad, err)
	}
}
