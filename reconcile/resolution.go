package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
)

// Finance works through a run's exceptions one by one: each is resolved
// once, with a resolution and a note that say what finance found. The
// item itself never changes (its run wrote it); the resolution is a row of
// its own, written once, and the audit log records who resolved what.

// ResolutionKind is how finance resolved an exception. Its value is stored
// and appears in the API and the CSV; never rename one.
type ResolutionKind string

// The resolutions.
const (
	// ResolutionMatchedManually: the two sides agree after all (finance
	// matched the movement by hand: another reference, a record the run
	// could not see). The ledger stays as it is.
	ResolutionMatchedManually ResolutionKind = "matched_manually"
	// ResolutionProviderError: the provider's statement is wrong and the
	// provider is to correct it. The ledger stays as it is.
	ResolutionProviderError ResolutionKind = "provider_error"
	// ResolutionWriteOff: the difference is written off. An adjustment
	// against reconciliation_adjustments makes the ledger's
	// provider_balance hold what the provider's statement says (see
	// WriteOff).
	ResolutionWriteOff ResolutionKind = "write_off"
)

// ResolutionKinds lists the resolutions.
var ResolutionKinds = []ResolutionKind{ResolutionMatchedManually, ResolutionProviderError, ResolutionWriteOff}

// MaxNoteLen bounds a resolution's note, in characters: a few sentences,
// not a document.
const MaxNoteLen = 2000

// Resolution is how finance resolved an exception.
type Resolution struct {
	Kind       ResolutionKind
	Note       string
	ResolvedBy string // the caller's identity, as the audit log names it
	ResolvedAt time.Time
	// AdjustmentRef is the ledger ref of a write-off's adjustment; empty
	// when the resolution moved no money.
	AdjustmentRef string
}

// Errors of resolving.
var (
	// ErrItemNotFound: no reconciliation item has that id.
	ErrItemNotFound = errors.New("reconciliation item not found")
	// ErrInvalidResolution: a resolution that is not one of
	// ResolutionKinds, or a note that is empty or longer than MaxNoteLen.
	ErrInvalidResolution = errors.New("invalid resolution")
	// ErrNotException: the item is matched or fee_posted; there is
	// nothing to resolve.
	ErrNotException = errors.New("reconciliation item is not an exception")
	// ErrAlreadyResolved: the item was resolved otherwise before (see
	// *AlreadyResolvedError); the first resolution stands.
	ErrAlreadyResolved = errors.New("reconciliation item already resolved")
	// ErrNoDifference: a write-off of an exception whose difference is
	// not one amount (a currency mismatch: one currency at the provider,
	// another in the ledger).
	ErrNoDifference = errors.New("no single difference to write off")
	// ErrWrittenOffOtherwise: the movement's difference was written off
	// before, from another run's item, with another amount.
	ErrWrittenOffOtherwise = errors.New("the movement's difference was already written off with another amount")
)

// AlreadyResolvedError reports that ItemID was resolved as First before a
// different resolution was asked for. It matches ErrAlreadyResolved.
type AlreadyResolvedError struct {
	ItemID int64
	First  Resolution
}

func (e *AlreadyResolvedError) Error() string {
	return fmt.Sprintf("reconciliation item %d was resolved %s by %s at %s (note: %q); the first resolution stands",
		e.ItemID, e.First.Kind, e.First.ResolvedBy, e.First.ResolvedAt.UTC().Format(time.RFC3339), e.First.Note)
}

// Is makes errors.Is(err, ErrAlreadyResolved) hold.
func (e *AlreadyResolvedError) Is(target error) bool { return target == ErrAlreadyResolved }

// GetItem returns one item with its resolution, and its run. It fails
// with ErrItemNotFound.
func GetItem(ctx context.Context, q Querier, id int64) (Item, Run, error) {
	it, _, err := scanItem(q.QueryRow(ctx, `SELECT `+itemColumns+` FROM `+itemTables+` WHERE i.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Item{}, Run{}, fmt.Errorf("item %d: %w", id, ErrItemNotFound)
	}
	if err != nil {
		return Item{}, Run{}, fmt.Errorf("read reconciliation item %d: %w", id, err)
	}
	run, err := GetRun(ctx, q, it.RunID)
	if err != nil {
		return Item{}, Run{}, err
	}
	return it, run, nil
}

// ExceptionCounts are how many of a run's exceptions are open and how
// many resolved.
type ExceptionCounts struct {
	Open     int `json:"open"`
	Resolved int `json:"resolved"`
}

// CountExceptions counts a run's open and resolved exceptions, reading
// its exceptions only.
func CountExceptions(ctx context.Context, q Querier, runID int64) (ExceptionCounts, error) {
	var c ExceptionCounts
	err := q.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE r.item_id IS NULL), count(r.item_id)
		FROM `+itemTables+` WHERE i.run_id = $1 AND `+exceptionCondition, runID).Scan(&c.Open, &c.Resolved)
	if err != nil {
		return ExceptionCounts{}, fmt.Errorf("count exceptions of run %d: %w", runID, err)
	}
	return c, nil
}

// Resolve is what finance decides of an exception, and who decides.
type Resolve struct {
	Kind ResolutionKind
	Note string
	// Op names who resolves (resolved_by, and the audit entry's actor)
	// and the request's Idempotency-Key; its Reason is written by
	// ResolveTx.
	Op inbox.Operation
}

// Resolved is what ResolveTx did.
type Resolved struct {
	Item Item // with its resolution
	Run  Run
	// Created is false when the item was resolved the same way before:
	// nothing more was written.
	Created bool
	// Adjustment is a write-off's adjustment as the ledger holds it (its
	// PostedAt set); nil when the resolution moved no money.
	Adjustment *ledger.Transaction
}

// ResolveTx resolves exception itemID in tx, once: it records the
// resolution, posts a write-off's adjustment (WriteOff) through the
// ledger, and appends the audit entry (action reconciliation_resolve,
// the item's id as event_id, its run's provider as provider). An item
// resolved the same way before (same resolution, same note) is answered
// as it stands, with Created false; resolved otherwise, it fails with
// *AlreadyResolvedError. Of two resolutions racing, the item's key in
// reconciliation_resolutions decides which is first.
//
// It fails with ErrInvalidResolution, ErrItemNotFound, ErrNotException,
// *AlreadyResolvedError (matching ErrAlreadyResolved), ErrNoDifference,
// ErrWrittenOffOtherwise, inbox.ErrNoActor, or a database error; the
// caller then rolls tx back.
func ResolveTx(ctx context.Context, tx pgx.Tx, itemID int64, r Resolve) (Resolved, error) {
	r.Note = strings.TrimSpace(r.Note)
	switch {
	case !slices.Contains(ResolutionKinds, r.Kind):
		return Resolved{}, fmt.Errorf("%w: the resolution is one of matched_manually, provider_error, write_off; got %q", ErrInvalidResolution, r.Kind)
	case r.Note == "":
		return Resolved{}, fmt.Errorf("%w: a note is required: say what was found, for whoever reads the books after you", ErrInvalidResolution)
	case utf8.RuneCountInString(r.Note) > MaxNoteLen:
		return Resolved{}, fmt.Errorf("%w: the note is longer than %d characters", ErrInvalidResolution, MaxNoteLen)
	case strings.TrimSpace(r.Op.Actor) == "":
		return Resolved{}, inbox.ErrNoActor
	}
	it, run, err := GetItem(ctx, tx, itemID)
	if err != nil {
		return Resolved{}, err
	}
	if !it.Status.Exception() {
		return Resolved{}, fmt.Errorf("%w: item %d is %s", ErrNotException, itemID, it.Status)
	}
	if it.Resolution != nil {
		return resolvedBefore(ctx, tx, it, run, r)
	}
	var adjustment *ledger.Transaction
	if r.Kind == ResolutionWriteOff {
		t, moves, err := WriteOff(run, it)
		if err != nil {
			return Resolved{}, err
		}
		if moves {
			adjustment = &t
		}
	}
	var adjustmentRef *string
	if adjustment != nil {
		adjustmentRef = &adjustment.Ref
	}
	var resolvedAt time.Time
	err = tx.QueryRow(ctx, `
		INSERT INTO reconciliation_resolutions (item_id, resolution, note, resolved_by, adjustment_ref)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (item_id) DO NOTHING
		RETURNING resolved_at`, itemID, string(r.Kind), r.Note, r.Op.Actor, adjustmentRef).Scan(&resolvedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// Resolved meanwhile: the other resolution committed first.
		if it, run, err = GetItem(ctx, tx, itemID); err != nil {
			return Resolved{}, err
		}
		return resolvedBefore(ctx, tx, it, run, r)
	}
	if err != nil {
		return Resolved{}, fmt.Errorf("resolve item %d: %w", itemID, err)
	}
	it.Resolution = &Resolution{Kind: r.Kind, Note: r.Note, ResolvedBy: r.Op.Actor, ResolvedAt: resolvedAt.UTC()}
	out := Resolved{Item: it, Run: run, Created: true}
	if adjustment != nil {
		it.Resolution.AdjustmentRef = adjustment.Ref
		if _, err := ledger.PostTx(ctx, tx, *adjustment); err != nil {
			if errors.Is(err, ledger.ErrRefConflict) {
				return Resolved{}, fmt.Errorf("%w: %w", ErrWrittenOffOtherwise, err)
			}
			return Resolved{}, fmt.Errorf("write off item %d: %w", itemID, err)
		}
		if out.Adjustment, err = postedAdjustment(ctx, tx, adjustment.Ref); err != nil {
			return Resolved{}, err
		}
	}
	op := r.Op
	op.Reason = auditReason(it, out.Adjustment)
	if err := inbox.AppendAuditTx(ctx, tx, inbox.ActionReconciliationResolve, op,
		inbox.Key{Provider: run.Provider, EventID: strconv.FormatInt(it.ID, 10)}); err != nil {
		return Resolved{}, err
	}
	out.Item = it
	return out, nil
}

// resolvedBefore answers a resolution of an item already resolved: the
// same one again is the first as it stands; another is refused.
func resolvedBefore(ctx context.Context, q Querier, it Item, run Run, r Resolve) (Resolved, error) {
	first := *it.Resolution
	if first.Kind != r.Kind || first.Note != r.Note {
		return Resolved{}, &AlreadyResolvedError{ItemID: it.ID, First: first}
	}
	out := Resolved{Item: it, Run: run}
	if first.AdjustmentRef != "" {
		var err error
		if out.Adjustment, err = postedAdjustment(ctx, q, first.AdjustmentRef); err != nil {
			return Resolved{}, err
		}
	}
	return out, nil
}

func postedAdjustment(ctx context.Context, q Querier, ref string) (*ledger.Transaction, error) {
	t, err := ledger.TransactionByRef(ctx, q, ref)
	if err != nil {
		return nil, fmt.Errorf("read write-off %s: %w", ref, err)
	}
	return &t, nil
}

// auditReason is what the audit log says of a resolution: which item,
// what the run found, the money a write-off moved, and finance's note.
func auditReason(it Item, adjustment *ledger.Transaction) string {
	r := it.Resolution
	why := fmt.Sprintf("%s of reconciliation item %d (run %d, %s", r.Kind, it.ID, it.RunID, it.Status)
	if it.Ref != "" {
		why += " " + it.Ref
	} else if it.ProviderTxnID != "" {
		why += " " + it.ProviderTxnID
	}
	why += ")"
	if adjustment != nil {
		why += fmt.Sprintf(", %s %s written off as %s", ledger.Format(adjustment.Amount(), adjustment.Currency), adjustment.Currency, adjustment.Ref)
	}
	return why + ": " + r.Note
}

// Difference is what the provider's statement holds beyond the ledger for
// an item, in its currency, signed as the provider signs (positive: the
// provider balance holds more than the ledger's provider_balance): the
// provider's amount less the ledger's, a side the item lacks counting as
// zero. ok is false for an item whose difference is not one amount: a
// currency mismatch, or an item that is not an exception.
func Difference(it Item) (diff decimal.Decimal, ok bool) {
	switch it.Status {
	case StatusAmountMismatch, StatusMissingInLedger, StatusMissingAtProvider:
		return deref(it.ProviderAmount).Sub(deref(it.LedgerAmount)), true
	}
	return decimal.Zero, false
}

// WriteOffRef is the ledger ref of the adjustment that writes off an
// item's difference. It is derived from the movement (its ledger ref, or
// the provider's record and line type), not from the item's row: a re-run
// of the same day lists the same difference again as a new item, and
// writing that one off too must not post the money twice.
func WriteOffRef(provider string, it Item) string {
	switch {
	case it.Ref != "":
		return "reconciliation:write_off:" + it.Ref
	case it.ProviderTxnID != "":
		return "reconciliation:write_off:" + provider + ":" + it.ProviderTxnID + ":" + it.Type
	}
	return "reconciliation:write_off:item:" + strconv.FormatInt(it.ID, 10)
}

// WriteOff is the balanced adjustment that writes off an item's
// Difference: Dr provider_balance, Cr reconciliation_adjustments when the
// provider holds more than the ledger, the other way round when it holds
// less. It is dated when the difference arose, the run's day (a batch's
// run: when it ran), so that it lands in that month while it is open and,
// once the month is closed, at the first instant of the first open one
// (posted_at; see ledger.PostTx). It is tied to the item's payment. moves
// is false, with no transaction, when the two sides agree (a settlement
// batch's payout that does not add up to its batch: the ledger holds the
// payout as paid).
//
// It fails with ErrNoDifference.
func WriteOff(run Run, it Item) (t ledger.Transaction, moves bool, err error) {
	diff, ok := Difference(it)
	if !ok {
		return ledger.Transaction{}, false, fmt.Errorf("%w: item %d is %s", ErrNoDifference, it.ID, it.Status)
	}
	if diff.IsZero() {
		return ledger.Transaction{}, false, nil
	}
	at := run.Date
	if run.Batch != 0 || at.IsZero() {
		at = run.StartedAt
	}
	t = ledger.Transaction{
		Ref: WriteOffRef(run.Provider, it), Kind: ledger.KindAdjustment, Currency: it.Currency, OccurredAt: at,
		PaymentID: it.PaymentID, EventID: fmt.Sprintf("reconciliation_item:%d", it.ID),
	}
	if diff.IsPositive() {
		t.Entries = []ledger.Entry{
			ledger.Debit(ledger.AccountProviderBalance, diff),
			ledger.Credit(ledger.AccountReconciliationAdjustments, diff),
		}
	} else {
		t.Entries = []ledger.Entry{
			ledger.Debit(ledger.AccountReconciliationAdjustments, diff.Neg()),
			ledger.Credit(ledger.AccountProviderBalance, diff.Neg()),
		}
	}
	if err := t.Validate(); err != nil {
		// A currency the ledger does not know: the item shows the
		// provider's minor units, which no posting can carry.
		return ledger.Transaction{}, false, fmt.Errorf("%w: item %d's difference cannot be posted: %w", ErrNoDifference, it.ID, err)
	}
	return t, true, nil
}
