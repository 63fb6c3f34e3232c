package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
)

const ledgerUsage = `usage:
  paygate ledger snapshots [--rebuild]
      bring the balance snapshot up to a minute ago (serve does it every
      10 minutes); --rebuild makes it again from the ledger's entries
  paygate ledger close YYYY-MM
      close a month that has ended, as the finance API does (closed_by:
      cli:<the account running the command>), and print its digest
  paygate ledger export --from YYYY-MM-DD --to YYYY-MM-DD [--format generic|xero|quickbooks]
                        [--granularity day|transaction] [--currency C] [--part N]
      write the journal of the days from..to (inclusive, by posted_at) to
      standard output, rendered with PAYGATE_GL_ACCOUNTS; xero and
      quickbooks in PAYGATE_BOOKS_CURRENCY, xero in parts of at most 300
      lines (--part, from 1; standard error says how many there are)
`

func cmdLedger(ctx context.Context, cfg config, logger *slog.Logger, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"ledger: missing subcommand\n\n" + ledgerUsage}
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, ledgerUsage)
		return nil
	case "snapshots", "close", "export":
	default:
		return usageError{fmt.Sprintf("ledger: unknown subcommand %q\n\n%s", args[0], ledgerUsage)}
	}
	pool, err := openMigratedPool(ctx, cfg, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	settings := ledger.ExportSettings{Accounts: cfg.GLAccounts, XeroTaxRate: or(cfg.XeroTaxRate, api.DefaultXeroTaxRate),
		BooksCurrency: or(cfg.BooksCurrency, api.DefaultBooksCurrency)}

	switch args[0] {
	case "snapshots":
		fs := newFlagSet("ledger snapshots")
		rebuild := fs.Bool("rebuild", false, "discard the snapshot and build it again from the entries")
		if pos, err := parseInterleaved(fs, args[1:]); err != nil {
			return err
		} else if len(pos) != 0 {
			return usageError{"ledger snapshots takes no argument\n\n" + ledgerUsage}
		}
		began := time.Now()
		res, err := ledger.RefreshBalanceSnapshots(ctx, pool, &ledger.SnapshotOpts{Rebuild: *rebuild, Wait: time.Minute})
		if err != nil {
			return err
		}
		through := "nothing posted yet"
		if !res.Through.IsZero() {
			through = "everything posted before " + res.Through.Format(time.RFC3339)
		}
		fmt.Fprintf(stdout, "balance snapshot: %d cuts built in %s, %s\n", res.Built, time.Since(began).Round(time.Millisecond), through)
		return nil

	case "close":
		if len(args) != 2 {
			return usageError{"ledger close takes one YYYY-MM\n\n" + ledgerUsage}
		}
		p, err := ledger.ParsePeriod(args[1])
		if err != nil {
			return usageError{err.Error()}
		}
		var (
			closed  ledger.ClosedPeriod
			created bool
		)
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			closed, created, err = ledger.ClosePeriodTx(ctx, tx, p, cliActor(), settings, time.Now())
			if err != nil || !created {
				return err
			}
			return inbox.AppendAuditTx(ctx, tx, inbox.ActionPeriodClose, inbox.Operation{Actor: cliActor(), Reason: ledger.CloseAuditReason(closed)},
				inbox.Key{Provider: inbox.AuditProviderLedger, EventID: p.String()})
		})
		if err != nil {
			return err
		}
		state := "closed"
		if !created {
			state = "already closed"
		}
		fmt.Fprintf(stdout, "%s %s at %s by %s\ndigest %s\n", p, state, closed.ClosedAt.Format(time.RFC3339), closed.ClosedBy, closed.Digest)
		for _, c := range closed.TrialBalance.Currencies {
			fmt.Fprintf(stdout, "  %s debits %s credits %s\n", c.Currency, ledger.Format(c.Debits, c.Currency), ledger.Format(c.Credits, c.Currency))
		}
		return nil

	default: // export
		fs := newFlagSet("ledger export")
		from := fs.String("from", "", "the first UTC day, YYYY-MM-DD")
		to := fs.String("to", "", "the last UTC day, YYYY-MM-DD (inclusive)")
		format := fs.String("format", string(ledger.JournalGeneric), "generic, xero or quickbooks")
		granularity := fs.String("granularity", string(ledger.JournalByDay), "day or transaction")
		currency := fs.String("currency", "", "only this currency")
		part := fs.Int("part", 1, "the part of a xero export, from 1")
		if pos, err := parseInterleaved(fs, args[1:]); err != nil {
			return err
		} else if len(pos) != 0 {
			return usageError{"ledger export takes flags only\n\n" + ledgerUsage}
		}
		first, err1 := time.Parse(time.DateOnly, *from)
		last, err2 := time.Parse(time.DateOnly, *to)
		switch {
		case err1 != nil || err2 != nil:
			return usageError{"ledger export: --from and --to are UTC days written YYYY-MM-DD"}
		case last.Before(first):
			return usageError{"ledger export: --to is before --from"}
		case !ledger.JournalFormat(*format).Valid():
			return usageError{"ledger export: --format is generic, xero or quickbooks"}
		case !ledger.JournalGranularity(*granularity).Valid():
			return usageError{"ledger export: --granularity is day or transaction"}
		case *part < 1:
			return usageError{"ledger export: --part is a whole number from 1"}
		}
		w := bufio.NewWriter(stdout)
		sum, err := ledger.WriteJournal(ctx, pool, w, ledger.JournalOpts{From: first, To: last.AddDate(0, 0, 1),
			Format: ledger.JournalFormat(*format), Granularity: ledger.JournalGranularity(*granularity),
			Currency: *currency, Settings: settings, Part: *part})
		var pe *ledger.JournalPartError
		if errors.As(err, &pe) {
			return usageError{fmt.Sprintf("ledger export: the export has %d part(s), so no part %d", pe.Parts, pe.Part)}
		}
		if err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		logger.Info("journal exported", "journals", sum.Journals, "lines", sum.Lines, "part", *part, "parts", sum.Parts,
			"unconverted_movements", sum.Unconverted)
		return nil
	}
}
