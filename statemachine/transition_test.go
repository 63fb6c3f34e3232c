package statemachine_test

import (
	"errors"
	"fmt"
	"math/bits"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	sm "github.com/paygate/paygate/statemachine"
)

// wantAllowed is the transition table written out by hand, rows from and
// columns to in the order of states: DL D R PR S C RC F P. "x" is allowed.
var wantAllowed = map[sm.State]string{
	//                         DL D R PR S C RC F P
	sm.StateDisputeLost:       "x . . .  . . .  . .",
	sm.StateDisputed:          "x x x x  x x x  x x",
	sm.StateRefunded:          "x x x x  x x x  x x",
	sm.StatePartiallyRefunded: "x x x x  x x x  x x",
	sm.StateSucceeded:         "x x x x  x x x  x x",
	sm.StateCanceled:          "x x x x  x x .  . .",
	sm.StateRequiresCapture:   "x x x x  x x x  . .",
	sm.StateFailed:            "x x x x  x x x  x .",
	sm.StateProcessing:        "x x x x  x x x  x x",
}

func wantPair(t *testing.T, from, to sm.State) bool {
	t.Helper()
	var cells []bool
	for _, c := range wantAllowed[from] {
		switch c {
		case 'x':
			cells = append(cells, true)
		case '.':
			cells = append(cells, false)
		}
	}
	require.Len(t, cells, len(states), "row %s", from)
	for i, s := range states {
		if s == to {
			return cells[i]
		}
	}
	t.Fatalf("unknown state %s", to)
	return false
}

func TestAllowed(t *testing.T) {
	t.Parallel()
	for _, from := range states {
		for _, to := range states {
			t.Run(fmt.Sprintf("%s→%s", from, to), func(t *testing.T) {
				t.Parallel()
				want := wantPair(t, from, to)
				require.Equal(t, want, sm.Allowed(from, to))

				err := sm.CheckTransition(from, to, sm.FactCaptured)
				if want {
					require.NoError(t, err)
					return
				}
				var terr *sm.TransitionError
				require.ErrorAs(t, err, &terr)
				require.Equal(t, sm.TransitionError{From: from, To: to, Fact: sm.FactCaptured}, *terr)
				require.EqualError(t, err, fmt.Sprintf(
					"statemachine: %s → %s on captured is not a transition adding facts can make", from, to))
			})
		}
	}

	t.Run("no state yet is processing", func(t *testing.T) {
		t.Parallel()
		for _, to := range states {
			require.Equal(t, sm.Allowed(sm.StateProcessing, to), sm.Allowed("", to), to)
		}
	})
	t.Run("unknown states are never allowed", func(t *testing.T) {
		t.Parallel()
		require.False(t, sm.Allowed("settled", sm.StateSucceeded))
		require.False(t, sm.Allowed(sm.StateSucceeded, "settled"))
		require.False(t, sm.Allowed(sm.StateSucceeded, ""))
		var terr *sm.TransitionError
		require.True(t, errors.As(sm.CheckTransition(sm.StateSucceeded, "settled", sm.FactCanceled), &terr))
	})
}

// universe is a small set of facts rich enough to reach every transition
// the fold can make: two captures so a capture can undo "refunded", and a
// failure of one of them, two
// refunds and a failure of one, a floor, a dispute that can be won or lost
// and a second, open one.
var universe = []sm.Fact{
	usd(sm.FactAuthorized, "pi_1", "100.00"),
	usd(sm.FactCaptured, "ch_1", "100.00"),
	usd(sm.FactCaptured, "ch_2", "50.00"),
	usd(sm.FactCaptureFailed, "ch_2", "50.00"),
	usd(sm.FactPaymentFailed, "ch_0", ""),
	usd(sm.FactCanceled, "pi_1", ""),
	usd(sm.FactRefundSucceeded, "re_1", "100.00"),
	usd(sm.FactRefundSucceeded, "re_2", "30.00"),
	usd(sm.FactRefundFailed, "re_1", "100.00"),
	usd(sm.FactRefundedFloor, "ch_1", "30.00"),
	usd(sm.FactDisputeOpened, "dp_1", ""),
	usd(sm.FactDisputeClosedWon, "dp_1", ""),
	usd(sm.FactDisputeClosedLost, "dp_1", ""),
	usd(sm.FactDisputeFundsWithdrawn, "dp_2", "50.00"),
}

func subset(mask uint) []sm.Fact {
	var facts []sm.Fact
	for i, f := range universe {
		if mask&(1<<i) != 0 {
			facts = append(facts, f)
		}
	}
	return facts
}

type pair struct{ from, to sm.State }

// TestTransitionTableMatchesFold derives the transition table from the fold
// by brute force: it folds every subset S of universe and records
// state(S) → state(S') for every superset S'. The pairs found must be
// exactly the table, so the table neither forbids a move the fold makes (a
// false TransitionError would poison a good event) nor allows one it cannot.
//
// It also records the pairs that adding one single fact makes: they are the
// table minus eight pairs. Four need a capture and a refund together (as one
// charge.refunded event delivers them), which the table allows because the
// worker folds in all of an event's facts at once. Four need a capture
// failure and a refund failure (refunded → whatever lay beneath the
// capture): the table is what adding facts can reach, and a payment can
// reach them in two steps through partially_refunded.
func TestTransitionTableMatchesFold(t *testing.T) {
	t.Parallel()
	n := uint(len(universe))
	state := make([]sm.State, 1<<n)
	for mask := range uint(1 << n) {
		state[mask] = sm.Fold(subset(mask)).State
	}

	type witness struct{ base, added uint }
	many := map[pair]witness{}
	single := map[pair]witness{}
	for super := range uint(1 << n) {
		// Every submask of super, super itself included.
		for sub := super; ; sub = (sub - 1) & super {
			p := pair{state[sub], state[super]}
			w := witness{sub, super &^ sub}
			if old, ok := many[p]; !ok || bits.OnesCount(w.added) < bits.OnesCount(old.added) {
				many[p] = w
			}
			if bits.OnesCount(w.added) <= 1 {
				single[p] = w
			}
			if sub == 0 {
				break
			}
		}
	}

	onlyByMany := map[pair]bool{
		{sm.StateProcessing, sm.StateRefunded}:      true,
		{sm.StateRequiresCapture, sm.StateRefunded}: true,
		{sm.StateCanceled, sm.StateRefunded}:        true,
		{sm.StateFailed, sm.StateRefunded}:          true,
		{sm.StateRefunded, sm.StateProcessing}:      true,
		{sm.StateRefunded, sm.StateFailed}:          true,
		{sm.StateRefunded, sm.StateRequiresCapture}: true,
		{sm.StateRefunded, sm.StateCanceled}:        true,
	}
	for _, from := range states {
		for _, to := range states {
			p := pair{from, to}
			w, found := many[p]
			if sm.Allowed(from, to) {
				require.True(t, found, "the table allows %s → %s but no facts added to any subset of %s make it",
					from, to, show(universe))
			} else {
				require.False(t, found, "the fold makes %s → %s, which the table forbids: %s plus %s",
					from, to, show(subset(w.base)), show(subset(w.added)))
			}
			_, bySingle := single[p]
			require.Equal(t, found && !onlyByMany[p], bySingle, "%s → %s by adding one fact", from, to)
		}
	}
}

// TestTransitionsStayInTable checks the table against the fold on random
// facts, beyond the small universe: a random fact set, then random facts
// added one at a time, never makes a move the table forbids, one fact at a
// time or all at once. Each rapid case tries 20 extensions, so the default
// 100 cases are 2000 extensions.
func TestTransitionsStayInTable(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		cur := rapid.SampledFrom(currencies).Draw(t, "currency")
		base := rapid.SliceOfN(genFact(cur.code, cur.exp), 0, 12).Draw(t, "base")
		start := sm.Fold(base).State
		for range 20 {
			added := rapid.SliceOfN(genFact(cur.code, cur.exp), 1, 4).Draw(t, "added")
			facts := append([]sm.Fact(nil), base...)
			from := start
			for _, f := range added {
				facts = append(facts, f)
				to := sm.Fold(facts).State
				if err := sm.CheckTransition(from, to, f.Kind); err != nil {
					t.Fatalf("%v\nfacts %s\nthen  %s", err, show(facts[:len(facts)-1]), show([]sm.Fact{f}))
				}
				from = to
			}
			if err := sm.CheckTransition(start, from, added[0].Kind); err != nil {
				t.Fatalf("%v\nfacts %s\nthen  %s", err, show(base), show(added))
			}
		}
	})
}

// TestBackwardLookingTransitions names the moves that look like going
// backwards and are the contract, so nobody "fixes" them in the table.
func TestBackwardLookingTransitions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		base     []sm.Fact
		added    sm.Fact
		from, to sm.State
	}{
		{
			name:  "a refund failing after success reverses it",
			base:  []sm.Fact{usd(sm.FactCaptured, "ch_1", "10.00"), usd(sm.FactRefundSucceeded, "re_1", "10.00")},
			added: usd(sm.FactRefundFailed, "re_1", "10.00"),
			from:  sm.StateRefunded, to: sm.StateSucceeded,
		},
		{
			name:  "a second capture makes a full refund partial",
			base:  []sm.Fact{usd(sm.FactCaptured, "ch_1", "10.00"), usd(sm.FactRefundSucceeded, "re_1", "10.00")},
			added: usd(sm.FactCaptured, "ch_2", "5.00"),
			from:  sm.StateRefunded, to: sm.StatePartiallyRefunded,
		},
		{
			name:  "an early refund that fails leaves the authorization",
			base:  []sm.Fact{usd(sm.FactAuthorized, "pi_1", "10.00"), usd(sm.FactRefundSucceeded, "re_1", "10.00")},
			added: usd(sm.FactRefundFailed, "re_1", "10.00"),
			from:  sm.StatePartiallyRefunded, to: sm.StateRequiresCapture,
		},
		{
			name:  "a won dispute uncovers the refund",
			base:  []sm.Fact{usd(sm.FactCaptured, "ch_1", "10.00"), usd(sm.FactRefundSucceeded, "re_1", "4.00"), usd(sm.FactDisputeOpened, "dp_1", "")},
			added: usd(sm.FactDisputeClosedWon, "dp_1", ""),
			from:  sm.StateDisputed, to: sm.StatePartiallyRefunded,
		},
		{
			name:  "a won dispute on nothing else is processing",
			base:  []sm.Fact{usd(sm.FactDisputeOpened, "dp_1", "")},
			added: usd(sm.FactDisputeClosedWon, "dp_1", ""),
			from:  sm.StateDisputed, to: sm.StateProcessing,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.from, sm.Fold(tt.base).State)
			require.Equal(t, tt.to, sm.Fold(append(tt.base, tt.added)).State)
			require.NoError(t, sm.CheckTransition(tt.from, tt.to, tt.added.Kind))
		})
	}
}

func TestNewTransition(t *testing.T) {
	t.Parallel()
	f := usd(sm.FactRefundSucceeded, "re_1", "10.00")
	tests := []struct {
		name     string
		from, to sm.State
		write    bool
	}{
		{"state changed", sm.StateSucceeded, sm.StateRefunded, true},
		{"state unchanged", sm.StateRefunded, sm.StateRefunded, false},
		{"first state of a new payment", "", sm.StateProcessing, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			row, write := sm.NewTransition(tt.from, tt.to, f)
			require.Equal(t, tt.write, write)
			require.Equal(t, sm.Transition{From: tt.from, To: tt.to, EventID: f.EventID, At: f.At}, row)
		})
	}
}
