package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
)

// Status is the outcome of one reconciliation item. Its value is stored and
// appears in the API and the CSV; never rename one.
type Status string

// The item statuses.
const (
	// StatusMatched: the provider's record and the ledger transaction with
	// its ref agree in currency and amount.
	StatusMatched Status = "matched"
	// StatusAmountMismatch: same ref and currency, different amount.
	StatusAmountMismatch Status = "amount_mismatch"
	// StatusCurrencyMismatch: same ref, different currency.
	StatusCurrencyMismatch Status = "currency_mismatch"
	// StatusMissingInLedger: the provider moved money that the ledger has no
	// transaction for.
	StatusMissingInLedger Status = "missing_in_ledger"
	// StatusMissingAtProvider: a ledger transaction of the day that the
	// provider has no record of, on that day or any other.
	StatusMissingAtProvider Status = "missing_at_provider"
	// StatusFeePosted: a provider fee the ledger lacked, posted by this run.
	StatusFeePosted Status = "fee_posted"
)

// Statuses lists every item status in report order.
var Statuses = []Status{
	StatusMatched, StatusAmountMismatch, StatusCurrencyMismatch,
	StatusMissingInLedger, StatusMissingAtProvider, StatusFeePosted,
}

// RunStatus is where a run stands.
type RunStatus string

// The run statuses. A run is created running and moves once, to completed or
// failed.
const (
	RunRunning   RunStatus = "running"
	RunCompleted RunStatus = "completed"
	RunFailed    RunStatus = "failed"
)

// Trigger is what started a run.
type Trigger string

// The triggers.
const (
	TriggerScheduled Trigger = "scheduled" // the daily periodic job; at most one per day
	TriggerAPI       Trigger = "api"       // POST /v1/reconciliation/runs
	TriggerCLI       Trigger = "cli"       // paygate reconcile --date
)

// Sentinel errors.
var (
	// ErrInvalidDate: not a YYYY-MM-DD calendar date.
	ErrInvalidDate = errors.New("invalid date: want YYYY-MM-DD")
	// ErrFutureDate: the day has not started yet in UTC.
	ErrFutureDate = errors.New("the date is in the future (UTC)")
	// ErrRunNotFound: no run has that id.
	ErrRunNotFound = errors.New("reconciliation run not found")
	// ErrRunFinished: the run already completed or failed; it never changes.
	ErrRunFinished = errors.New("reconciliation run already finished")
	// ErrUnavailable: this server cannot perform runs (no provider API
	// key): a run requested now would only fail.
	ErrUnavailable = errors.New("reconciliation is not available on this server")
	// ErrProvider: the provider's API failed; the run can be retried.
	ErrProvider = provider.ErrAPI
	// ErrProviderRefused: the provider refused a request as invalid (with
	// ErrProvider); a payout that cannot be listed by (a manual one) is.
	ErrProviderRefused = provider.ErrAPIRefused
)

// DateLayout is how days are written everywhere: 2025-03-14.
const DateLayout = time.DateOnly

// ParseDate parses a YYYY-MM-DD day to its midnight UTC. It fails with
// ErrInvalidDate, or ErrFutureDate for a day after now's (UTC). Today is
// accepted: its run compares what has happened so far, and the scheduled run
// after midnight is the complete one.
func ParseDate(s string, now time.Time) (time.Time, error) {
	d, err := time.Parse(DateLayout, s)
	if err != nil || d.Format(DateLayout) != s {
		return time.Time{}, fmt.Errorf("%w: %q", ErrInvalidDate, s)
	}
	if d.After(now.UTC()) {
		return time.Time{}, fmt.Errorf("%w: %s", ErrFutureDate, s)
	}
	return d, nil
}

// BalanceTransaction is the provider's record of one movement of its
// balance (see provider.BalanceTransaction).
type BalanceTransaction = provider.BalanceTransaction

// Event is one provider event as its list endpoint returned it (see
// provider.ListedEvent).
type Event = provider.ListedEvent

// Provider is the payment provider's API as reconciliation reads it;
// provider/stripe's API is one. Times
// are UTC; a range is [from, to). Every method fails with an error wrapping
// ErrProvider when the API does.
type Provider interface {
	// BalanceTransactions lists every balance transaction created in the
	// range, all pages.
	BalanceTransactions(ctx context.Context, from, to time.Time) ([]BalanceTransaction, error)
	// BalanceTransactionsBySource lists the balance transactions of one
	// source object (ch_, re_, dp_, po_), whenever they were created.
	BalanceTransactionsBySource(ctx context.Context, sourceID string) ([]BalanceTransaction, error)
	// BalanceTransaction returns one by id; found is false when the
	// provider has none.
	BalanceTransaction(ctx context.Context, id string) (bt BalanceTransaction, found bool, err error)
	// PayoutTransactions lists the balance transactions a payout settled
	// (automatic payouts), its own included.
	PayoutTransactions(ctx context.Context, payoutID string) ([]BalanceTransaction, error)
	// Events lists every event created in the range, all pages.
	Events(ctx context.Context, from, to time.Time) ([]Event, error)
}

var _ Provider = (*stripe.API)(nil)

// Ingester commits a provider event to the inbox with its processing job, as
// the webhook handler does (webhook.TxIngester behind
// stripe.DecodeEvent). duplicate reports an event the inbox already
// had: the inbox's unique key decides, so a webhook arriving at the same
// moment is never applied twice.
type Ingester interface {
	IngestEvent(ctx context.Context, payload []byte) (duplicate bool, err error)
}

// IngesterFunc adapts a function to Ingester.
type IngesterFunc func(ctx context.Context, payload []byte) (bool, error)

// IngestEvent implements Ingester.
func (f IngesterFunc) IngestEvent(ctx context.Context, payload []byte) (bool, error) {
	return f(ctx, payload)
}

// Item is one line of a run: a provider record and what the ledger says of
// it, or a ledger transaction the provider does not know. Absent amounts are
// nil (null in JSON, an empty cell in CSV).
//
// Amounts are signed as the provider signs them, for both sides: money
// leaving the provider balance (a refund, a payout, a fee) is negative.
// LedgerAmount is the ledger transaction's effect on provider_balance, so a
// matched line shows the same number twice. The status compares the absolute
// provider amount with the ledger transaction's Amount().
type Item struct {
	Status            Status
	ProviderTxnID     string // txn_…; empty for missing_at_provider
	SourceID          string // ch_, re_, dp_, po_…; empty when the provider names none
	Ref               string // the ledger ref; empty when the type has none
	Type              string // the balance transaction's type, or "fee" for the fee line of one
	ReportingCategory string // the provider's reporting category (derived from the kind for ledger-only lines)
	Currency          string // the provider's currency; the ledger's for missing_at_provider
	LedgerCurrency    string // the ledger transaction's currency, when there is one
	ProviderAmount    *decimal.Decimal
	ProviderFee       *decimal.Decimal
	LedgerAmount      *decimal.Decimal
	// For a movement the provider converted into the balance's currency:
	// the movement as the ledger posted it in the presentment currency
	// (signed like LedgerAmount) and the provider's rate. Currency,
	// ProviderAmount and LedgerAmount are then the settlement side.
	PresentmentCurrency string
	PresentmentAmount   *decimal.Decimal
	ExchangeRate        *decimal.Decimal
}
