package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/refund"
)

const refundUsage = `usage:
  paygate refund PAYMENT_ID [--amount 12.50] [--reason requested_by_customer] [--note "…"] [--wait 30s]
  paygate refund show REQUEST_ID

Records a refund request (the whole refundable amount unless --amount is
given), which a running paygate serve submits to the provider (with its
PAYGATE_STRIPE_API_KEY, or its PAYGATE_ADYEN_API_KEY and
PAYGATE_ADYEN_MERCHANT_ACCOUNT; without them the request fails), and
follows it for --wait (0: do not wait), printing each state it reaches.
`

func cmdRefund(ctx context.Context, cfg config, logger *slog.Logger, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"refund: missing PAYMENT_ID\n\n" + refundUsage}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, refundUsage)
		return nil
	}
	pool, err := openMigratedPool(ctx, cfg, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if args[0] == "show" {
		if len(args) != 2 {
			return usageError{"refund show takes one REQUEST_ID\n\n" + refundUsage}
		}
		r, err := refund.Get(ctx, pool, args[1])
		if err != nil {
			return err
		}
		printRefund(stdout, r)
		return nil
	}

	fs := newFlagSet("refund")
	amount := fs.String("amount", "", "amount in the payment's major unit (default: all that is refundable)")
	reason := fs.String("reason", "", "duplicate, fraudulent or requested_by_customer")
	note := fs.String("note", "", "why, for the request and the audit log")
	wait := fs.Duration("wait", 30*time.Second, "how long to follow the request (0: do not wait)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"refund takes one PAYMENT_ID\n\n" + refundUsage}
	}
	n := refund.New{PaymentID: pos[0], Reason: *reason, Note: strings.TrimSpace(*note), Actor: cliActor()}
	if *amount != "" {
		d, err := decimal.NewFromString(*amount)
		if err != nil || strings.ContainsAny(*amount, "eE") {
			return usageError{fmt.Sprintf("--amount %q is not a decimal such as 12.50", *amount)}
		}
		n.Amount = decimal.NewNullDecimal(d)
	}
	jc, err := jobs.NewClient(pool, jobs.Config{Logger: logger, InsertOnly: true})
	if err != nil {
		return err
	}
	// The refund clients are serve's, whose configuration this process
	// need not share: any provider paygate has a refund client for is
	// accepted, and serve fails a request it cannot submit.
	n.CanRefund = func(p string) bool { return p == stripe.Name || p == adyen.Name }
	var r refund.Request
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if r, err = refund.CreateTx(ctx, tx, n); err != nil {
			return err
		}
		if err := jc.InsertSubmitRefundTx(ctx, tx, r.ID); err != nil {
			return err
		}
		op := inbox.Operation{Actor: n.Actor, Reason: n.Note}
		return inbox.AppendAuditTx(ctx, tx, inbox.ActionRefundRequest, op, inbox.Key{Provider: r.Provider, EventID: r.ID})
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "refund request %s: %s %s of payment %s, by %s\n", r.ID, ledger.Format(r.Amount, r.Currency),
		r.Currency, r.PaymentID, r.Actor)
	return followRefund(ctx, pool, r, *wait, stdout)
}

// followRefund prints each state the request reaches until it settles or
// wait passes.
func followRefund(ctx context.Context, pool *pgxpool.Pool, r refund.Request, wait time.Duration, stdout io.Writer) error {
	fmt.Fprintf(stdout, "  %-9s %s\n", r.State, r.CreatedAt.UTC().Format(time.RFC3339))
	deadline := time.Now().Add(wait)
	last := r.State
	for r.State.Open() && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		var err error
		if r, err = refund.Get(ctx, pool, r.ID); err != nil {
			return err
		}
		if r.State != last {
			line := fmt.Sprintf("  %-9s %s", r.State, r.UpdatedAt.UTC().Format(time.RFC3339))
			if r.ProviderRefundID != "" {
				line += "  " + r.Provider + " refund " + r.ProviderRefundID
			}
			if r.FailureReason != "" {
				line += "  " + r.FailureReason
			}
			fmt.Fprintln(stdout, line)
			last = r.State
		}
	}
	if r.State.Open() {
		fmt.Fprintf(stdout, "still %s; `paygate refund show %s` tells where it stands\n", r.State, r.ID)
	}
	return nil
}

func printRefund(w io.Writer, r refund.Request) {
	fmt.Fprintf(w, "refund request %s\n", r.ID)
	for _, kv := range [][2]string{
		{"payment", r.PaymentID + " (" + r.Provider + ")"},
		{"amount", ledger.Format(r.Amount, r.Currency) + " " + r.Currency},
		{"reason", r.Reason}, {"note", r.Note}, {"state", string(r.State)},
		{"refund", r.ProviderRefundID}, {"failure", r.FailureReason}, {"actor", r.Actor},
		{"created", r.CreatedAt.UTC().Format(time.RFC3339)}, {"updated", r.UpdatedAt.UTC().Format(time.RFC3339)},
	} {
		if kv[1] != "" {
			fmt.Fprintf(w, "  %-8s %s\n", kv[0], kv[1])
		}
	}
}
