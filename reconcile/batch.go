package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/paygate/paygate/ledger"
)

// StatementFile names the file a batch's run reconciled: the settlement
// report as it was downloaded.
type StatementFile struct {
	FileName     string    `json:"file_name"`
	SHA256       string    `json:"sha256"`
	Size         int64     `json:"size"`
	DownloadedAt time.Time `json:"downloaded_at"`
}

// performBatch reconciles a settlement batch: it reads the batch's stored
// report through the provider (Batches), matches each record's lines with
// the ledger, posts the fees and the payout the ledger lacks, and checks
// each payout against the sum of the nets it paid out in its currency.
//
// A batch is not a period of the ledger: a capture of the batch's week may
// settle in the next batch, so nothing is missing_at_provider here; what
// the ledger holds and no batch has settled shows up as the batch's
// movements missing_in_ledger elsewhere, or in the days' runs.
func (r *Runner) performBatch(ctx context.Context, run Run) (Run, error) {
	src := r.cfg.Batches
	if src == nil || src.Name() != run.Provider {
		return run, fmt.Errorf("%w: this server does not read %s's settlement batches", ErrCannotRun, run.Provider)
	}
	report, err := ReportOfBatch(ctx, r.cfg.Pool, run.Provider, run.Batch)
	if errors.Is(err, ErrReportNotFound) {
		return run, fmt.Errorf("%w: %w", ErrCannotRun, err)
	}
	if err != nil {
		return run, err
	}
	r.cfg.Progress(fmt.Sprintf("reading %s (%d bytes)", report.FileName, report.Size))
	records, err := src.Statement(run.Batch, report.Body)
	if err != nil {
		return run, fmt.Errorf("%w: %s: %w", ErrCannotRun, report.FileName, err)
	}
	lines := make([][]Line, len(records))
	for i, rec := range records {
		lines[i] = LinesOf(rec.BalanceTransaction, rec.Lines)
	}
	m := newMatching(r, run.ID, nil)
	items, err := m.records(ctx, lines)
	if err != nil {
		return run, err
	}
	payouts := checkPayouts(run.Batch, lines, items)

	refs := map[string]bool{}
	for _, it := range items {
		if it.LedgerAmount != nil && it.Ref != "" {
			refs[it.Ref] = true
		}
	}
	summary, currencies := Summarize(items)
	rep := Report{
		Summary:           summary,
		Counts:            Counts{ProviderTransactions: len(records), LedgerTransactions: len(refs), Items: len(items)},
		Currencies:        currencies,
		Payouts:           payouts,
		Recovery:          Recovery{EventIDs: []string{}},
		TimingDifferences: []TimingDifference{},
		Statement:         &StatementFile{FileName: report.FileName, SHA256: report.SHA256, Size: report.Size},
	}
	if report.DownloadedAt != nil {
		rep.Statement.DownloadedAt = report.DownloadedAt.UTC()
	}
	if err := complete(ctx, r.cfg.Pool, run.ID, items, rep, r.cfg.Alert); err != nil {
		return run, err
	}
	r.cfg.Logger.InfoContext(ctx, "reconciliation completed", "run_id", run.ID, "provider", run.Provider, "batch", run.Batch,
		"items", len(items), "matched", summary[StatusMatched])
	return GetRun(ctx, r.cfg.Pool, run.ID)
}

// isPayout reports a line that pays the batch out (or a payout the bank
// returned).
func isPayout(l Line) bool { return l.Kind == ledger.KindPayout || l.Kind == ledger.KindPayoutReversal }

// checkPayouts summarizes each payout of the batch against the records it
// paid out, those of its currency, and marks the payout's item
// amount_mismatch when the payout is not the sum of their nets. items
// holds one item per line, in the order of lines.
func checkPayouts(batch int64, lines [][]Line, items []Item) []PayoutSettlement {
	type currencyTotals struct {
		count  int
		net    int64
		days   map[string]*SettledDay
		dayNet map[string]int64
	}
	byCur := map[string]*currencyTotals{}
	totalsOf := func(cur string) *currencyTotals {
		t := byCur[cur]
		if t == nil {
			t = &currencyTotals{days: map[string]*SettledDay{}, dayNet: map[string]int64{}}
			byCur[cur] = t
		}
		return t
	}
	type payout struct {
		line Line
		item int
	}
	var payouts []payout
	pos := 0
	for _, ls := range lines {
		paysOut := false
		for i, l := range ls {
			if isPayout(l) {
				payouts = append(payouts, payout{line: l, item: pos + i})
				paysOut = true
			}
		}
		if !paysOut && len(ls) > 0 {
			bt := ls[0].BT
			t := totalsOf(bt.Currency)
			t.count++
			t.net += bt.Net
			d := bt.Created.UTC().Format(DateLayout)
			if t.days[d] == nil {
				t.days[d] = &SettledDay{Date: d}
			}
			t.days[d].Count++
			t.dayNet[d] += bt.Net
		}
		pos += len(ls)
	}

	paidOut := map[string]int64{}
	for _, p := range payouts {
		paidOut[p.line.BT.Currency] -= p.line.Amount
	}
	out := []PayoutSettlement{}
	for _, p := range payouts {
		bt := p.line.BT
		t := totalsOf(bt.Currency)
		id := bt.SourceID
		if id == "" {
			id = fmt.Sprintf("batch %d", batch)
		}
		ps := PayoutSettlement{PayoutID: id, ProviderTxnID: bt.ID, Currency: bt.Currency,
			Amount: ledger.Format(money(-p.line.Amount, bt.Currency), bt.Currency), SettledCount: t.count,
			SettledNet:  ledger.Format(money(t.net, bt.Currency), bt.Currency),
			Difference:  ledger.Format(money(t.net-paidOut[bt.Currency], bt.Currency), bt.Currency),
			SettledDays: []SettledDay{}}
		days := make([]string, 0, len(t.days))
		for d := range t.days {
			days = append(days, d)
		}
		slices.Sort(days)
		for _, d := range days {
			sd := *t.days[d]
			sd.Net = ledger.Format(money(t.dayNet[d], bt.Currency), bt.Currency)
			ps.SettledDays = append(ps.SettledDays, sd)
		}
		out = append(out, ps)
		if t.net != paidOut[bt.Currency] && items[p.item].Status == StatusMatched {
			// The ledger holds the payout as the provider reported it, but
			// the batch does not add up to it.
			items[p.item].Status = StatusAmountMismatch
		}
	}
	return out
}
