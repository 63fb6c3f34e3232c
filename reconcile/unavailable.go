package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/paygate/paygate/provider"
)

// Unavailable is a Provider named name whose every API call fails with err
// (wrapped in ErrProvider): what a server without the provider's API key
// reconciles with, so that a requested run fails with the reason instead
// of the server refusing to start. Its records map to nothing.
func Unavailable(name string, err error) Provider { return unavailable{name: name, err: err} }

type unavailable struct {
	name string
	err  error
}

func (u unavailable) fail() error { return fmt.Errorf("%w: %w", ErrProvider, u.err) }

func (u unavailable) Name() string { return u.name }

func (u unavailable) Lines(BalanceTransaction) []provider.StatementLine { return nil }

func (u unavailable) Owns(string) bool { return false }

func (u unavailable) SourceOfRef(string) (string, string, bool) { return "", "", false }

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
