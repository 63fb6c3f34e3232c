package statemachine

import (
	"fmt"
	"time"
)

// Transition is one row of a payment's state history, for display: the
// state moved from From to To when the fact from event EventID (provider
// time At) was folded in. History is written in processing order, unlike the
// state itself, which depends only on the set of facts.
type Transition struct {
	From    State
	To      State
	EventID string
	At      time.Time
}

// NewTransition returns the history row for a payment whose state was from
// before fact f was folded in and is to after, and whether to write it: only
// a change of state is history, so a duplicate or a late fact that the fold
// absorbs writes nothing. The zero from means the payment had no state yet,
// and its first state is recorded as a row from "".
func NewTransition(from, to State, f Fact) (Transition, bool) {
	return Transition{From: from, To: to, EventID: f.EventID, At: f.At}, from != to
}

// allowed lists, for each state, every state a payment in it can reach when
// facts are added to its set (one or several at once: one webhook event can
// yield several facts). It is derived from Fold, not wished for, and
// transition_test.go checks it both ways: an exhaustive search over a small
// universe of facts finds exactly these pairs, and random fact sets never
// leave the table. Every state can stay where it is (a duplicate fact).
//
// Some rows look backwards and are not bugs: a refund_failed undoes a
// refund (refunded → succeeded, or all the way back to processing when
// nothing was captured), a capture_failed undoes a capture (succeeded or
// refunded → whatever lay beneath: requires_capture, canceled, failed,
// processing), and a dispute closed won uncovers whatever the payment was
// underneath (disputed → anything). What can never happen is forgetting an
// authorization, a cancellation or a failure, or leaving dispute_lost; and
// only a capture_failed loses a capture.
var allowed = map[State][]State{
	StateProcessing: {StateProcessing, StateRequiresCapture, StateSucceeded, StatePartiallyRefunded,
		StateRefunded, StateDisputed, StateDisputeLost, StateCanceled, StateFailed},
	StateRequiresCapture: {StateRequiresCapture, StateSucceeded, StatePartiallyRefunded,
		StateRefunded, StateDisputed, StateDisputeLost, StateCanceled},
	StateSucceeded: {StateProcessing, StateRequiresCapture, StateSucceeded, StatePartiallyRefunded,
		StateRefunded, StateDisputed, StateDisputeLost, StateCanceled, StateFailed},
	// A refund seen before any capture is partially_refunded; if it then
	// fails, whatever lay beneath (even processing) shows again.
	StatePartiallyRefunded: {StateProcessing, StateRequiresCapture, StateSucceeded, StatePartiallyRefunded,
		StateRefunded, StateDisputed, StateDisputeLost, StateCanceled, StateFailed},
	StateRefunded: {StateProcessing, StateRequiresCapture, StateSucceeded, StatePartiallyRefunded,
		StateRefunded, StateDisputed, StateDisputeLost, StateCanceled, StateFailed},
	StateDisputed: {StateProcessing, StateRequiresCapture, StateSucceeded, StatePartiallyRefunded,
		StateRefunded, StateDisputed, StateDisputeLost, StateCanceled, StateFailed},
	StateDisputeLost: {StateDisputeLost},
	StateCanceled: {StateSucceeded, StatePartiallyRefunded, StateRefunded, StateDisputed,
		StateDisputeLost, StateCanceled},
	StateFailed: {StateRequiresCapture, StateSucceeded, StatePartiallyRefunded, StateRefunded,
		StateDisputed, StateDisputeLost, StateCanceled, StateFailed},
}

// Allowed reports whether a payment in state from can be in state to after
// more facts are added to its set. The zero from (no state yet) is
// processing, the state of the empty set. Unknown states are never allowed.
func Allowed(from, to State) bool {
	if from == "" {
		from = StateProcessing
	}
	for _, s := range allowed[from] {
		if s == to {
			return true
		}
	}
	return false
}

// TransitionError is a from → to pair that [Allowed] rejects, seen while
// folding in a fact of kind Fact. The fold cannot produce one from a growing
// fact set, so it means the stored state or the fact set is corrupt (or the
// fold has a bug): a case for an operator, not a retry.
type TransitionError struct {
	From State
	To   State
	Fact FactKind
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("statemachine: %s → %s on %s is not a transition adding facts can make",
		e.From, e.To, e.Fact)
}

// CheckTransition returns a *TransitionError when a payment cannot move from
// from to to by adding facts, kind being the fact (or the first of the
// event's facts) that was folded in; otherwise nil.
func CheckTransition(from, to State, kind FactKind) error {
	if Allowed(from, to) {
		return nil
	}
	return &TransitionError{From: from, To: to, Fact: kind}
}
