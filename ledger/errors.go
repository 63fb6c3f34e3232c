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

	// ErrPeriodClosed: the database refused a transaction posted in a
	// closed period. PostManyTx never posts one there; a posting that
	// raced a close in a way the database could not order (another
	// isolation level, SQL of one's own) gets it, and succeeds when tried
	// again. Not permanent.
	ErrPeriodClosed = errors.New("ledger: posted in a closed period")
	// ErrInvalidPeriod: not a period, which is a UTC calendar month
	// written YYYY-MM.
	ErrInvalidPeriod = errors.New("ledger: invalid period")
	// ErrPeriodNotEnded: a period that has not ended cannot be closed.
	ErrPeriodNotEnded = errors.New("ledger: period has not ended")
	// ErrPeriodOrder: periods close in order, and this one is not next.
	ErrPeriodOrder = errors.New("ledger: periods close in order")
	// ErrPeriodNotClosed: the period is open, and what was asked needs it
	// closed (its frozen journal export).
	ErrPeriodNotClosed = errors.New("ledger: period is not closed")
	// ErrInvalidGLAccounts: a PAYGATE_GL_ACCOUNTS value that is not a
	// list of account=code.
	ErrInvalidGLAccounts = errors.New("ledger: invalid GL account codes")
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

// PeriodOrderError reports a close out of order: Next must be closed
// first. It matches ErrPeriodOrder with errors.Is.
type PeriodOrderError struct {
	Period, Next Period
}

func (e *PeriodOrderError) Error() string {
	return fmt.Sprintf("ledger: periods close in order: close %s before %s", e.Next, e.Period)
}

// Is makes errors.Is(err, ErrPeriodOrder) hold.
func (e *PeriodOrderError) Is(target error) bool { return target == ErrPeriodOrder }
