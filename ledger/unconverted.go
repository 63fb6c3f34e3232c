package ledger

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// unconvertedCTE (after settledCTE) is what an export in the books
// currency ($3) of [$1, $2) leaves out: the movements in another currency
// posted in the range that no settlement into the books currency reached
// by $2 (conversions themselves are never exported, so never left out);
// $4 keeps the movements made in one currency ("" all). Counting them
// (WriteJournal's Unconverted) and listing them (ListUnconverted) read
// this one predicate, so that the two never disagree.
const unconvertedCTE = `, unconverted AS (
    SELECT t.id, t.posted_at FROM ledger_transactions t
    WHERE t.posted_at >= $1 AND t.posted_at < $2 AND t.currency <> $3 AND t.exchange_rate IS NULL
      AND ($4 = '' OR t.currency = $4)
      AND NOT EXISTS (SELECT 1 FROM converted c WHERE c.id = t.id AND c.at < $2)
)`

func countUnconverted(ctx context.Context, q Querier, o JournalOpts, books string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `WITH `+settledCTE+unconvertedCTE+` SELECT count(*) FROM unconverted`,
		o.From, o.To, books, o.Currency).Scan(&n)
	return n, err
}

// UnconvertedFilter selects the movements an export in BooksCurrency of
// the transactions posted in [From, To) leaves out; Currency keeps those
// made in one currency ("" all).
type UnconvertedFilter struct {
	From, To      time.Time
	BooksCurrency string
	Currency      string
}

// UnconvertedMovement is a ledger transaction a journal export in the
// books currency leaves out: its provider had not settled it into the
// books currency by the end of the export's range.
type UnconvertedMovement struct {
	// ID is the transaction's id, the number of its journal (PG-T<id>)
	// in the exports by transaction.
	ID       int64
	Ref      string
	PostedAt time.Time
	Kind     Kind
	Currency string
	// Amount is what the transaction moves, the sum of its debits, in
	// its own currency.
	Amount decimal.Decimal
	// PaymentID is "" for a movement of no payment (a payout); Reference
	// is the payment's order reference as it stands, "" when it has none.
	PaymentID string
	Reference string
}

// DefaultUnconvertedLimit and MaxUnconvertedLimit bound a page of
// ListUnconverted: a month may leave thousands out.
const (
	DefaultUnconvertedLimit = 50
	MaxUnconvertedLimit     = 500
)

// ListUnconverted returns the movements an export in f.BooksCurrency of
// [f.From, f.To) leaves out, the very ones its Unconverted counts, in
// posting order (posted_at, then id), limit at a time after cursor; next
// is empty at the end.
//
// It fails with ErrInvalidPeriod for an empty range, ErrBadCursor, an
// error naming a books currency it does not know, or the database's
// error.
func ListUnconverted(ctx context.Context, q Querier, f UnconvertedFilter, cursor string, limit int) ([]UnconvertedMovement, string, error) {
	switch {
	case limit <= 0:
		limit = DefaultUnconvertedLimit
	case limit > MaxUnconvertedLimit:
		limit = MaxUnconvertedLimit
	}
	if !f.From.Before(f.To) {
		return nil, "", fmt.Errorf("%w: the range [%s, %s) is empty", ErrInvalidPeriod, f.From.Format(time.RFC3339), f.To.Format(time.RFC3339))
	}
	if _, err := Exponent(f.BooksCurrency); err != nil {
		return nil, "", fmt.Errorf("list the movements not settled into %q: %w", f.BooksCurrency, err)
	}
	// The first page starts before every movement of the range: a
	// condition the index on posted_at serves on every page alike.
	after, afterID := f.From, int64(math.MinInt64)
	if cursor != "" {
		var err error
		if after, afterID, err = parseUnconvertedCursor(cursor); err != nil {
			return nil, "", err
		}
	}
	rows, err := q.Query(ctx, `WITH `+settledCTE+unconvertedCTE+`
		SELECT t.id, t.ref, t.posted_at, t.kind, t.currency,
		       (SELECT sum(e.debit) FROM ledger_entries e WHERE e.transaction_id = t.id)::text,
		       coalesce(t.payment_id, ''), coalesce(p.reference, '')
		FROM unconverted u JOIN ledger_transactions t ON t.id = u.id
		LEFT JOIN payments p ON p.id = t.payment_id
		WHERE (u.posted_at, u.id) > ($5, $6)
		ORDER BY u.posted_at, u.id
		LIMIT $7`,
		f.From, f.To, f.BooksCurrency, f.Currency, after, afterID, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list the movements not settled into %s: %w", f.BooksCurrency, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (UnconvertedMovement, error) {
		var m UnconvertedMovement
		var amountText string
		if err := row.Scan(&m.ID, &m.Ref, &m.PostedAt, &m.Kind, &m.Currency, &amountText, &m.PaymentID, &m.Reference); err != nil {
			return m, err
		}
		amount, err := decimal.NewFromString(amountText)
		if err != nil {
			return m, fmt.Errorf("parse the amount of %s: %w", m.Ref, err)
		}
		m.Amount, m.PostedAt = present(amount, m.Currency), m.PostedAt.UTC()
		return m, nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("list the movements not settled into %s: %w", f.BooksCurrency, err)
	}
	var next string
	if len(out) > limit {
		out = out[:limit]
		next = unconvertedCursor(out[limit-1])
	}
	return out, next, nil
}

func unconvertedCursor(m UnconvertedMovement) string {
	return keysetCursor("u1", m.PostedAt, strconv.FormatInt(m.ID, 10))
}

func parseUnconvertedCursor(s string) (time.Time, int64, error) {
	at, key, err := parseKeysetCursor("u1", s)
	if err != nil {
		return time.Time{}, 0, err
	}
	id, err := strconv.ParseInt(key, 10, 64)
	if err != nil {
		return time.Time{}, 0, ErrBadCursor
	}
	return at, id, nil
}
