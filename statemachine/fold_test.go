package statemachine_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	sm "github.com/paygate/paygate/statemachine"
)

func TestFold(t *testing.T) {
	t.Parallel()

	type want struct {
		state                                sm.State
		currency                             string
		amount, captured, refunded, disputed string
	}
	tests := []struct {
		name  string
		facts []sm.Fact // in arrival order; every other order is checked too
		want  want
	}{
		{
			name: "no facts",
			want: want{sm.StateProcessing, "", "0", "0", "0", "0"},
		},
		{
			name:  "processing",
			facts: []sm.Fact{usd(sm.FactProcessing, "pi_1", ""), usd(sm.FactAmountKnown, "pi_1", "360.00")},
			want:  want{sm.StateProcessing, "usd", "360.00", "0.00", "0.00", "0.00"},
		},
		{
			name: "full refund before success",
			facts: []sm.Fact{
				usd(sm.FactRefundSucceeded, "re_1", "360.00"),
				usd(sm.FactCaptured, "ch_1", "360.00"),
				usd(sm.FactAmountKnown, "pi_1", "360.00"),
			},
			want: want{sm.StateRefunded, "usd", "360.00", "360.00", "360.00", "0.00"},
		},
		{
			name: "late success after full refund stays refunded",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "360.00"),
				usd(sm.FactRefundSucceeded, "re_1", "360.00"),
				usd(sm.FactCaptured, "ch_1", "360.00"),
				usd(sm.FactPaymentFailed, "ch_0", ""),
			},
			want: want{sm.StateRefunded, "usd", "360.00", "360.00", "360.00", "0.00"},
		},
		{
			name: "payment_failed after succeeded",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "50.00"),
				usd(sm.FactPaymentFailed, "ch_1", ""),
			},
			want: want{sm.StateSucceeded, "usd", "50.00", "50.00", "0.00", "0.00"},
		},
		{
			name: "dispute closed lost before created",
			facts: []sm.Fact{
				usd(sm.FactDisputeClosedLost, "dp_1", "50.00"),
				usd(sm.FactDisputeFundsWithdrawn, "dp_1", "50.00"),
				usd(sm.FactDisputeOpened, "dp_1", "50.00"),
				usd(sm.FactCaptured, "ch_1", "50.00"),
			},
			want: want{sm.StateDisputeLost, "usd", "50.00", "50.00", "0.00", "50.00"},
		},
		{
			name: "refund failed before refund succeeded",
			facts: []sm.Fact{
				usd(sm.FactRefundFailed, "re_1", "20.00"),
				usd(sm.FactRefundSucceeded, "re_1", "20.00"),
				usd(sm.FactCaptured, "ch_1", "50.00"),
			},
			want: want{sm.StateSucceeded, "usd", "50.00", "50.00", "0.00", "0.00"},
		},
		{
			name: "refund failing after a full refund reverses it",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "50.00"),
				usd(sm.FactRefundSucceeded, "re_1", "50.00"),
				usd(sm.FactRefundFailed, "re_1", "50.00"),
			},
			want: want{sm.StateSucceeded, "usd", "50.00", "50.00", "0.00", "0.00"},
		},
		{
			name: "one of two refunds failed",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "50.00"),
				usd(sm.FactRefundSucceeded, "re_1", "50.00"),
				usd(sm.FactRefundSucceeded, "re_2", "10.00"),
				usd(sm.FactRefundFailed, "re_1", "50.00"),
			},
			want: want{sm.StatePartiallyRefunded, "usd", "50.00", "50.00", "10.00", "0.00"},
		},
		{
			name: "dispute won after withdrawal and reinstatement",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "50.00"),
				usd(sm.FactDisputeOpened, "dp_1", "50.00"),
				usd(sm.FactDisputeFundsWithdrawn, "dp_1", "50.00"),
				usd(sm.FactDisputeFundsReinstated, "dp_1", "50.00"),
				usd(sm.FactDisputeClosedWon, "dp_1", "50.00"),
			},
			want: want{sm.StateSucceeded, "usd", "50.00", "50.00", "0.00", "0.00"},
		},
		{
			name: "won dispute holds nothing before its reinstatement arrives",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "50.00"),
				usd(sm.FactDisputeFundsWithdrawn, "dp_1", "50.00"),
				usd(sm.FactDisputeClosedWon, "dp_1", ""),
			},
			want: want{sm.StateSucceeded, "usd", "50.00", "50.00", "0.00", "0.00"},
		},
		{
			name: "funds withdrawn without an opened fact is an open dispute",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "50.00"),
				usd(sm.FactDisputeFundsWithdrawn, "dp_1", "50.00"),
			},
			want: want{sm.StateDisputed, "usd", "50.00", "50.00", "0.00", "50.00"},
		},
		{
			name: "open dispute partly reinstated",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "50.00"),
				usd(sm.FactDisputeFundsWithdrawn, "dp_1", "50.00"),
				usd(sm.FactDisputeFundsReinstated, "dp_1", "20.00"),
			},
			want: want{sm.StateDisputed, "usd", "50.00", "50.00", "0.00", "30.00"},
		},
		{
			name: "a second dispute stays open after the first is won",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "50.00"),
				usd(sm.FactDisputeFundsWithdrawn, "dp_1", "50.00"),
				usd(sm.FactDisputeClosedWon, "dp_1", ""),
				usd(sm.FactDisputeOpened, "dp_2", ""),
			},
			want: want{sm.StateDisputed, "usd", "50.00", "50.00", "0.00", "0.00"},
		},
		{
			name: "lost dispute beats a full refund",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "50.00"),
				usd(sm.FactRefundSucceeded, "re_1", "50.00"),
				usd(sm.FactDisputeClosedLost, "dp_1", ""),
			},
			want: want{sm.StateDisputeLost, "usd", "50.00", "50.00", "50.00", "0.00"},
		},
		{
			name: "canceled",
			facts: []sm.Fact{
				usd(sm.FactProcessing, "pi_1", ""),
				usd(sm.FactAuthorized, "pi_1", "75.00"),
				usd(sm.FactCanceled, "pi_1", ""),
				usd(sm.FactPaymentFailed, "ch_1", ""),
			},
			want: want{sm.StateCanceled, "usd", "75.00", "0.00", "0.00", "0.00"},
		},
		{
			name: "requires_capture",
			facts: []sm.Fact{
				usd(sm.FactProcessing, "pi_1", ""),
				usd(sm.FactAuthorized, "pi_1", "75.00"),
				usd(sm.FactPaymentFailed, "ch_0", ""),
			},
			want: want{sm.StateRequiresCapture, "usd", "75.00", "0.00", "0.00", "0.00"},
		},
		{
			name: "partial capture of an authorization",
			facts: []sm.Fact{
				usd(sm.FactAuthorized, "pi_1", "75.00"),
				usd(sm.FactCaptured, "ch_1", "60.00"),
			},
			want: want{sm.StateSucceeded, "usd", "75.00", "60.00", "0.00", "0.00"},
		},
		{
			name:  "failed",
			facts: []sm.Fact{usd(sm.FactProcessing, "pi_1", ""), usd(sm.FactPaymentFailed, "ch_0", "")},
			want:  want{sm.StateFailed, "", "0", "0", "0", "0"},
		},
		{
			name: "partial refunds",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "100.00"),
				usd(sm.FactRefundSucceeded, "re_1", "30.00"),
				usd(sm.FactRefundSucceeded, "re_2", "20.00"),
				usd(sm.FactRefundSucceeded, "re_1", "30.00"),
			},
			want: want{sm.StatePartiallyRefunded, "usd", "100.00", "100.00", "50.00", "0.00"},
		},
		{
			name: "partial refunds that add up to the capture",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "100.00"),
				usd(sm.FactRefundSucceeded, "re_1", "30.00"),
				usd(sm.FactRefundSucceeded, "re_2", "20.00"),
				usd(sm.FactRefundSucceeded, "re_3", "50.00"),
			},
			want: want{sm.StateRefunded, "usd", "100.00", "100.00", "100.00", "0.00"},
		},
		{
			name: "refund seen before any capture",
			facts: []sm.Fact{
				usd(sm.FactRefundSucceeded, "re_1", "30.00"),
			},
			want: want{sm.StatePartiallyRefunded, "usd", "0.00", "0.00", "30.00", "0.00"},
		},
		{
			name: "refunded floor raises the total, never adds to it",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "100.00"),
				usd(sm.FactRefundSucceeded, "re_1", "40.00"),
				usd(sm.FactRefundedFloor, "ch_1", "40.00"),
				usd(sm.FactRefundedFloor, "ch_1", "100.00"),
			},
			want: want{sm.StateRefunded, "usd", "100.00", "100.00", "100.00", "0.00"},
		},
		{
			name: "refunded floor below the listed refunds",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "100.00"),
				usd(sm.FactRefundSucceeded, "re_1", "40.00"),
				usd(sm.FactRefundSucceeded, "re_2", "20.00"),
				usd(sm.FactRefundedFloor, "ch_1", "40.00"),
			},
			want: want{sm.StatePartiallyRefunded, "usd", "100.00", "100.00", "60.00", "0.00"},
		},
		{
			name: "a refund failure lowers a total reported without its refunds",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "100.00"),
				usd(sm.FactRefundedFloor, "ch_1", "100.00"),
				usd(sm.FactRefundFailed, "re_1", "100.00"),
			},
			want: want{sm.StateSucceeded, "usd", "100.00", "100.00", "0.00", "0.00"},
		},
		{
			name: "a failed refund is taken out of a total that held two refunds",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "100.00"),
				usd(sm.FactRefundedFloor, "ch_1", "100.00"),
				usd(sm.FactRefundFailed, "re_1", "60.00"),
			},
			want: want{sm.StatePartiallyRefunded, "usd", "100.00", "100.00", "40.00", "0.00"},
		},
		{
			name: "a total counts what no known refund explains",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "100.00"),
				usd(sm.FactRefundSucceeded, "re_1", "30.00"),
				usd(sm.FactRefundedFloor, "ch_1", "100.00"),
			},
			want: want{sm.StateRefunded, "usd", "100.00", "100.00", "100.00", "0.00"},
		},
		{
			name: "a total reported before its refund failed, the refund reported after",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "100.00"),
				usd(sm.FactRefundedFloor, "ch_1", "100.00"),
				usd(sm.FactRefundSucceeded, "re_1", "100.00"),
				usd(sm.FactRefundFailed, "re_1", "100.00"),
			},
			want: want{sm.StateSucceeded, "usd", "100.00", "100.00", "0.00", "0.00"},
		},
		{
			name: "the same capture reported twice counts once",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "100.00"),
				withEvent(usd(sm.FactCaptured, "ch_1", "100.00"), "evt_other"),
			},
			want: want{sm.StateSucceeded, "usd", "100.00", "100.00", "0.00", "0.00"},
		},
		{
			name: "one charge reported with two amounts keeps the larger",
			facts: []sm.Fact{
				usd(sm.FactCaptured, "ch_1", "60.00"),
				usd(sm.FactCaptured, "ch_1", "100.00"),
			},
			want: want{sm.StateSucceeded, "usd", "100.00", "100.00", "0.00", "0.00"},
		},
		{
			name: "captures of two charges add up",
			facts: []sm.Fact{
				usd(sm.FactAmountKnown, "pi_1", "80.00"),
				usd(sm.FactCaptured, "ch_1", "60.00"),
				usd(sm.FactCaptured, "ch_2", "40.00"),
			},
			want: want{sm.StateSucceeded, "usd", "100.00", "100.00", "0.00", "0.00"},
		},
		{
			name: "zero-decimal currency",
			facts: []sm.Fact{
				in("jpy", sm.FactCaptured, "ch_1", "5000"),
				in("jpy", sm.FactRefundSucceeded, "re_1", "1200"),
			},
			want: want{sm.StatePartiallyRefunded, "jpy", "5000", "5000", "1200", "0"},
		},
		{
			name: "three-decimal currency",
			facts: []sm.Fact{
				in("bhd", sm.FactCaptured, "ch_1", "1.250"),
				in("bhd", sm.FactDisputeFundsWithdrawn, "dp_1", "1.250"),
				in("bhd", sm.FactDisputeClosedLost, "dp_1", ""),
			},
			want: want{sm.StateDisputeLost, "bhd", "1.250", "1.250", "0.000", "1.250"},
		},
		{
			// decimal.Max would return whichever 10.00/10.0/10.000 came
			// first; the summary must not tell which one that was.
			name: "equal amounts at different scales print alike in any order",
			facts: []sm.Fact{
				usd(sm.FactAmountKnown, "pi_1", "10.0"),
				usd(sm.FactCaptured, "ch_1", "10.00"),
				usd(sm.FactCaptured, "ch_1", "10.000"),
				usd(sm.FactRefundedFloor, "ch_1", "10.0"),
			},
			want: want{sm.StateRefunded, "usd", "10.000", "10.000", "10.000", "0.000"},
		},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := tt.want
			wantSummary := render(sm.Summary{
				State: w.state, Currency: w.currency,
				Amount: dec(w.amount), AmountCaptured: dec(w.captured),
				AmountRefunded: dec(w.refunded), AmountDisputed: dec(w.disputed),
			})
			permutations(tt.facts, func(order []sm.Fact) {
				require.Equal(t, wantSummary, render(sm.Fold(order)), "order %s", show(order))
				// Every fact delivered twice, the copies in reverse order.
				twice := append(append([]sm.Fact(nil), order...), reversed(order)...)
				require.Equal(t, wantSummary, render(sm.Fold(twice)), "order %s", show(twice))
			})
		})
	}
}

// TestFoldOrderFree is invariant 3 of ARCHITECTURE.md for the state machine:
// any permutation and duplication of a fact set folds to the same summary,
// printed the same way. Each rapid case checks 50 orderings, so the default
// 100 cases are 5000 orderings; run `go test -rapid.checks=5000` for more.
func TestFoldOrderFree(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		facts := genFacts(0, 14).Draw(t, "facts")
		want := sm.Fold(facts)
		wantText := render(want)
		for i := range 50 {
			order := rapid.Permutation(facts).Draw(t, "order")
			if len(facts) > 0 {
				for _, j := range rapid.SliceOfN(rapid.IntRange(0, len(facts)-1), 0, 6).Draw(t, "duplicates") {
					k := rapid.IntRange(0, len(order)).Draw(t, "at")
					order = append(order[:k], append([]sm.Fact{facts[j]}, order[k:]...)...)
				}
			}
			got := sm.Fold(order)
			if text := render(got); text != wantText {
				t.Fatalf("ordering %d folds differently:\nfacts    %s\n  give   %s\nordering %s\n  gives  %s",
					i, show(facts), wantText, show(order), text)
			}
			// Byte-for-byte equal too, so testify's Equal works on summaries.
			require.Equal(t, want, got, "facts %s, ordering %s", show(facts), show(order))
		}
	})
}

// TestFoldInvariants checks what must hold of every summary, whatever the
// facts: amounts are never negative and the state agrees with the amounts.
func TestFoldInvariants(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		facts := genFacts(0, 14).Draw(t, "facts")
		s := sm.Fold(facts)
		msg := "facts " + show(facts) + " → " + render(s)
		for _, a := range []struct {
			name string
			sign int
		}{
			{"amount", s.Amount.Sign()}, {"captured", s.AmountCaptured.Sign()},
			{"refunded", s.AmountRefunded.Sign()}, {"disputed", s.AmountDisputed.Sign()},
		} {
			require.GreaterOrEqual(t, a.sign, 0, "%s is negative: %s", a.name, msg)
		}
		require.True(t, s.Amount.GreaterThanOrEqual(s.AmountCaptured), msg)
		switch s.State {
		case sm.StateRefunded:
			require.True(t, s.AmountCaptured.IsPositive() && s.AmountRefunded.GreaterThanOrEqual(s.AmountCaptured), msg)
		case sm.StatePartiallyRefunded:
			require.True(t, s.AmountRefunded.IsPositive(), msg)
			require.True(t, s.AmountCaptured.IsZero() || s.AmountRefunded.LessThan(s.AmountCaptured), msg)
		case sm.StateSucceeded:
			require.True(t, s.AmountCaptured.IsPositive() && s.AmountRefunded.IsZero(), msg)
		case sm.StateCanceled, sm.StateRequiresCapture, sm.StateFailed, sm.StateProcessing:
			require.True(t, s.AmountCaptured.IsZero() && s.AmountRefunded.IsZero(), msg)
			require.True(t, s.AmountDisputed.IsZero(), msg)
		}
	})
}

func reversed(facts []sm.Fact) []sm.Fact {
	r := make([]sm.Fact, len(facts))
	for i, f := range facts {
		r[len(facts)-1-i] = f
	}
	return r
}
