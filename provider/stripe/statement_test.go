package stripe_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
)

// feeLineType is the Type of a balance transaction's fee line, the one
// reconciliation's totals tell fees by.
const feeLineType = "fee"

func TestLinesDeriveTheWorkersRefs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		bt       provider.BalanceTransaction
		refs     []string
		kinds    []ledger.Kind
		feeLines int
	}{
		{"charge with its fee", provider.BalanceTransaction{ID: "txn_1", Type: "charge", ReportingCategory: "charge", SourceID: "ch_1", Amount: 10000, Fee: 320},
			[]string{"stripe:charge:ch_1:capture", "stripe:fee:txn_1"}, []ledger.Kind{ledger.KindCapture, ledger.KindFee}, 1},
		{"payment type is a charge", provider.BalanceTransaction{ID: "txn_2", Type: "payment", ReportingCategory: "charge", SourceID: "py_1", Amount: 500},
			[]string{"stripe:charge:py_1:capture"}, []ledger.Kind{ledger.KindCapture}, 0},
		{"refund", provider.BalanceTransaction{ID: "txn_3", Type: "refund", ReportingCategory: "refund", SourceID: "re_1", Amount: -2000},
			[]string{"stripe:refund:re_1"}, []ledger.Kind{ledger.KindRefund}, 0},
		{"refund failure", provider.BalanceTransaction{ID: "txn_4", Type: "refund_failure", ReportingCategory: "refund_failure", SourceID: "re_1", Amount: 2000},
			[]string{"stripe:refund:re_1:reversal"}, []ledger.Kind{ledger.KindRefundReversal}, 0},
		{"dispute withdrawal with its fee", provider.BalanceTransaction{ID: "txn_5", Type: "adjustment", ReportingCategory: "dispute", SourceID: "dp_1", Amount: -7000, Fee: 1500},
			[]string{"stripe:dispute:dp_1:withdrawal", "stripe:fee:txn_5"}, []ledger.Kind{ledger.KindDisputeWithdrawal, ledger.KindFee}, 1},
		{"dispute reinstatement refunds its fee", provider.BalanceTransaction{ID: "txn_6", Type: "adjustment", ReportingCategory: "dispute_reversal", SourceID: "dp_1", Amount: 7000, Fee: -1500},
			[]string{"stripe:dispute:dp_1:reinstatement", "stripe:fee:txn_6"}, []ledger.Kind{ledger.KindDisputeReinstatement, ledger.KindFee}, 1},
		{"payout", provider.BalanceTransaction{ID: "txn_7", Type: "payout", ReportingCategory: "payout", SourceID: "po_1", Amount: -1000},
			[]string{"stripe:payout:po_1"}, []ledger.Kind{ledger.KindPayout}, 0},
		{"payout failure", provider.BalanceTransaction{ID: "txn_8", Type: "payout_failure", ReportingCategory: "payout_reversal", SourceID: "po_1", Amount: 1000},
			[]string{"stripe:payout:po_1:reversal"}, []ledger.Kind{ledger.KindPayoutReversal}, 0},
		{"standalone stripe fee", provider.BalanceTransaction{ID: "txn_9", Type: "stripe_fee", ReportingCategory: "fee", Amount: -75},
			[]string{"stripe:fee:txn_9"}, []ledger.Kind{ledger.KindFee}, 0},
		{"other adjustment has no ref", provider.BalanceTransaction{ID: "txn_10", Type: "adjustment", ReportingCategory: "other_adjustment", Amount: 500},
			[]string{""}, []ledger.Kind{""}, 0},
		{"charge without source has no ref", provider.BalanceTransaction{ID: "txn_11", Type: "charge", ReportingCategory: "charge", Amount: 500},
			[]string{""}, []ledger.Kind{""}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lines := stripe.StatementLines(c.bt)
			var refs []string
			var kinds []ledger.Kind
			fees := 0
			for _, l := range lines {
				refs, kinds = append(refs, l.Ref), append(kinds, l.Kind)
				if l.Type == feeLineType {
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
		src, txn, ok := stripe.SourceOfRef(ref)
		require.True(t, ok, ref)
		require.Equal(t, want, [2]string{src, txn}, ref)
	}
	for _, ref := range []string{"manual:1", "stripe:", "stripe:charge", "stripe:unknown:x"} {
		_, _, ok := stripe.SourceOfRef(ref)
		require.False(t, ok, ref)
	}
}
