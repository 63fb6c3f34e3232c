// Package statemachine owns a payment's states, the facts that providers
// report about it, the allowed transitions between states and the fold that
// turns a set of facts into a payment summary.
//
// Providers deliver webhooks at least once and in any order, so a payment's
// state is never "the last event's state": it is a pure function of the set
// of facts seen so far ([Fold]). Any permutation or duplication of the same
// facts gives the same [Summary], which is how a refund that arrives before
// the capture is applied and a late success can never move a refunded
// payment back to succeeded.
//
// The package must never do I/O, read the clock or import anything from the
// project: it is the bottom of the dependency graph and is tested without a
// database.
package statemachine

// State is a payment's status as the API shows it. It is stored in the
// database, so the string values are stable.
type State string

// The states, in the precedence order the fold applies: the first that
// matches a fact set wins.
const (
	// StateDisputeLost means a dispute was closed lost. Nothing leaves this
	// state: a lost dispute is final whatever else arrives.
	StateDisputeLost State = "dispute_lost"
	// StateDisputed means a dispute is open (seen, not closed won or lost).
	StateDisputed State = "disputed"
	// StateRefunded means refunded ≥ captured > 0.
	StateRefunded State = "refunded"
	// StatePartiallyRefunded means refunded > 0, but not fully.
	StatePartiallyRefunded State = "partially_refunded"
	// StateSucceeded means captured > 0 and nothing above applies; a won
	// dispute or refunds that all failed fall back here.
	StateSucceeded State = "succeeded"
	// StateCanceled means the payment was canceled and nothing was captured.
	StateCanceled State = "canceled"
	// StateRequiresCapture means authorized and not captured.
	StateRequiresCapture State = "requires_capture"
	// StateFailed means an attempt failed and nothing better is known.
	StateFailed State = "failed"
	// StateProcessing means nothing decisive is known yet; it is the state
	// of the empty fact set.
	StateProcessing State = "processing"
)

// States lists every state, in precedence order.
var States = []State{
	StateDisputeLost, StateDisputed, StateRefunded, StatePartiallyRefunded, StateSucceeded,
	StateCanceled, StateRequiresCapture, StateFailed, StateProcessing,
}
