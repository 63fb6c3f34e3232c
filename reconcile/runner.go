package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
)

// DefaultRecoveryWait bounds how long a run waits for the events it
// recovered to be processed before it matches.
const DefaultRecoveryWait = 2 * time.Minute

// Config configures a Runner.
type Config struct {
	Pool *pgxpool.Pool
	// Provider reads the days' statements (Stripe's balance transactions);
	// nil: runs of days cannot be performed.
	Provider Provider
	// Batches reads the settlement batches' statements (Adyen's reports);
	// nil: runs of batches cannot be performed.
	Batches Batches
	// Ingester commits recovered events through the normal ingest path;
	// nil skips the recovery (the events are still listed and counted).
	Ingester Ingester
	// RecoveryWait bounds the wait for recovered events to be processed;
	// DefaultRecoveryWait when zero, none when negative.
	RecoveryWait time.Duration
	// PollInterval is how often the wait looks at the inbox; 100 ms when
	// zero.
	PollInterval time.Duration
	// TimingWindow is how far past the day's edges the provider's records
	// are listed to find those of the day's ledger transactions that no
	// record of the day claimed; DefaultTimingWindow when zero, none when
	// negative (each is then looked up on its own).
	TimingWindow time.Duration
	Logger       *slog.Logger
	// Progress, when set, is told what the run is doing, a line at a time.
	Progress func(msg string)
	// Alert, when set, is called in the transaction that finishes a run
	// needing finance's attention (failed, or completed with exceptions), so
	// that the alert it enqueues commits with the outcome or not at all. Its
	// error rolls the outcome back.
	Alert func(ctx context.Context, tx pgx.Tx, a Alert) error
}

// Alert is a finished run that needs finance's attention.
type Alert struct {
	RunID int64
	// Scope is what the run reconciled; Date is its day (zero for a
	// batch's run).
	Scope  Scope
	Date   time.Time
	Status RunStatus // RunFailed or RunCompleted
	Error  string    // why it failed
	// Exceptions counts the completed run's items per status, for the
	// statuses that ask for someone's attention (see Exceptions).
	Exceptions map[Status]int
}

// Exceptions returns the item counts of summary that need someone's
// attention: every status but matched, and fee_posted, whose fee the run
// booked itself (nothing is left to do, and a daily alert for it would
// teach finance to ignore the alerts).
func Exceptions(summary map[Status]int) map[Status]int {
	out := map[Status]int{}
	for st, n := range summary {
		if n > 0 && st != StatusMatched && st != StatusFeePosted {
			out[st] = n
		}
	}
	return out
}

// Runner performs reconciliation runs.
type Runner struct {
	cfg Config
}

// New returns a Runner.
func New(cfg Config) *Runner {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RecoveryWait == 0 {
		cfg.RecoveryWait = DefaultRecoveryWait
	}
	if cfg.TimingWindow == 0 {
		cfg.TimingWindow = DefaultTimingWindow
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) {}
	}
	return &Runner{cfg: cfg}
}

// Pool is the database the runner works on.
func (r *Runner) Pool() *pgxpool.Pool { return r.cfg.Pool }

// DayProvider is the name of the provider whose days this runner
// reconciles; empty when it has none.
func (r *Runner) DayProvider() string {
	if r.cfg.Provider == nil {
		return ""
	}
	return r.cfg.Provider.Name()
}

// RunDay creates a run of the day provider's day and performs it at once
// (the CLI). The run is failed when it cannot be performed. It fails with
// the errors of Perform.
func (r *Runner) RunDay(ctx context.Context, day time.Time, trigger Trigger, requestedBy string) (Run, error) {
	return r.Run(ctx, DayScope(r.DayProvider(), day), trigger, requestedBy)
}

// Run creates a run of scope and performs it at once (the CLI). The run is
// failed when it cannot be performed. It fails with the errors of Perform.
func (r *Runner) Run(ctx context.Context, scope Scope, trigger Trigger, requestedBy string) (Run, error) {
	run, err := CreateRunTx(ctx, r.cfg.Pool, scope, trigger, requestedBy)
	if err != nil {
		return Run{}, err
	}
	r.cfg.Progress(fmt.Sprintf("run %d: reconciling %s", run.ID, scope))
	done, err := r.Perform(ctx, run.ID)
	if err != nil {
		if ferr := r.Fail(context.WithoutCancel(ctx), run.ID, err); ferr != nil {
			r.cfg.Logger.Error("mark run failed", "run_id", run.ID, "error", ferr.Error())
		}
		return r.reload(ctx, run), err
	}
	return done, nil
}

func (r *Runner) reload(ctx context.Context, run Run) Run {
	if got, err := GetRun(context.WithoutCancel(ctx), r.cfg.Pool, run.ID); err == nil {
		return got
	}
	return run
}

// Fail marks a running run failed with cause.
func (r *Runner) Fail(ctx context.Context, runID int64, cause error) error {
	return fail(ctx, r.cfg.Pool, runID, cause.Error(), r.cfg.Alert)
}

// NoteError records the error of an attempt that will be retried.
func (r *Runner) NoteError(ctx context.Context, runID int64, cause error) error {
	return noteError(ctx, r.cfg.Pool, runID, cause.Error())
}

// Perform carries out a running run, of a day (performDay) or of a
// settlement batch (performBatch), and stores the items and the report
// with the run's completion in one transaction.
//
// Performing a run again after a failed attempt is safe: the postings are
// idempotent by ref and nothing is stored before the completion. It fails
// with ErrRunNotFound, ErrRunFinished, errors wrapping ErrProvider or
// ErrCannotRun, or database errors.
func (r *Runner) Perform(ctx context.Context, runID int64) (Run, error) {
	run, err := GetRun(ctx, r.cfg.Pool, runID)
	if err != nil {
		return Run{}, err
	}
	if run.Status != RunRunning {
		return run, fmt.Errorf("run %d is %s: %w", run.ID, run.Status, ErrRunFinished)
	}
	if run.Batch != 0 {
		return r.performBatch(ctx, run)
	}
	if r.cfg.Provider == nil || r.cfg.Provider.Name() != run.Provider {
		return run, fmt.Errorf("%w: this server does not read %s's daily statements", ErrCannotRun, run.Provider)
	}
	return r.performDay(ctx, run)
}

// performDay recovers the day's missed events and waits (bounded) for them
// to be processed, lists the provider's balance transactions of the day,
// matches them with the ledger, posts the fees the ledger lacks, checks
// the day's unclaimed ledger transactions against the provider, and
// summarizes the payouts.
func (r *Runner) performDay(ctx context.Context, run Run) (Run, error) {
	from, to := run.Date, run.Date.AddDate(0, 0, 1)
	day := run.Date.Format(DateLayout)

	recovery, err := r.recoverEvents(ctx, from, to)
	if err != nil {
		return run, err
	}

	r.cfg.Progress("listing the provider's balance transactions of " + day)
	bts, err := r.cfg.Provider.BalanceTransactions(ctx, from, to)
	if err != nil {
		return run, err
	}
	slices.SortStableFunc(bts, func(a, b BalanceTransaction) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	r.cfg.Progress(fmt.Sprintf("%d balance transactions; reading the ledger", len(bts)))

	ledgerDay, err := ledger.TransactionsBetween(ctx, r.cfg.Pool, from, to)
	if err != nil {
		return run, err
	}
	m := newMatching(r, run.ID, ledgerDay)
	lines := make([][]Line, len(bts))
	for i, bt := range bts {
		lines[i] = LinesOf(bt, r.cfg.Provider.Lines(bt))
	}
	items, err := m.records(ctx, lines)
	if err != nil {
		return run, err
	}
	r.cfg.Progress(fmt.Sprintf("matched %d balance transactions; checking the ledger's unclaimed transactions", len(bts)))

	var pending []ledger.Transaction
	compared := 0
	for _, tx := range ledgerDay {
		if !r.cfg.Provider.Owns(tx.Ref) {
			continue
		}
		compared++
		if !m.claimed[tx.Ref] {
			pending = append(pending, tx)
		}
	}
	elsewhere, err := m.elsewhere(ctx, pending, bts, from, to)
	if err != nil {
		return run, err
	}
	var timing []TimingDifference
	for _, tx := range pending {
		if bt, found := elsewhere[tx.Ref]; found {
			timing = append(timing, TimingDifference{Ref: tx.Ref, LedgerOccurredAt: tx.OccurredAt,
				ProviderTxnID: bt.ID, ProviderCreated: bt.Created})
			continue
		}
		items = append(items, LedgerOnly(tx))
	}

	payouts, err := r.payouts(ctx, bts)
	if err != nil {
		return run, err
	}

	summary, currencies := Summarize(items)
	report := Report{
		Summary: summary,
		Counts: Counts{ProviderTransactions: len(bts), LedgerTransactions: compared, Items: len(items),
			RecoveredEvents: recovery.Recovered},
		Currencies:        currencies,
		Payouts:           payouts,
		Recovery:          recovery,
		TimingDifferences: timing,
	}
	if report.TimingDifferences == nil {
		report.TimingDifferences = []TimingDifference{}
	}
	if err := complete(ctx, r.cfg.Pool, run.ID, items, report, r.cfg.Alert); err != nil {
		return run, err
	}
	r.cfg.Logger.InfoContext(ctx, "reconciliation completed", "run_id", run.ID, "date", day,
		"items", len(items), "matched", summary[StatusMatched], "recovered_events", recovery.Recovered)
	return GetRun(ctx, r.cfg.Pool, run.ID)
}

// payouts summarizes what each payout of the day settled. A payout the
// provider refuses to filter by (a manual one) keeps the error in its entry
// rather than failing the run; any other failure fails the attempt.
func (r *Runner) payouts(ctx context.Context, bts []BalanceTransaction) ([]PayoutSettlement, error) {
	out := []PayoutSettlement{}
	for _, bt := range bts {
		if bt.Type != "payout" || bt.SourceID == "" {
			continue
		}
		r.cfg.Progress("listing what payout " + bt.SourceID + " settled")
		ps := PayoutSettlement{PayoutID: bt.SourceID, ProviderTxnID: bt.ID, Currency: bt.Currency,
			Amount: ledger.Format(money(-bt.Amount, bt.Currency), bt.Currency), SettledDays: []SettledDay{}}
		settled, err := r.cfg.Provider.PayoutTransactions(ctx, bt.SourceID)
		if err != nil {
			if !errors.Is(err, ErrProviderRefused) {
				return nil, err
			}
			ps.Error = err.Error()
			out = append(out, ps)
			continue
		}
		count, dayNet := map[string]int{}, map[string]int64{}
		net := int64(0)
		for _, s := range settled {
			if s.Type == "payout" && s.SourceID == bt.SourceID {
				continue // the payout's own record
			}
			d := s.Created.UTC().Format(DateLayout)
			count[d]++
			dayNet[d] += s.Net
			net += s.Net
			ps.SettledCount++
		}
		days := make([]string, 0, len(count))
		for d := range count {
			days = append(days, d)
		}
		slices.Sort(days)
		for _, d := range days {
			ps.SettledDays = append(ps.SettledDays, SettledDay{Date: d, Count: count[d],
				Net: ledger.Format(money(dayNet[d], bt.Currency), bt.Currency)})
		}
		ps.SettledNet = ledger.Format(money(net, bt.Currency), bt.Currency)
		ps.Difference = ledger.Format(money(net+bt.Amount, bt.Currency), bt.Currency)
		out = append(out, ps)
	}
	return out, nil
}

// recoverEvents lists the provider's events of the day and ingests those
// the inbox lacks through the normal ingest path, then waits, bounded, for
// them to be processed, so that their postings count in this run.
func (r *Runner) recoverEvents(ctx context.Context, from, to time.Time) (Recovery, error) {
	rec := Recovery{EventIDs: []string{}}
	r.cfg.Progress("listing the provider's events of " + from.Format(DateLayout))
	events, err := r.cfg.Provider.Events(ctx, from, to)
	if err != nil {
		return rec, err
	}
	rec.Listed = len(events)
	if r.cfg.Ingester == nil {
		return rec, nil
	}
	keys := make([]inbox.Key, len(events))
	for i, ev := range events {
		keys[i] = inbox.Key{Provider: r.cfg.Provider.Name(), EventID: ev.ID}
	}
	known, err := r.statuses(ctx, keys)
	if err != nil {
		return rec, fmt.Errorf("look up the listed events: %w", err)
	}
	for i, ev := range events {
		if _, ok := known[keys[i]]; ok {
			continue
		}
		duplicate, err := r.cfg.Ingester.IngestEvent(ctx, ev.Payload)
		if err != nil {
			return rec, fmt.Errorf("recover event %s: %w", ev.ID, err)
		}
		if !duplicate {
			rec.EventIDs = append(rec.EventIDs, ev.ID)
		}
	}
	rec.Recovered = len(rec.EventIDs)
	if rec.Recovered == 0 {
		return rec, nil
	}
	r.cfg.Progress(fmt.Sprintf("recovered %d missed events; waiting for them to be processed", rec.Recovered))
	pending := make([]inbox.Key, len(rec.EventIDs))
	for i, id := range rec.EventIDs {
		pending[i] = inbox.Key{Provider: r.cfg.Provider.Name(), EventID: id}
	}
	deadline := time.Now().Add(max(r.cfg.RecoveryWait, 0))
	for {
		now, err := r.statuses(ctx, pending)
		if err != nil {
			return rec, fmt.Errorf("look up the recovered events: %w", err)
		}
		still := pending[:0]
		for _, k := range pending {
			st, ok := now[k]
			if !ok {
				return rec, fmt.Errorf("look up recovered event %s: %w", k.EventID, inbox.ErrNotFound)
			}
			if st == inbox.StatusReceived {
				still = append(still, k)
			}
		}
		pending = still
		if len(pending) == 0 || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return rec, ctx.Err()
		case <-time.After(r.cfg.PollInterval):
		}
	}
	rec.Pending = len(pending)
	rec.Settled = rec.Recovered - rec.Pending
	if rec.Pending > 0 {
		r.cfg.Logger.WarnContext(ctx, "recovered events not processed before matching", "pending", rec.Pending)
	}
	return rec, nil
}

// statuses reads the inbox statuses of keys, a chunk of them per query,
// without their payloads.
func (r *Runner) statuses(ctx context.Context, keys []inbox.Key) (map[inbox.Key]inbox.Status, error) {
	out := make(map[inbox.Key]inbox.Status, len(keys))
	for chunk := range slices.Chunk(keys, lookupChunk) {
		got, err := inbox.KeyStatuses(ctx, r.cfg.Pool, chunk)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, got)
	}
	return out, nil
}
