package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/provider"
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

// ExceptionStatuses lists the statuses of exceptions, in report order:
// every status but matched and fee_posted. Exceptions are what finance
// resolves.
var ExceptionStatuses = []Status{StatusAmountMismatch, StatusCurrencyMismatch, StatusMissingInLedger, StatusMissingAtProvider}

// Exception reports whether an item of status s is an exception.
func (s Status) Exception() bool { return slices.Contains(ExceptionStatuses, s) }

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
	TriggerScheduled Trigger = "scheduled" // the daily periodic job, or a batch's report: at most one per day or batch
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
	// ErrCannotRun: no attempt can perform the run (no statement source
	// for its provider here, its batch's report missing or unreadable);
	// the run is failed at once.
	ErrCannotRun = errors.New("reconciliation run cannot be performed")
	// ErrInvalidBatch: not a settlement batch number (a whole number
	// from 1).
	ErrInvalidBatch = errors.New("invalid batch: want a whole number from 1")
	// ErrProvider: the provider's API failed; the run can be retried.
	ErrProvider = provider.ErrAPI
	// ErrProviderRefused: the provider refused a request as invalid (with
	// ErrProvider); a payout that cannot be listed by (a manual one) is.
	ErrProviderRefused = provider.ErrAPIRefused
)

// DateLayout is how days are written everywhere: 2025-03-14.
const DateLayout = time.DateOnly

// ParseBatch parses a settlement batch number. It fails with
// ErrInvalidBatch.
func ParseBatch(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("%w: %q", ErrInvalidBatch, s)
	}
	return n, nil
}

// Scope is what a run reconciles: one provider's UTC day, or one of its
// settlement batches.
type Scope struct {
	Provider string
	Date     time.Time // midnight UTC of a day; zero for a batch
	Batch    int64     // a settlement batch; zero for a day
}

// DayScope is provider's UTC day.
func DayScope(provider string, day time.Time) Scope {
	return Scope{Provider: provider, Date: utcDay(day)}
}

// BatchScope is provider's settlement batch.
func BatchScope(provider string, batch int64) Scope { return Scope{Provider: provider, Batch: batch} }

// String names the scope for people: "stripe 2025-03-14", "adyen batch 12".
func (s Scope) String() string {
	if s.Batch != 0 {
		return fmt.Sprintf("%s batch %d", s.Provider, s.Batch)
	}
	return s.Provider + " " + s.Date.Format(DateLayout)
}

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

// Provider is a provider whose statement is its balance transactions of a
// UTC day, as reconciliation reads it: its API, and how its records and
// the ledger's refs name each other (the seam: reconcile knows no
// provider). provider/stripe's API is one. Times are UTC; a range is
// [from, to). Every API method fails with an error wrapping ErrProvider
// when the API does.
type Provider interface {
	// Name is the provider's name, as the inbox and the runs carry it.
	Name() string
	// Lines derives a record's lines: its movement, then its fee when it
	// has one. It is pure.
	Lines(bt BalanceTransaction) []provider.StatementLine
	// Owns reports whether a ledger ref names one of the provider's
	// movements: a ledger transaction the provider's records should know
	// (a hand-made bank adjustment is not).
	Owns(ref string) bool
	// SourceOfRef names where the provider keeps the record of a ledger
	// ref: the source object whose balance transactions to list, or the
	// balance transaction itself. ok is false for refs of no known shape.
	SourceOfRef(ref string) (sourceID, txnID string, ok bool)

	// BalanceTransactions lists every balance transaction created in the
	// range, all pages.
	BalanceTransactions(ctx context.Context, from, to time.Time) ([]BalanceTransaction, error)
	// BalanceTransactionsBySource lists the balance transactions of one
	// source object, whenever they were created.
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

// Batches is a provider whose statement is a settlement batch: the report
// it writes when a batch closes and pays out (Adyen's settlement details
// report), kept as downloaded (see StoreReportTx) and read whole.
type Batches interface {
	// Name is the provider's name, as the runs and the stored reports
	// carry it.
	Name() string
	// Statement reads the records of settlement batch from its report file,
	// each with the lines the provider derives from it. It is pure. It
	// fails for a file it cannot read (a column missing, an amount that is
	// not one) or one of another batch, saying why: the run that meets it
	// fails with ErrCannotRun and that reason.
	Statement(batch int64, file []byte) ([]provider.StatementRecord, error)
}

// Ingester commits a provider event to the inbox with its processing job, as
// the webhook handler does (webhook.TxIngester behind the provider's
// decoding). duplicate reports an event the inbox already
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
	// ID is the item's own, for as long as it is kept; RunID its run's.
	// Both are zero until the run stores it.
	ID                int64
	RunID             int64
	Status            Status
	ProviderTxnID     string // the provider's record: Stripe's txn_…, an Adyen row's Psp Reference; empty for missing_at_provider
	SourceID          string // the object moved: Stripe's ch_, re_, dp_, po_…, an Adyen row's Modification Reference; empty when the provider names none
	Ref               string // the ledger ref; empty when the type has none
	Type              string // the record's type, or "fee" for the fee line of one
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
	// PaymentID is the payment the item is about, when paygate knows it:
	// its ledger transaction's, or for a movement the ledger lacks, the
	// payment whose facts name its source object. Empty for movements of
	// no payment (payouts, the provider's own fees and adjustments).
	PaymentID string
	// Reference is the merchant's order reference of that payment, as the
	// payment had it when the run stored the item; empty when the item has
	// no payment or its payment had none then. Never changed after: the
	// run's CSV stays what the run found.
	Reference string
	// Resolution is how finance resolved an exception; nil while it is
	// open, and on every item that is not an exception.
	Resolution *Resolution
}
