package reconcile

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes a run's human summary, the one `paygate reconcile`
// prints: its outcome, the count per status, the totals per currency and
// reporting category, the payouts, the recovered events, and every item that
// is not matched (fees posted included, so finance sees what was booked).
func WriteText(w io.Writer, run Run, items []Item) error {
	return writeText(w, run, func(fn func(Item) error) error {
		for _, it := range items {
			if err := fn(it); err != nil {
				return err
			}
		}
		return nil
	})
}

// WriteRunText is WriteText reading the run's items from the database a
// page at a time (EachItem), so that the summary of a run of any size is
// written in bounded memory; the columns of the items not matched are
// aligned per page of MaxLimit.
func WriteRunText(ctx context.Context, q Querier, w io.Writer, run Run) error {
	return writeText(w, run, func(fn func(Item) error) error { return EachItem(ctx, q, run.ID, fn) })
}

// writeText writes the summary with the items each walks.
func writeText(w io.Writer, run Run, each func(func(Item) error) error) error {
	var b strings.Builder
	if run.Batch != 0 {
		fmt.Fprintf(&b, "Reconciliation run %d of %s settlement batch %d: %s\n", run.ID, run.Provider, run.Batch, run.Status)
	} else {
		fmt.Fprintf(&b, "Reconciliation run %d of %s (UTC): %s\n", run.ID, run.Date.Format(DateLayout), run.Status)
	}
	fmt.Fprintf(&b, "  started %s", run.StartedAt.UTC().Format(time.RFC3339))
	if run.FinishedAt != nil {
		fmt.Fprintf(&b, ", finished %s", run.FinishedAt.UTC().Format(time.RFC3339))
	}
	b.WriteString("\n")
	if run.Error != "" {
		fmt.Fprintf(&b, "  error: %s\n", run.Error)
	}
	r := run.Report
	if r == nil {
		_, err := io.WriteString(w, b.String())
		return err
	}
	if run.Batch != 0 {
		fmt.Fprintf(&b, "  %d records of the batch's report, %d ledger transactions matched, %d items\n",
			r.Counts.ProviderTransactions, r.Counts.LedgerTransactions, r.Counts.Items)
	} else {
		fmt.Fprintf(&b, "  %d provider balance transactions, %d ledger transactions of the day, %d items\n",
			r.Counts.ProviderTransactions, r.Counts.LedgerTransactions, r.Counts.Items)
	}
	if f := r.Statement; f != nil {
		fmt.Fprintf(&b, "  report %s, %d bytes, sha256 %s\n", f.FileName, f.Size, f.SHA256)
	}

	b.WriteString("\nItems by status\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
	for _, s := range Statuses {
		fmt.Fprintf(tw, "  %s\t%d\t\n", s, r.Summary[s])
	}
	tw.Flush()

	if run.Batch == 0 {
		fmt.Fprintf(&b, "\nRecovered events: %d of %d listed by the provider", r.Recovery.Recovered, r.Recovery.Listed)
		if r.Recovery.Recovered > 0 {
			fmt.Fprintf(&b, " (%d processed before matching, %d still pending)", r.Recovery.Settled, r.Recovery.Pending)
		}
		b.WriteString("\n")
		for _, id := range r.Recovery.EventIDs {
			fmt.Fprintf(&b, "  %s\n", id)
		}
	}

	if len(r.Currencies) > 0 {
		b.WriteString("\nTotals per currency and reporting category (provider vs ledger)\n")
		tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "  currency\tcategory\tprovider gross\tprovider fee\tprovider net\tledger gross\tledger fee\tledger net\tdifference\t\n")
		for _, c := range r.Currencies {
			for _, t := range append(c.Categories, c.Total) {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Currency, t.ReportingCategory,
					t.ProviderGross, t.ProviderFee, t.ProviderNet, t.LedgerGross, t.LedgerFee, t.LedgerNet, t.Difference)
			}
		}
		tw.Flush()
	}

	if len(r.Payouts) > 0 {
		b.WriteString("\nPayouts and what they settled\n")
		for _, p := range r.Payouts {
			if p.Error != "" {
				fmt.Fprintf(&b, "  %s %s %s: settled transactions unavailable: %s\n", p.PayoutID, p.Amount, p.Currency, p.Error)
				continue
			}
			fmt.Fprintf(&b, "  %s %s %s: %d transactions, net %s (difference %s)\n",
				p.PayoutID, p.Amount, p.Currency, p.SettledCount, p.SettledNet, p.Difference)
			for _, d := range p.SettledDays {
				fmt.Fprintf(&b, "    %s: %d transactions, net %s\n", d.Date, d.Count, d.Net)
			}
		}
	}

	if len(r.TimingDifferences) > 0 {
		b.WriteString("\nLedger transactions of the day the provider booked on another day\n")
		for _, t := range r.TimingDifferences {
			fmt.Fprintf(&b, "  %s: ledger %s, provider %s on %s\n", t.Ref,
				t.LedgerOccurredAt.UTC().Format(time.RFC3339), t.ProviderTxnID, t.ProviderCreated.UTC().Format(DateLayout))
		}
	}

	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	var (
		items *tabwriter.Writer
		row   int
	)
	err := each(func(it Item) error {
		if it.Status == StatusMatched {
			return nil
		}
		if items == nil {
			if _, err := io.WriteString(w, "\nItems not matched\n"); err != nil {
				return err
			}
			items = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprint(items, "  status\tprovider_txn_id\tsource_id\tref\ttype\tcurrency\tprovider_amount\tprovider_fee\tledger_amount\n")
		}
		rec := it.Record()
		for i := range rec {
			if rec[i] == "" {
				rec[i] = "-"
			}
		}
		fmt.Fprintf(items, "  %s\n", strings.Join(rec, "\t"))
		if row++; row%MaxLimit == 0 {
			return items.Flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	if items != nil {
		if err := items.Flush(); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, "\nFull report: GET /v1/reconciliation/runs/%d (CSV: /v1/reconciliation/runs/%d/items.csv)\n", run.ID, run.ID)
	return err
}
