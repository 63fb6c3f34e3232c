package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/statemachine"
)

// ErrBadCursor is returned for a cursor this package did not hand out.
var ErrBadCursor = errors.New("invalid cursor")

// PaymentFilter selects payments. Zero fields select everything.
type PaymentFilter struct {
	Status   statemachine.State
	Currency string
	// Reference and Customer select the payments of an order reference or
	// a customer, exactly.
	Reference string
	Customer  string
	// Q selects the payments a person searching for Q means: the payment
	// with that id, and those of that reference or customer, exactly; with
	// QEmail, also those whose receipt email is Q, whatever its case.
	Q      string
	QEmail bool
}

// DefaultPaymentLimit and MaxPaymentLimit bound a page of ListPayments.
const (
	DefaultPaymentLimit = 50
	MaxPaymentLimit     = 500
)

// The payment cursor is the (created_at, id) of the last payment of a page.
// created_at, not updated_at: a payment changes while a client pages, and a
// key that moves would skip it or show it twice.
func paymentCursor(p Payment) string { return keysetCursor("p1", p.CreatedAt, p.ID) }

func parsePaymentCursor(s string) (time.Time, string, error) { return parseKeysetCursor("p1", s) }

// ListPayments returns the payments f selects, newest first (by when paygate
// first saw them), limit at a time (DefaultPaymentLimit when zero, at most
// MaxPaymentLimit) after cursor (the first page when empty). next is the
// cursor of the following page, empty at the end.
//
// It fails with ErrBadCursor.
func ListPayments(ctx context.Context, q Querier, f PaymentFilter, cursor string, limit int) (payments []Payment, next string, err error) {
	conds, args := []string{"true"}, []any{}
	if f.Status != "" {
		args = append(args, string(f.Status))
		conds = append(conds, fmt.Sprintf("status = $%d", len(args)))
	}
	if f.Currency != "" {
		args = append(args, f.Currency)
		conds = append(conds, fmt.Sprintf("currency = $%d", len(args)))
	}
	if f.Reference != "" {
		args = append(args, f.Reference)
		conds = append(conds, fmt.Sprintf("reference = $%d", len(args)))
	}
	if f.Customer != "" {
		args = append(args, f.Customer)
		conds = append(conds, fmt.Sprintf("customer = $%d", len(args)))
	}
	if f.Q != "" {
		// Each alternative is one of the payments' indexes (the primary
		// key, payments_reference_idx, payments_customer_idx,
		// payments_receipt_email_idx): a lookup stays an index scan however
		// many payments there are.
		args = append(args, f.Q)
		n := len(args)
		alts := fmt.Sprintf("id = $%d OR reference = $%d OR customer = $%d", n, n, n)
		if f.QEmail {
			alts += fmt.Sprintf(" OR (lower(receipt_email) = lower($%d) AND receipt_email IS NOT NULL AND receipt_email <> '')", n)
		}
		conds = append(conds, "("+alts+")")
	}
	if cursor != "" {
		at, id, err := parsePaymentCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		args = append(args, at, id)
		conds = append(conds, fmt.Sprintf("(created_at, id) < ($%d, $%d)", len(args)-1, len(args)))
	}
	switch {
	case limit <= 0:
		limit = DefaultPaymentLimit
	case limit > MaxPaymentLimit:
		limit = MaxPaymentLimit
	}
	args = append(args, limit+1)
	rows, err := q.Query(ctx, `SELECT `+paymentColumns+` FROM payments WHERE `+strings.Join(conds, " AND ")+
		fmt.Sprintf(` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, "", fmt.Errorf("list payments: %w", err)
	}
	payments, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Payment, error) { return scanPayment(row) })
	if err != nil {
		return nil, "", fmt.Errorf("list payments: %w", err)
	}
	if len(payments) > limit {
		payments = payments[:limit]
		next = paymentCursor(payments[limit-1])
	}
	return payments, next, nil
}
