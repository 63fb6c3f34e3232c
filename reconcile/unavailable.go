package reconcile

import (
	"context"
	"fmt"
	"time"
)

// Unavailable is a Provider whose every call fails with err (wrapped in
// ErrProvider): what a server without PAYGATE_STRIPE_API_KEY reconciles
// with, so that a requested run fails with the reason instead of the server
// refusing to start.
func Unavailable(err error) Provider { return unavailable{err} }

type unavailable struct{ err error }

func (u unavailable) fail() error { return fmt.Errorf("%w: %w", ErrProvider, u.err) }

func (u unavailable) BalanceTransactions(context.Context, time.Time, time.Time) ([]BalanceTransaction, error) {
	return nil, u.fail()
}

func (u unavailable) BalanceTransactionsBySource(context.Context, string) ([]BalanceTransaction, error) {
	return nil, u.fail()
}

func (u unavailable) BalanceTransaction(context.Context, string) (BalanceTransaction, bool, error) {
	return BalanceTransaction{}, false, u.fail()
}

func (u unavailable) PayoutTransactions(context.Context, string) ([]BalanceTransaction, error) {
	return nil, u.fail()
}

func (u unavailable) Events(context.Context, time.Time, time.Time) ([]Event, error) {
	return nil, u.fail()
}
