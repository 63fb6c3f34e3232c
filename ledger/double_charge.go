package ledger

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/statemachine"
)

// DoubleChargeState is where a double charge stands.
type DoubleChargeState string

// The states of a double charge; stored.
const (
	// DoubleChargeOpen: two or more payments of the reference are net
	// captured (captured − refunded > 0).
	DoubleChargeOpen DoubleChargeState = "open"
	// DoubleChargeResolved: a refund left at most one of them.
	DoubleChargeResolved DoubleChargeState = "resolved"
	// DoubleChargeDismissed: ops said the order was meant to be paid in
	// parts. It stays dismissed.
	DoubleChargeDismissed DoubleChargeState = "dismissed"
)

// DoubleCharge is one reference paid more than once.
type DoubleCharge struct {
	Reference string
	State     DoubleChargeState
	// Detections counts the times it opened; each is one detection.
	Detections  int
	DetectedAt  time.Time
	ResolvedAt  *time.Time
	DismissedBy string
	Note        string
	// Payments are the reference's payments, oldest first.
	Payments []DoubleChargePayment
}

// DoubleChargePayment is one payment of a double charge's reference.
type DoubleChargePayment struct {
	ID             string
	Provider       string
	Status         statemachine.State
	Currency       string
	AmountCaptured decimal.Decimal
	AmountRefunded decimal.Decimal
}

// NetCaptured reports whether a payment counts toward a double charge:
// captured − refunded > 0.
func NetCaptured(s statemachine.Summary) bool {
	return s.AmountCaptured.GreaterThan(s.AmountRefunded)
}

// Errors of the double charges.
var (
	ErrDoubleChargeNotFound = errors.New("double charge not found")
	// ErrDoubleChargeNotOpen: only an open double charge can be dismissed.
	ErrDoubleChargeNotOpen = errors.New("double charge is not open")
)

// referenceLockKeys are the advisory lock keys of references, sorted, each
// once: every transaction takes them in this order, so two never deadlock.
func referenceLockKeys(refs []string) []int64 {
	keys := make([]int64, 0, len(refs))
	for _, r := range refs {
		h := fnv.New64a()
		h.Write([]byte("paygate.reference\x00" + r))
		keys = append(keys, int64(h.Sum64()))
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// DetectDoubleChargesTx decides, for each of refs, whether its payments
// make a double charge, in tx, after the changes of tx's payments are
// written: a reference with two or more net captured payments opens (a new
// detection, unless it is open or dismissed already); one with fewer
// resolves if it was open. It returns the double charges that opened here,
// with their payments, each once: one detection, one email.
//
// Detection is exactly once and order-free because it is decided under a
// lock per reference, held until tx ends, and read after it is taken: of
// two transactions changing two payments of one reference, the second to
// take the lock sees the first's committed change. The caller must hold the
// locks of the payments it changed (taken before, so lock order is always
// payments, then references). Both statements go in one round trip.
func DetectDoubleChargesTx(ctx context.Context, tx pgx.Tx, refs []string) ([]DoubleCharge, error) {
	refs = slices.DeleteFunc(slices.Clone(refs), func(r string) bool { return r == "" })
	if len(refs) == 0 {
		return nil, nil
	}
	slices.Sort(refs)
	refs = slices.Compact(refs)
	batch := &pgx.Batch{}
	// unnest yields the keys in their order, and each row's lock is taken
	// as it is produced.
	batch.Queue(`SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::bigint[]) AS k`, referenceLockKeys(refs))
	// A statement of its own, after the locks: it reads what was
	// committed until it started.
	batch.Queue(`
		WITH refs AS (SELECT r FROM unnest($1::text[]) AS r),
		counts AS (
			SELECT refs.r, count(p.id) FILTER (WHERE p.amount_captured > p.amount_refunded) AS net
			FROM refs LEFT JOIN payments p ON p.reference = refs.r
			GROUP BY refs.r),
		opened AS (
			INSERT INTO double_charges AS d (reference, state, detections, detected_at)
			SELECT r, 'open', 1, now() FROM counts WHERE net >= 2
			ON CONFLICT (reference) DO UPDATE
				SET state = 'open', detections = d.detections + 1, detected_at = now(), resolved_at = NULL,
					updated_at = now()
				WHERE d.state = 'resolved'
			RETURNING d.reference),
		resolved AS ( -- run whether read or not, as every data-modifying WITH
			UPDATE double_charges d SET state = 'resolved', resolved_at = now(), updated_at = now()
			FROM counts WHERE d.reference = counts.r AND counts.net < 2 AND d.state = 'open')
		SELECT reference FROM opened`, refs)
	results := tx.SendBatch(ctx, batch)
	if _, err := results.Exec(); err != nil {
		results.Close()
		return nil, fmt.Errorf("lock references %s: %w", andMore(refs), err)
	}
	rows, err := results.Query()
	if err != nil {
		results.Close()
		return nil, fmt.Errorf("detect double charges of %s: %w", andMore(refs), err)
	}
	opened, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		results.Close()
		return nil, fmt.Errorf("detect double charges of %s: %w", andMore(refs), err)
	}
	if err := results.Close(); err != nil {
		return nil, fmt.Errorf("detect double charges of %s: %w", andMore(refs), err)
	}
	if len(opened) == 0 {
		return nil, nil
	}
	out, _, err := listDoubleCharges(ctx, tx, `d.reference = ANY($1)`, []any{opened}, false, len(opened))
	return out, err
}

// DoubleChargeFilter selects double charges; zero selects all.
type DoubleChargeFilter struct {
	State DoubleChargeState
}

// DefaultDoubleChargeLimit and MaxDoubleChargeLimit bound a page.
const (
	DefaultDoubleChargeLimit = 50
	MaxDoubleChargeLimit     = 500
)

// ListDoubleCharges returns the double charges f selects, the most
// recently detected first, limit at a time after cursor; next is empty at
// the end.
//
// It fails with ErrBadCursor.
func ListDoubleCharges(ctx context.Context, q Querier, f DoubleChargeFilter, cursor string, limit int) ([]DoubleCharge, string, error) {
	switch {
	case limit <= 0:
		limit = DefaultDoubleChargeLimit
	case limit > MaxDoubleChargeLimit:
		limit = MaxDoubleChargeLimit
	}
	conds, args := []string{"true"}, []any{}
	if f.State != "" {
		args = append(args, string(f.State))
		conds = append(conds, fmt.Sprintf("d.state = $%d", len(args)))
	}
	if cursor != "" {
		at, ref, err := parseDoubleChargeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		args = append(args, at, ref)
		conds = append(conds, fmt.Sprintf("(d.detected_at, d.reference) < ($%d, $%d)", len(args)-1, len(args)))
	}
	return listDoubleCharges(ctx, q, strings.Join(conds, " AND "), args, true, limit)
}

// GetDoubleCharge returns the double charge of a reference.
//
// It fails with ErrDoubleChargeNotFound.
func GetDoubleCharge(ctx context.Context, q Querier, reference string) (DoubleCharge, error) {
	out, _, err := listDoubleCharges(ctx, q, `d.reference = $1`, []any{reference}, false, 1)
	if err != nil {
		return DoubleCharge{}, err
	}
	if len(out) == 0 {
		return DoubleCharge{}, ErrDoubleChargeNotFound
	}
	return out[0], nil
}

// DismissDoubleChargeTx marks an open double charge dismissed by actor
// with note, and returns it.
//
// It fails with ErrDoubleChargeNotFound or ErrDoubleChargeNotOpen.
func DismissDoubleChargeTx(ctx context.Context, tx pgx.Tx, reference, actor, note string) (DoubleCharge, error) {
	var state DoubleChargeState
	err := tx.QueryRow(ctx, `SELECT state FROM double_charges WHERE reference = $1 FOR UPDATE`, reference).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return DoubleCharge{}, ErrDoubleChargeNotFound
	}
	if err != nil {
		return DoubleCharge{}, fmt.Errorf("dismiss double charge %s: %w", reference, err)
	}
	if state != DoubleChargeOpen {
		return DoubleCharge{}, fmt.Errorf("dismiss double charge %s (%s): %w", reference, state, ErrDoubleChargeNotOpen)
	}
	if _, err := tx.Exec(ctx, `UPDATE double_charges SET state = 'dismissed', dismissed_by = $2, note = $3,
		resolved_at = now(), updated_at = now() WHERE reference = $1`, reference, actor, note); err != nil {
		return DoubleCharge{}, fmt.Errorf("dismiss double charge %s: %w", reference, err)
	}
	return GetDoubleCharge(ctx, tx, reference)
}

func doubleChargeCursor(d DoubleCharge) string { return keysetCursor("d1", d.DetectedAt, d.Reference) }

func parseDoubleChargeCursor(s string) (time.Time, string, error) {
	return parseKeysetCursor("d1", s)
}

// listDoubleCharges reads at most limit of the double charges cond
// selects, with their payments, newest detection first; when paged, next
// names the following page (empty at the end).
func listDoubleCharges(ctx context.Context, q Querier, cond string, args []any, paged bool, limit int) ([]DoubleCharge, string, error) {
	args = append(args, limit+1)
	rows, err := q.Query(ctx, `
		SELECT d.reference, d.state, d.detections, d.detected_at, d.resolved_at, coalesce(d.dismissed_by, ''),
			coalesce(d.note, ''),
			coalesce((SELECT array_agg(array[p.id, p.provider, p.status, p.currency, p.amount_captured::text,
					p.amount_refunded::text] ORDER BY p.created_at, p.id)
				FROM payments p WHERE p.reference = d.reference), '{}')
		FROM double_charges d WHERE `+cond+fmt.Sprintf(`
		ORDER BY d.detected_at DESC, d.reference DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list double charges: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DoubleCharge, error) {
		var d DoubleCharge
		var payments [][]string
		if err := row.Scan(&d.Reference, &d.State, &d.Detections, &d.DetectedAt, &d.ResolvedAt, &d.DismissedBy,
			&d.Note, &payments); err != nil {
			return d, err
		}
		for _, p := range payments {
			captured, err := decimal.NewFromString(p[4])
			if err != nil {
				return d, err
			}
			refunded, err := decimal.NewFromString(p[5])
			if err != nil {
				return d, err
			}
			d.Payments = append(d.Payments, DoubleChargePayment{ID: p[0], Provider: p[1], Status: statemachine.State(p[2]),
				Currency: p[3], AmountCaptured: captured, AmountRefunded: refunded})
		}
		return d, nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("list double charges: %w", err)
	}
	var next string
	if len(out) > limit {
		out = out[:limit]
		if paged {
			next = doubleChargeCursor(out[limit-1])
		}
	}
	return out, next, nil
}
