package ledger_test

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/ledger"
)

var t0 = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

func d(s string) decimal.Decimal { return decimal.RequireFromString(s) }

func TestConstructorsFollowThePostingRules(t *testing.T) {
	t.Parallel()
	amt := d("12.34")
	for _, tc := range []struct {
		txn           ledger.Transaction
		kind          ledger.Kind
		debit, credit ledger.Account
		payment       string
	}{
		{ledger.NewCapture("r", "pi", "evt", "usd", amt, t0), ledger.KindCapture, ledger.AccountProviderBalance, ledger.AccountSales, "pi"},
		{ledger.NewCaptureReversal("r", "pi", "evt", "usd", amt, t0), ledger.KindAdjustment, ledger.AccountSales, ledger.AccountProviderBalance, "pi"},
		{ledger.NewRefund("r", "pi", "evt", "usd", amt, t0), ledger.KindRefund, ledger.AccountRefunds, ledger.AccountProviderBalance, "pi"},
		{ledger.NewRefundReversal("r", "pi", "evt", "usd", amt, t0), ledger.KindRefundReversal, ledger.AccountProviderBalance, ledger.AccountRefunds, "pi"},
		{ledger.NewDisputeWithdrawal("r", "pi", "evt", "usd", amt, t0), ledger.KindDisputeWithdrawal, ledger.AccountDisputeLosses, ledger.AccountProviderBalance, "pi"},
		{ledger.NewDisputeReinstatement("r", "pi", "evt", "usd", amt, t0), ledger.KindDisputeReinstatement, ledger.AccountProviderBalance, ledger.AccountDisputeLosses, "pi"},
		{ledger.NewPayout("r", "evt", "usd", amt, t0), ledger.KindPayout, ledger.AccountPayoutsInTransit, ledger.AccountProviderBalance, ""},
		{ledger.NewPayoutReversal("r", "evt", "usd", amt, t0), ledger.KindPayoutReversal, ledger.AccountProviderBalance, ledger.AccountPayoutsInTransit, ""},
		{ledger.NewFee("r", "pi", "evt", "usd", amt, t0), ledger.KindFee, ledger.AccountFees, ledger.AccountProviderBalance, "pi"},
	} {
		require.NoError(t, tc.txn.Validate(), tc.kind)
		require.Equal(t, tc.kind, tc.txn.Kind)
		require.Equal(t, tc.payment, tc.txn.PaymentID)
		require.Equal(t, "evt", tc.txn.EventID)
		require.True(t, tc.txn.Amount().Equal(amt))
		require.Len(t, tc.txn.Entries, 2)
		require.Equal(t, tc.debit, tc.txn.Entries[0].Account, tc.kind)
		require.True(t, tc.txn.Entries[0].Debit.Equal(amt))
		require.True(t, tc.txn.Entries[0].Credit.IsZero())
		require.Equal(t, tc.credit, tc.txn.Entries[1].Account, tc.kind)
		require.True(t, tc.txn.Entries[1].Credit.Equal(amt))
		require.True(t, tc.txn.Entries[1].Debit.IsZero())
	}
}

// invalidTransactions are refused by Validate, and so by PostTx before any
// SQL runs.
func invalidTransactions() []struct {
	name string
	txn  ledger.Transaction
	want []error
} {
	capture := func(amount string) ledger.Transaction {
		return ledger.NewCapture("cap_1", "pi_1", "evt_1", "usd", d(amount), t0)
	}
	with := func(txn ledger.Transaction, f func(*ledger.Transaction)) ledger.Transaction {
		f(&txn)
		return txn
	}
	adjustment := func(entries ...ledger.Entry) ledger.Transaction {
		return ledger.Transaction{Ref: "adj_1", Kind: ledger.KindAdjustment, Currency: "usd", OccurredAt: t0, Entries: entries}
	}
	return []struct {
		name string
		txn  ledger.Transaction
		want []error
	}{
		{"empty ref", with(capture("1"), func(t *ledger.Transaction) { t.Ref = " " }), []error{ledger.ErrInvalidTransaction}},
		{"no time", with(capture("1"), func(t *ledger.Transaction) { t.OccurredAt = time.Time{} }), []error{ledger.ErrInvalidTransaction}},
		{"unknown kind", with(capture("1"), func(t *ledger.Transaction) { t.Kind = "chargeback" }), []error{ledger.ErrInvalidKind}},
		{"uppercase currency", with(capture("1"), func(t *ledger.Transaction) { t.Currency = "USD" }), []error{ledger.ErrUnknownCurrency}},
		{"unknown currency", with(capture("1"), func(t *ledger.Transaction) { t.Currency = "xyz" }), []error{ledger.ErrUnknownCurrency}},
		{"no entries", adjustment(), []error{ledger.ErrInvalidEntries}},
		{"zero amount", capture("0"), []error{ledger.ErrInvalidAmount}},
		{"negative amount", capture("-5"), []error{ledger.ErrInvalidAmount, ledger.ErrNegativeAmount}},
		{"finer than cents", capture("1.005"), []error{ledger.ErrInvalidAmount}},
		{"fractional yen", with(capture("1.5"), func(t *ledger.Transaction) { t.Currency = "jpy" }), []error{ledger.ErrInvalidAmount}},
		{"both sides", adjustment(
			ledger.Entry{Account: ledger.AccountBank, Debit: d("1"), Credit: d("1")},
			ledger.Debit(ledger.AccountFees, d("1")), ledger.Credit(ledger.AccountSales, d("1")),
		), []error{ledger.ErrInvalidAmount}},
		{"unknown account", adjustment(ledger.Debit("cash", d("1")), ledger.Credit(ledger.AccountSales, d("1"))), []error{ledger.ErrInvalidAccount}},
		{"unbalanced", adjustment(ledger.Debit(ledger.AccountBank, d("10.00")), ledger.Credit(ledger.AccountSales, d("9.99"))), []error{ledger.ErrUnbalanced}},
		{"capture backwards", with(capture("1"), func(t *ledger.Transaction) {
			t.Entries = []ledger.Entry{ledger.Debit(ledger.AccountSales, d("1")), ledger.Credit(ledger.AccountProviderBalance, d("1"))}
		}), []error{ledger.ErrInvalidEntries}},
		{"capture split", with(capture("1"), func(t *ledger.Transaction) {
			t.Entries = append(t.Entries, ledger.Debit(ledger.AccountFees, d("1")), ledger.Credit(ledger.AccountSales, d("1")))
		}), []error{ledger.ErrInvalidEntries}},
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range invalidTransactions() {
		err := tc.txn.Validate()
		for _, want := range tc.want {
			require.ErrorIs(t, err, want, tc.name)
		}
	}

	adj := ledger.Transaction{
		Ref: "adj", Kind: ledger.KindAdjustment, Currency: "kwd", OccurredAt: t0,
		Entries: []ledger.Entry{
			ledger.Debit(ledger.AccountBank, d("1.230")),
			ledger.Debit(ledger.AccountFees, d("0.004")),
			ledger.Credit(ledger.AccountPayoutsInTransit, d("1.234")),
		},
	}
	require.NoError(t, adj.Validate())
	require.Equal(t, "1.234", ledger.Format(adj.Amount(), "kwd"))
}

// A constructor's output is valid for every positive amount a provider can
// report in every currency, and invalid for zero.
func TestConstructorsValidProperty(t *testing.T) {
	t.Parallel()
	currencies := ledger.Currencies()
	rapid.Check(t, func(t *rapid.T) {
		currency := rapid.SampledFrom(currencies).Draw(t, "currency")
		minor := rapid.Int64Min(0).Draw(t, "minor")
		amount, err := ledger.FromMinor(minor, currency)
		if err != nil {
			t.Fatalf("FromMinor: %v", err)
		}
		for _, txn := range []ledger.Transaction{
			ledger.NewCapture("r", "pi", "e", currency, amount, t0),
			ledger.NewRefund("r", "pi", "e", currency, amount, t0),
			ledger.NewRefundReversal("r", "pi", "e", currency, amount, t0),
			ledger.NewDisputeWithdrawal("r", "pi", "e", currency, amount, t0),
			ledger.NewDisputeReinstatement("r", "pi", "e", currency, amount, t0),
			ledger.NewPayout("r", "e", currency, amount, t0),
			ledger.NewPayoutReversal("r", "e", currency, amount, t0),
			ledger.NewFee("r", "pi", "e", currency, amount, t0),
		} {
			err := txn.Validate()
			if minor == 0 && err == nil {
				t.Fatalf("%s of zero %s accepted", txn.Kind, currency)
			}
			if minor > 0 && err != nil {
				t.Fatalf("%s of %s %s refused: %v", txn.Kind, amount, currency, err)
			}
		}
	})
}
