package statemachine_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	"pgregory.net/rapid"

	sm "github.com/paygate/paygate/statemachine"
)

// states in the fold's precedence order, written out here rather than taken
// from the package so the tests notice a state added without its rows.
var states = []sm.State{
	sm.StateDisputeLost, sm.StateDisputed, sm.StateRefunded, sm.StatePartiallyRefunded,
	sm.StateSucceeded, sm.StateCanceled, sm.StateRequiresCapture, sm.StateFailed, sm.StateProcessing,
}

var kinds = []sm.FactKind{
	sm.FactProcessing, sm.FactAuthorized, sm.FactCaptured, sm.FactPaymentFailed, sm.FactCanceled,
	sm.FactRefundSucceeded, sm.FactRefundFailed, sm.FactDisputeOpened, sm.FactDisputeFundsWithdrawn,
	sm.FactDisputeFundsReinstated, sm.FactDisputeClosedWon, sm.FactDisputeClosedLost,
	sm.FactAmountKnown, sm.FactRefundedFloor,
}

// moneyKinds need an amount and a currency (see Validate).
var moneyKinds = map[sm.FactKind]bool{
	sm.FactAuthorized: true, sm.FactCaptured: true, sm.FactRefundSucceeded: true,
	sm.FactRefundFailed: true, sm.FactDisputeFundsWithdrawn: true,
	sm.FactDisputeFundsReinstated: true, sm.FactAmountKnown: true, sm.FactRefundedFloor: true,
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// usd builds a usd fact; amount "" means none.
func usd(kind sm.FactKind, id, amount string) sm.Fact {
	return in("usd", kind, id, amount)
}

func in(currency string, kind sm.FactKind, id, amount string) sm.Fact {
	f := sm.Fact{Kind: kind, ObjectID: id, EventID: "evt_" + string(kind) + "_" + id, At: t0}
	if amount != "" {
		f.Amount = decimal.RequireFromString(amount)
		f.Currency = currency
	}
	return f
}

func withEvent(f sm.Fact, eventID string) sm.Fact {
	f.EventID = eventID
	return f
}

func dec(s string) decimal.Decimal { return decimal.RequireFromString(s) }

// render prints a summary with every amount at its own scale, so two
// summaries render alike only if they are equal and written alike.
func render(s sm.Summary) string {
	return fmt.Sprintf("%s %q amount=%s captured=%s refunded=%s disputed=%s",
		s.State, s.Currency, fixed(s.Amount), fixed(s.AmountCaptured),
		fixed(s.AmountRefunded), fixed(s.AmountDisputed))
}

func fixed(d decimal.Decimal) string {
	return d.StringFixed(max(0, -d.Exponent()))
}

// show prints facts compactly for failure messages.
func show(facts []sm.Fact) string {
	parts := make([]string, len(facts))
	for i, f := range facts {
		parts[i] = string(f.Kind) + ":" + f.ObjectID
		if f.Currency != "" || !f.Amount.IsZero() {
			parts[i] += " " + fixed(f.Amount) + " " + f.Currency
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// permutations calls fn with every ordering of facts (Heap's algorithm).
func permutations(facts []sm.Fact, fn func([]sm.Fact)) {
	a := append([]sm.Fact(nil), facts...)
	c := make([]int, len(a))
	fn(append([]sm.Fact(nil), a...))
	for i := 0; i < len(a); {
		if c[i] < i {
			if i%2 == 0 {
				a[0], a[i] = a[i], a[0]
			} else {
				a[c[i]], a[i] = a[i], a[c[i]]
			}
			fn(append([]sm.Fact(nil), a...))
			c[i]++
			i = 0
		} else {
			c[i] = 0
			i++
		}
	}
}

// currencies with their exponents: zero-, two- and three-decimal.
var currencies = []struct {
	code string
	exp  int32
}{{"usd", 2}, {"jpy", 0}, {"bhd", 3}}

// genFacts draws the facts of one payment in one currency. Object ids come
// from small pools so that the same refund, capture or dispute is reported
// by several facts (with, now and then, a different amount or the same
// amount at a finer scale), which is where order and duplication bugs live.
func genFacts(minLen, maxLen int) *rapid.Generator[[]sm.Fact] {
	return rapid.Custom(func(t *rapid.T) []sm.Fact {
		cur := rapid.SampledFrom(currencies).Draw(t, "currency")
		return rapid.SliceOfN(genFact(cur.code, cur.exp), minLen, maxLen).Draw(t, "facts")
	})
}

func genFact(currency string, exp int32) *rapid.Generator[sm.Fact] {
	return rapid.Custom(func(t *rapid.T) sm.Fact {
		kind := rapid.SampledFrom(kinds).Draw(t, "kind")
		var pool []string
		switch kind {
		case sm.FactCaptured:
			pool = []string{"ch_1", "ch_2"}
		case sm.FactRefundSucceeded, sm.FactRefundFailed:
			pool = []string{"re_1", "re_2", "re_3"}
		case sm.FactDisputeOpened, sm.FactDisputeFundsWithdrawn, sm.FactDisputeFundsReinstated,
			sm.FactDisputeClosedWon, sm.FactDisputeClosedLost:
			pool = []string{"dp_1", "dp_2"}
		default:
			pool = []string{"pi_1"}
		}
		f := sm.Fact{
			Kind:     kind,
			ObjectID: rapid.SampledFrom(pool).Draw(t, "object"),
			EventID:  fmt.Sprintf("evt_%d", rapid.IntRange(1, 50).Draw(t, "event")),
			At:       t0.Add(time.Duration(rapid.IntRange(0, 3600).Draw(t, "second")) * time.Second),
		}
		if moneyKinds[kind] || rapid.Bool().Draw(t, "has amount") {
			minor := rapid.SampledFrom([]int64{100, 2500, 5000, 10000}).Draw(t, "minor")
			scale := exp
			if rapid.IntRange(0, 9).Draw(t, "finer scale") == 0 {
				// The same value with one more trailing zero: equal, but a
				// different decimal, as decimal.Max would happily return.
				minor, scale = minor*10, exp+1
			}
			f.Amount = decimal.New(minor, -scale)
			f.Currency = currency
		}
		return f
	})
}
