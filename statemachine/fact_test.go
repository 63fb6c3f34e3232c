package statemachine_test

import (
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	sm "github.com/paygate/paygate/statemachine"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	noCurrency := func(f sm.Fact) sm.Fact { f.Currency = ""; return f }
	tests := []struct {
		name string
		fact sm.Fact
		want error
	}{
		{"capture", usd(sm.FactCaptured, "ch_1", "10.00"), nil},
		{"refund", usd(sm.FactRefundSucceeded, "re_1", "10.00"), nil},
		{"flag without amount", usd(sm.FactCanceled, "", ""), nil},
		{"dispute opened without amount", usd(sm.FactDisputeOpened, "dp_1", ""), nil},
		{"dispute opened with amount", usd(sm.FactDisputeOpened, "dp_1", "10.00"), nil},
		{"zero-decimal amount", in("jpy", sm.FactAmountKnown, "pi_1", "5000"), nil},
		{"unknown kind", usd("charge_settled", "ch_1", "10.00"), sm.ErrUnknownKind},
		{"empty kind", sm.Fact{}, sm.ErrUnknownKind},
		{"capture without charge id", usd(sm.FactCaptured, "", "10.00"), sm.ErrMissingObjectID},
		{"refund failure without refund id", usd(sm.FactRefundFailed, "", "10.00"), sm.ErrMissingObjectID},
		{"dispute closed without dispute id", usd(sm.FactDisputeClosedLost, "", ""), sm.ErrMissingObjectID},
		{"negative capture", usd(sm.FactCaptured, "ch_1", "-10.00"), sm.ErrNegativeAmount},
		{"negative amount on a flag", usd(sm.FactDisputeOpened, "dp_1", "-1"), sm.ErrNegativeAmount},
		{"capture without amount", usd(sm.FactCaptured, "ch_1", ""), sm.ErrMissingAmount},
		{"refund of zero", usd(sm.FactRefundSucceeded, "re_1", "0.00"), sm.ErrMissingAmount},
		{"floor of zero", usd(sm.FactRefundedFloor, "ch_1", "0"), sm.ErrMissingAmount},
		{"withdrawal without currency", noCurrency(usd(sm.FactDisputeFundsWithdrawn, "dp_1", "10.00")), sm.ErrMissingCurrency},
		{"amount on a flag without currency", noCurrency(usd(sm.FactDisputeClosedWon, "dp_1", "10.00")), sm.ErrMissingCurrency},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := sm.Validate(tt.fact)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
		})
	}

	t.Run("every money kind needs an amount and a currency", func(t *testing.T) {
		t.Parallel()
		for _, k := range kinds {
			f := sm.Fact{Kind: k, ObjectID: "x_1"}
			if moneyKinds[k] {
				require.ErrorIs(t, sm.Validate(f), sm.ErrMissingAmount, k)
				f.Amount = decimal.RequireFromString("1.00")
				require.ErrorIs(t, sm.Validate(f), sm.ErrMissingCurrency, k)
				f.Currency = "usd"
			}
			require.NoError(t, sm.Validate(f), k)
		}
	})
}

func TestGeneratedFactsAreValid(t *testing.T) {
	t.Parallel()
	// The property tests fold generated facts; they prove something only
	// if those are facts the worker would accept.
	rapid.Check(t, func(t *rapid.T) {
		facts := genFacts(1, 10).Draw(t, "facts")
		for i, f := range facts {
			require.NoError(t, sm.Validate(f), show([]sm.Fact{f}))
			require.NoError(t, sm.CheckCurrency(facts[:i], f))
		}
	})
}

func TestCheckCurrency(t *testing.T) {
	t.Parallel()
	existing := []sm.Fact{
		usd(sm.FactProcessing, "pi_1", ""),
		usd(sm.FactCaptured, "ch_1", "10.00"),
	}
	tests := []struct {
		name     string
		existing []sm.Fact
		fact     sm.Fact
		want     error
	}{
		{"same currency", existing, usd(sm.FactRefundSucceeded, "re_1", "1.00"), nil},
		{"first fact", nil, in("eur", sm.FactCaptured, "ch_1", "1.00"), nil},
		{"only facts without currency so far", existing[:1], in("eur", sm.FactCaptured, "ch_1", "1.00"), nil},
		{"fact without currency", existing, usd(sm.FactCanceled, "pi_1", ""), nil},
		{"other currency", existing, in("eur", sm.FactRefundSucceeded, "re_1", "1.00"), sm.ErrCurrencyMismatch},
		{"case differs", existing, in("USD", sm.FactRefundSucceeded, "re_1", "1.00"), sm.ErrCurrencyMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := sm.CheckCurrency(tt.existing, tt.fact)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
			require.Contains(t, err.Error(), tt.fact.Currency)
		})
	}
}

func TestKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fact sm.Fact
		want string
	}{
		{"capture is its charge", usd(sm.FactCaptured, "ch_1", "10.00"), "captured:ch_1"},
		{"refund success is its refund", usd(sm.FactRefundSucceeded, "re_1", "10.00"), "refund_succeeded:re_1"},
		{"refund failure is its refund", usd(sm.FactRefundFailed, "re_1", "10.00"), "refund_failed:re_1"},
		{"dispute fact is its dispute", usd(sm.FactDisputeFundsWithdrawn, "dp_1", "10.00"), "dispute_funds_withdrawn:dp_1"},
		{"flag", usd(sm.FactCanceled, "pi_1", ""), "canceled:pi_1"},
		{"observation holds its value", usd(sm.FactAmountKnown, "pi_1", "10.50"), "amount_known:pi_1:10.5"},
		{"floor holds its value", usd(sm.FactRefundedFloor, "ch_1", "30.00"), "refunded_floor:ch_1:30"},
		{"authorization holds its value", in("jpy", sm.FactAuthorized, "pi_1", "5000"), "authorized:pi_1:5000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.fact.Key())
		})
	}

	t.Run("redelivery and scale do not change the key", func(t *testing.T) {
		t.Parallel()
		a := usd(sm.FactRefundedFloor, "ch_1", "30.00")
		b := usd(sm.FactRefundedFloor, "ch_1", "30.0")
		b.EventID, b.At = "evt_other", t0.Add(time.Hour)
		require.Equal(t, a.Key(), b.Key())
	})
}

// TestKeyIgnoresDecimalSettings is not parallel: it flips process-wide
// settings of the decimal package, which another package of ours may set,
// and which a dedupe key must not follow.
func TestKeyIgnoresDecimalSettings(t *testing.T) {
	f := usd(sm.FactAmountKnown, "pi_1", "1500.00")
	want := f.Key()
	decimal.TrimTrailingZeros, decimal.UseScientificNotation = false, true
	t.Cleanup(func() { decimal.TrimTrailingZeros, decimal.UseScientificNotation = true, false })
	require.Equal(t, want, f.Key())
	require.Equal(t, "amount_known:pi_1:1500", want)
}
