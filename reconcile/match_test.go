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
	striperef "github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

var t0 = time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)

// lines are a Stripe balance transaction's lines, as the runner pairs
// them with their record.
func lines(bt reconcile.BalanceTransaction) []reconcile.Line {
	return reconcile.LinesOf(bt, striperef.StatementLines(bt))
}

func capture(ref, currency, amount string) ledger.Transaction {
	return ledger.NewCapture(ref, "pi_1", "evt_1", currency, decimal.RequireFromString(amount), t0)
}

func TestCompare(t *testing.T) {
	t.Parallel()
	bt := reconcile.BalanceTransaction{ID: "txn_1", Type: "charge", ReportingCategory: "charge", SourceID: "ch_1", Currency: "usd", Amount: 10000, Fee: 320, Created: t0}
	main := lines(bt)[0]

	tx := capture("stripe:charge:ch_1:capture", "usd", "100.00")
	it := reconcile.Compare(main, &tx)
	require.Equal(t, reconcile.StatusMatched, it.Status)
	require.Equal(t, []string{"matched", "txn_1", "ch_1", "stripe:charge:ch_1:capture", "charge", "usd", "100.00", "3.20", "100.00", "", "", ""}, it.Record()[:12])
	require.Equal(t, []string{"", "", "pi_1", "", "", "", "", "", ""}, it.Record()[12:],
		"not stored yet: no id; the ledger transaction's payment; no resolution; no reference until stored")

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
	it = reconcile.Compare(lines(rbt)[0], &refund)
	require.Equal(t, reconcile.StatusMatched, it.Status)
	require.Equal(t, []string{"-500", "0", "-500"}, it.Record()[6:9])

	// Three-decimal currencies keep their scale.
	kbt := reconcile.BalanceTransaction{ID: "txn_3", Type: "charge", ReportingCategory: "charge", SourceID: "ch_k", Currency: "kwd", Amount: 1234, Fee: 5, Created: t0}
	ktx := capture("stripe:charge:ch_k:capture", "kwd", "1.234")
	require.Equal(t, []string{"1.234", "0.005", "1.234"}, reconcile.Compare(lines(kbt)[0], &ktx).Record()[6:9])
}

func TestFeeTransaction(t *testing.T) {
	t.Parallel()
	charged := lines(reconcile.BalanceTransaction{ID: "txn_w", Type: "adjustment", ReportingCategory: "dispute", SourceID: "dp_1", Currency: "usd", Amount: -7000, Fee: 1500, Created: t0})[1]
	fee := reconcile.FeeTransaction(charged, "pi_1", reconcile.PostedBy(7))
	require.NoError(t, fee.Validate())
	require.Equal(t, ledger.KindFee, fee.Kind)
	require.Equal(t, "stripe:fee:txn_w", fee.Ref)
	require.Equal(t, "15.00", ledger.Format(fee.Amount(), "usd"))
	require.Equal(t, "-15.00", ledger.Format(reconcile.Effect(fee), "usd"))
	require.Equal(t, "pi_1", fee.PaymentID)
	require.Equal(t, "reconciliation_run:7", fee.EventID, "the ledger says which run booked it")

	refunded := lines(reconcile.BalanceTransaction{ID: "txn_r", Type: "adjustment", ReportingCategory: "dispute_reversal", SourceID: "dp_1", Currency: "usd", Amount: 7000, Fee: -1500, Created: t0})[1]
	back := reconcile.FeeTransaction(refunded, "", reconcile.PostedBy(7))
	require.NoError(t, back.Validate())
	require.Equal(t, ledger.KindAdjustment, back.Kind, "a refunded fee is Dr provider_balance, Cr fees")
	require.Equal(t, "15.00", ledger.Format(reconcile.Effect(back), "usd"))
	require.Equal(t, reconcile.StatusMatched, reconcile.Compare(refunded, &back).Status)
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
			"presentment_currency", "presentment_amount", "exchange_rate",
			"id", "run_id", "payment_id", "resolution", "note", "resolved_by", "resolved_at", "adjustment_ref", "reference"},
		{"fee_posted", "txn_1", "ch_1", "stripe:fee:txn_1", "fee", "usd", "-3.20", "", "-3.20", "", "", "", "", "", "", "", "", "", "", "", ""},
		{"missing_in_ledger", "txn_2", "", "", "adjustment", "usd", "-3.20", "-3.20", "", "", "", "", "", "", "", "", "", "", "", "", ""},
	}, rows)

	// A resolved exception carries its resolution, note and all, quoted
	// where the note needs it.
	buf.Reset()
	resolvedAt := time.Date(2025, 3, 15, 10, 30, 0, 123000000, time.UTC)
	require.NoError(t, reconcile.WriteCSV(&buf, []reconcile.Item{{
		ID: 42, RunID: 7, Status: reconcile.StatusAmountMismatch, ProviderTxnID: "txn_3", Type: "charge", Currency: "usd",
		ProviderAmount: &v, LedgerAmount: &v, PaymentID: "pi_3", Reference: "order 3, \"gift\"",
		Resolution: &reconcile.Resolution{Kind: reconcile.ResolutionWriteOff, Note: "rounding, \"per FIN-7\"", ResolvedBy: "alice",
			ResolvedAt: resolvedAt, AdjustmentRef: "reconciliation:write_off:stripe:charge:ch_3:capture"},
	}}))
	rows, err = csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{"42", "7", "pi_3", "write_off", `rounding, "per FIN-7"`, "alice", "2025-03-15T10:30:00.123Z",
		"reconciliation:write_off:stripe:charge:ch_3:capture", `order 3, "gift"`}, rows[1][12:])
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
