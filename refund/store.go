package refund

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
)

// State is where a refund request stands.
type State string

// The states of a refund request.
const (
	// StateRequested: recorded with its submit job; the amount is reserved.
	StateRequested State = "requested"
	// StateSubmitted: the provider took it and named its refund.
	StateSubmitted State = "submitted"
	// StateSucceeded: the provider reports the refund succeeded.
	StateSucceeded State = "succeeded"
	// StateFailed: refused, reported failed, or never submitted within the
	// provider's key window; the reservation is released.
	StateFailed State = "failed"
)

// Open reports the states that reserve their amount.
func (s State) Open() bool { return s == StateRequested || s == StateSubmitted }

// Reasons are the refund reasons a request may give (Stripe's).
var Reasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// KeyWindow is how long the provider keeps an idempotency key: Stripe
// replays a key's first answer for 24 hours. A request not submitted within
// it can never be safely sent again (a new attempt could refund twice), so
// it fails instead; see SubmitDeadline.
const KeyWindow = 24 * time.Hour

// submitMargin keeps the last attempt well inside KeyWindow, so that a slow
// call started just before the deadline is still covered by the key.
const submitMargin = time.Hour

// SubmitDeadline is the last moment a request created at created may be
// sent to the provider.
func SubmitDeadline(created time.Time) time.Time { return created.Add(KeyWindow - submitMargin) }

// Request is one refund paygate was asked to make.
type Request struct {
	ID               string
	PaymentID        string
	Provider         string
	Amount           decimal.Decimal
	Currency         string
	Reason           string
	Note             string
	State            State
	ProviderRefundID string
	FailureReason    string
	Actor            string
	IdempotencyKey   string
	CreatedAt        time.Time
	UpdatedAt        time.Time
	SubmittedAt      *time.Time
	// MessageSequence counts the messages written of this request's
	// settlements (outbox): each settling statement adds one.
	MessageSequence int64
}

// ProviderKey is the idempotency key the provider is called with for r:
// derived from the committed request, so that every retry, restart and
// instance sends the same one.
func (r Request) ProviderKey() string { return "paygate-refund-" + r.ID }

const columns = `id, payment_id, provider, amount, currency, coalesce(reason, ''), coalesce(note, ''), state,
	coalesce(provider_refund_id, ''), coalesce(failure_reason, ''), actor, coalesce(idempotency_key, ''),
	created_at, updated_at, submitted_at, message_sequence`

func scan(row pgx.Row) (Request, error) {
	var r Request
	var state string
	err := row.Scan(&r.ID, &r.PaymentID, &r.Provider, &r.Amount, &r.Currency, &r.Reason, &r.Note, &state,
		&r.ProviderRefundID, &r.FailureReason, &r.Actor, &r.IdempotencyKey, &r.CreatedAt, &r.UpdatedAt, &r.SubmittedAt,
		&r.MessageSequence)
	r.State = State(state)
	return r, err
}

// New is what an operator asks for.
type New struct {
	PaymentID string
	// Amount in the payment's major unit; not Valid: the whole refundable
	// amount.
	Amount         decimal.NullDecimal
	Reason         string
	Note           string
	Actor          string
	IdempotencyKey string
	// CanRefund reports whether refunds can be started at a provider: a
	// refund client is configured for it (jobs.Client.CanRefund). CreateTx
	// refuses a payment whose provider it rejects; nil rejects every one.
	CanRefund func(provider string) bool
}

// maxNote bounds the free text an operator may attach.
const maxNote = 500

// CreateTx records a refund request in tx: it locks the payment's row, so
// that concurrent requests for one payment are decided one after the other
// by the database, checks the amount against what is refundable (captured −
// refunded − the requests still open), and inserts the request in state
// requested. The caller inserts its submit job in the same tx.
//
// It fails with ErrInvalidRequest (an amount that is not positive or has
// more decimals than the currency, an unknown reason, a note over 500
// characters), ErrPaymentNotFound, ErrUnsupportedProvider (n.CanRefund
// rejects the payment's provider), or
// ErrExceedsRefundable (the amount, or nothing, is refundable).
func CreateTx(ctx context.Context, tx pgx.Tx, n New) (Request, error) {
	if n.Reason != "" && !contains(Reasons, n.Reason) {
		return Request{}, fmt.Errorf("%w: reason must be one of %s", ErrInvalidRequest, strings.Join(Reasons, ", "))
	}
	if len([]rune(n.Note)) > maxNote {
		return Request{}, fmt.Errorf("%w: note is longer than %d characters", ErrInvalidRequest, maxNote)
	}
	if strings.TrimSpace(n.Actor) == "" {
		return Request{}, fmt.Errorf("%w: no actor", ErrInvalidRequest)
	}
	var (
		provider, currency string
		captured, refunded decimal.Decimal
		reserved           decimal.Decimal
	)
	err := tx.QueryRow(ctx, `
		SELECT provider, currency, amount_captured, amount_refunded
		FROM payments WHERE id = $1 FOR UPDATE`, n.PaymentID).
		Scan(&provider, &currency, &captured, &refunded)
	if errors.Is(err, pgx.ErrNoRows) {
		return Request{}, fmt.Errorf("%w: %s", ErrPaymentNotFound, n.PaymentID)
	}
	if err != nil {
		return Request{}, fmt.Errorf("lock payment %s: %w", n.PaymentID, err)
	}
	// A statement of its own, after the lock is held: under READ
	// COMMITTED it sees every request committed by the holders before us,
	// which a subquery of the locking statement (its snapshot taken before
	// the wait) would not.
	err = tx.QueryRow(ctx, `
		SELECT coalesce(sum(amount), 0) FROM refund_requests
		WHERE payment_id = $1 AND state IN ('requested', 'submitted')`, n.PaymentID).Scan(&reserved)
	if err != nil {
		return Request{}, fmt.Errorf("sum open refund requests of %s: %w", n.PaymentID, err)
	}
	if n.CanRefund == nil || !n.CanRefund(provider) {
		return Request{}, fmt.Errorf("%w: no refund client is configured for %s", ErrUnsupportedProvider, provider)
	}
	refundable := captured.Sub(refunded).Sub(reserved)
	amount := refundable
	if n.Amount.Valid {
		amount = n.Amount.Decimal
		if !amount.IsPositive() {
			return Request{}, fmt.Errorf("%w: amount must be positive", ErrInvalidRequest)
		}
		if _, err := ledger.ToMinor(amount, currency); err != nil {
			return Request{}, fmt.Errorf("%w: amount: %w", ErrInvalidRequest, err)
		}
	}
	if !amount.IsPositive() || amount.GreaterThan(refundable) {
		return Request{}, fmt.Errorf("%w: %s %s asked, %s refundable (captured %s, refunded %s, requested %s)",
			ErrExceedsRefundable, ledger.Format(amount, currency), currency, ledger.Format(maxZero(refundable), currency),
			ledger.Format(captured, currency), ledger.Format(refunded, currency), ledger.Format(reserved, currency))
	}
	id, err := newID()
	if err != nil {
		return Request{}, err
	}
	amount, _ = ledgerScale(amount, currency)
	r, err := scan(tx.QueryRow(ctx, `
		INSERT INTO refund_requests (id, payment_id, provider, amount, currency, reason, note, actor, idempotency_key)
		VALUES ($1, $2, $3, $4, $5, nullif($6, ''), nullif($7, ''), $8, nullif($9, ''))
		RETURNING `+columns,
		id, n.PaymentID, provider, amount, currency, n.Reason, n.Note, n.Actor, n.IdempotencyKey))
	if err != nil {
		return Request{}, fmt.Errorf("insert refund request: %w", err)
	}
	return r, nil
}

func ledgerScale(d decimal.Decimal, currency string) (decimal.Decimal, error) {
	minor, err := ledger.ToMinor(d, currency)
	if err != nil {
		return d, err
	}
	return ledger.FromMinor(minor, currency)
}

func maxZero(d decimal.Decimal) decimal.Decimal {
	if d.IsNegative() {
		return decimal.Zero
	}
	return d
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// newID is a request id: "rr_" and 24 random hex digits.
func newID() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("refund request id: %w", err)
	}
	return "rr_" + hex.EncodeToString(b), nil
}

// Querier is a pool or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Get returns one request. It fails with ErrRequestNotFound.
func Get(ctx context.Context, db Querier, id string) (Request, error) {
	r, err := scan(db.QueryRow(ctx, `SELECT `+columns+` FROM refund_requests WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Request{}, fmt.Errorf("%w: %s", ErrRequestNotFound, id)
	}
	return r, err
}

// ListForPayment returns a payment's requests, oldest first. It fails with
// ErrPaymentNotFound for an unknown payment.
func ListForPayment(ctx context.Context, db Querier, paymentID string) ([]Request, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM payments WHERE id = $1)`, paymentID).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		return nil, fmt.Errorf("%w: %s", ErrPaymentNotFound, paymentID)
	}
	rows, err := db.Query(ctx, `SELECT `+columns+` FROM refund_requests WHERE payment_id = $1 ORDER BY created_at, id`, paymentID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Request, error) { return scan(row) })
}

// MarkSubmittedTx records that the provider took request id as refund
// providerRefundID. A request the provider's reports settled already keeps
// its state (they arrived first); only its refund id is filled in. It
// returns the request as it now stands.
func MarkSubmittedTx(ctx context.Context, tx pgx.Tx, id, providerRefundID string) (Request, error) {
	r, err := scan(tx.QueryRow(ctx, `
		UPDATE refund_requests SET
		    state = CASE WHEN state = 'requested' THEN 'submitted' ELSE state END,
		    provider_refund_id = coalesce(provider_refund_id, $2),
		    submitted_at = coalesce(submitted_at, now()),
		    updated_at = now()
		WHERE id = $1
		RETURNING `+columns, id, providerRefundID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Request{}, fmt.Errorf("%w: %s", ErrRequestNotFound, id)
	}
	if err != nil {
		return Request{}, fmt.Errorf("mark refund request %s submitted: %w", id, err)
	}
	return r, nil
}

// FailTx fails request id for reason, unless it is already settled. failed
// reports whether this call failed it: the caller then compensates (an ops
// alert, an audit entry) in the same tx.
func FailTx(ctx context.Context, tx pgx.Tx, id, reason string) (r Request, failed bool, err error) {
	r, err = scan(tx.QueryRow(ctx, `
		UPDATE refund_requests SET state = 'failed', failure_reason = $2, updated_at = now(),
		    message_sequence = message_sequence + 1
		WHERE id = $1 AND state IN ('requested', 'submitted')
		RETURNING `+columns, id, reason))
	if errors.Is(err, pgx.ErrNoRows) {
		r, err = Get(ctx, tx, id)
		return r, false, err
	}
	if err != nil {
		return Request{}, false, fmt.Errorf("fail refund request %s: %w", id, err)
	}
	return r, true, nil
}

// Report is what a provider's event says of a refund paygate may have asked
// for: the request it names (Reference, from the refund's metadata) or the
// refund id the request recorded.
type Report struct {
	Provider         string
	Reference        string // the request id, when the refund carries it
	ProviderRefundID string
	Succeeded        bool // else failed
	FailureReason    string
}

// SettleTx applies reports to the requests they name, in tx: a success
// settles a request still open, or one paygate failed without the provider
// ever naming a refund (a key window passed, yet the refund was made); a
// failure settles a request not failed yet, a succeeded one included (a
// refund can fail days after succeeding), and is final, whatever order the
// reports arrive in. It returns every request this call settled, as it
// now stands, each settlement counted in its MessageSequence: the caller
// compensates the failed ones and tells downstream of all of them.
//
// Most refunds are made at the provider, not asked of paygate, and name no
// request: one statement finds whether any report of the batch names one,
// and only then are the reports applied, one statement each and in their
// order (a report may name its request only by the refund id an earlier
// one recorded). A request of a report's payment cannot appear between the
// two: it is created under its payment's lock, which the caller holds.
func SettleTx(ctx context.Context, tx pgx.Tx, reports []Report) (settled []Request, err error) {
	if named, err := anyNamed(ctx, tx, reports); err != nil || !named {
		return nil, err
	}
	for _, rep := range reports {
		var rows pgx.Rows
		if rep.Succeeded {
			rows, err = tx.Query(ctx, `
				UPDATE refund_requests SET state = 'succeeded',
				    provider_refund_id = coalesce(provider_refund_id, $3), updated_at = now(),
				    message_sequence = message_sequence + 1
				WHERE provider = $1 AND (id = $2 OR provider_refund_id = $3)
				  AND (state IN ('requested', 'submitted') OR (state = 'failed' AND provider_refund_id IS NULL))
				RETURNING `+columns, rep.Provider, rep.Reference, rep.ProviderRefundID)
		} else {
			reason := rep.FailureReason
			if reason == "" {
				reason = "the provider reported the refund failed"
			}
			rows, err = tx.Query(ctx, `
				UPDATE refund_requests SET state = 'failed', failure_reason = $4,
				    provider_refund_id = coalesce(provider_refund_id, $3), updated_at = now(),
				    message_sequence = message_sequence + 1
				WHERE provider = $1 AND (id = $2 OR provider_refund_id = $3) AND state <> 'failed'
				RETURNING `+columns, rep.Provider, rep.Reference, rep.ProviderRefundID, reason)
		}
		if err != nil {
			return nil, fmt.Errorf("settle refund %s: %w", rep.ProviderRefundID, err)
		}
		got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Request, error) { return scan(row) })
		if err != nil {
			return nil, fmt.Errorf("settle refund %s: %w", rep.ProviderRefundID, err)
		}
		settled = append(settled, got...)
	}
	return settled, nil
}

// anyNamed reports whether any of reports may name a request, by its id or
// by the refund id it recorded. It may say so of reports that name none (a
// refund id of one provider recorded under another): those are then
// applied, and settle nothing.
func anyNamed(ctx context.Context, tx pgx.Tx, reports []Report) (bool, error) {
	var providers, refs, refundIDs []string
	for _, rep := range reports {
		if rep.Reference != "" {
			refs = append(refs, rep.Reference)
		}
		if rep.ProviderRefundID != "" {
			providers = append(providers, rep.Provider)
			refundIDs = append(refundIDs, rep.ProviderRefundID)
		}
	}
	if len(refs) == 0 && len(refundIDs) == 0 {
		return false, nil
	}
	// Each side by its own index: the key, and (provider, refund id).
	var named bool
	err := tx.QueryRow(ctx, `
		SELECT EXISTS (SELECT FROM refund_requests WHERE id = ANY($1::text[]))
		    OR EXISTS (SELECT FROM refund_requests
		               WHERE provider = ANY($2::text[]) AND provider_refund_id = ANY($3::text[]))`,
		refs, providers, refundIDs).Scan(&named)
	if err != nil {
		return false, fmt.Errorf("look up the requests %d refund reports name: %w", len(reports), err)
	}
	return named, nil
}
