package ledger

import (
	"errors"
	"fmt"
)

// Sentinel errors. The ErrInvalid… family, ErrUnbalanced, ErrUnknownCurrency
// and ErrNegativeAmount describe a Transaction that can never be posted, so a
// worker should treat them as permanent (poison), not retry them.
var (
	// ErrUnknownCurrency: the currency code is not one Exponent knows.
	ErrUnknownCurrency = errors.New("ledger: unknown currency")
	// ErrNegativeAmount: an amount below zero; direction is expressed by
	// the side of the entry, never by sign.
	ErrNegativeAmount = errors.New("ledger: negative amount")
	// ErrInvalidAmount: an entry amount that is zero on both sides, set on
	// both sides, negative, or finer than the currency's minor unit.
	ErrInvalidAmount = errors.New("ledger: invalid amount")
	// ErrInvalidTransaction: a transaction without a ref or an occurrence
	// time.
	ErrInvalidTransaction = errors.New("ledger: invalid transaction")
	// ErrInvalidKind: a kind outside the Kind list.
	ErrInvalidKind = errors.New("ledger: invalid kind")
	// ErrInvalidAccount: an account outside the chart of accounts.
	ErrInvalidAccount = errors.New("ledger: invalid account")
	// ErrInvalidEntries: no entries, or entries that do not follow the
	// posting rule of the transaction's kind.
	ErrInvalidEntries = errors.New("ledger: invalid entries")
	// ErrUnbalanced: debits and credits differ.
	ErrUnbalanced = errors.New("ledger: unbalanced transaction")
	// ErrRefConflict: the ref is already posted with different content.
	ErrRefConflict = errors.New("ledger: ref already posted with different content")
	// ErrNotFound: no transaction has that ref.
	ErrNotFound = errors.New("ledger: not found")
)

// RefConflictError reports that Ref is already in the ledger with content
// (kind, currency, payment or entries) different from what was posted. It
// matches ErrRefConflict with errors.Is. It means two facts were mapped to
// the same ref, or the provider reported one movement two ways: a human must
// look, so it is permanent.
type RefConflictError struct {
	Ref    string
	Detail string // what differs, e.g. `entries: stored [...], posted [...]`
}

func (e *RefConflictError) Error() string {
	return fmt.Sprintf("ledger: ref %q already posted with different content: %s", e.Ref, e.Detail)
}

// Is makes errors.Is(err, ErrRefConflict) hold.
func (e *RefConflictError) Is(target error) bool { return target == ErrRefConflict }
