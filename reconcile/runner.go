package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider/stripe"
)

// providerName is the inbox's name for the provider reconciled here.
const providerName = "stripe"

// DefaultRecoveryWait bounds how long a run waits for the events it
// recovered to be processed before it matches.
const DefaultRecoveryWait = 2 * time.Minute

// Config configures a Runner.
type Config struct {
	Pool     *pgxpool.Pool
	Provider Provider
	// Ingester commits recovered events through the normal ingest path;
	// nil skips the recovery (the events are still listed and counted).
	Ingester Ingester
	// RecoveryWait bounds the wait for recovered events to be processed;
	// DefaultRecoveryWait when zero, none when negative.
	RecoveryWait time.Duration
	// PollInterval is how often the wait looks at the inbox; 100 ms when
	// zero.
	PollInterval time.Duration
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
	RunID  int64
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

// RunDay creates a run of day and performs it at once (the CLI). The run is
// failed when it cannot be performed. It fails with the errors of Perform.
func (r *Runner) RunDay(ctx context.Context, day time.Time, trigger Trigger, requestedBy string) (Run, error) {
	run, err := CreateRunTx(ctx, r.cfg.Pool, day, trigger, requestedBy)
	if err != nil {
		return Run{}, err
	}
	r.cfg.Progress(fmt.Sprintf("run %d: reconciling %s", run.ID, day.Format(DateLayout)))
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

// Perform carries out a running run: it recovers the day's missed events
// and waits (bounded) for them to be processed, lists the provider's
// balance transactions of the day, matches them with the ledger, posts the
// fees the ledger lacks, checks the day's unclaimed ledger transactions
// against the provider, summarizes the payouts, and stores the items and
// the report with the run's completion in one transaction.
//
// Performing a run again after a failed attempt is safe: fee postings are
// idempotent by ref and nothing is stored before the completion. It fails
// with ErrRunNotFound, ErrRunFinished, errors wrapping ErrProvider, or
// database errors.
func (r *Runner) Perform(ctx context.Context, runID int64) (Run, error) {
	run, err := GetRun(ctx, r.cfg.Pool, runID)
	if err != nil {
		return Run{}, err
	}
	if run.Status != RunRunning {
		return run, fmt.Errorf("run %d is %s: %w", run.ID, run.Status, ErrRunFinished)
	}
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
	m := &matching{r: r, postedBy: PostedBy(run.ID), byRef: make(map[string]*ledger.Transaction, len(ledgerDay)), claimed: map[string]bool{}}
	for i := range ledgerDay {
		m.byRef[ledgerDay[i].Ref] = &ledgerDay[i]
	}

	var items []Item
	for i, bt := range bts {
		its, err := m.record(ctx, bt)
		if err != nil {
			return run, err
		}
		items = append(items, its...)
		if (i+1)%500 == 0 {
			r.cfg.Progress(fmt.Sprintf("matched %d of %d balance transactions", i+1, len(bts)))
		}
	}

	var timing []TimingDifference
	compared := 0
	for _, tx := range ledgerDay {
		if !Compared(tx) {
			continue
		}
		compared++
		if m.claimed[tx.Ref] {
			continue
		}
		elsewhere, found, err := m.atProvider(ctx, tx.Ref)
		if err != nil {
			return run, err
		}
		if found {
			timing = append(timing, TimingDifference{Ref: tx.Ref, LedgerOccurredAt: tx.OccurredAt,
				ProviderTxnID: elsewhere.ID, ProviderCreated: elsewhere.Created})
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

// matching is one run's view of the ledger while it walks the provider's
// records.
type matching struct {
	r        *Runner
	postedBy string                         // the mark on the fees this run posts
	byRef    map[string]*ledger.Transaction // the day's, and every ref looked up since
	missing  map[string]bool
	claimed  map[string]bool // refs a provider record of the day matched
}

// lookup returns the ledger transaction with ref wherever the ledger dated
// it, nil when there is none.
func (m *matching) lookup(ctx context.Context, ref string) (*ledger.Transaction, error) {
	if tx, ok := m.byRef[ref]; ok {
		return tx, nil
	}
	if m.missing[ref] {
		return nil, nil
	}
	tx, err := ledger.TransactionByRef(ctx, m.r.cfg.Pool, ref)
	if errors.Is(err, ledger.ErrNotFound) {
		if m.missing == nil {
			m.missing = map[string]bool{}
		}
		m.missing[ref] = true
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m.byRef[ref] = &tx
	return &tx, nil
}

// record matches one provider record's lines and posts its missing fees.
func (m *matching) record(ctx context.Context, bt BalanceTransaction) ([]Item, error) {
	lines := Lines(bt)
	out := make([]Item, 0, len(lines))
	paymentID := ""
	for _, l := range lines {
		var tx *ledger.Transaction
		if l.Ref != "" {
			var err error
			if tx, err = m.lookup(ctx, l.Ref); err != nil {
				return nil, err
			}
		}
		if tx != nil {
			m.claimed[l.Ref] = true
			if !l.Fee {
				paymentID = tx.PaymentID
			}
		}
		if tx == nil && l.Fee && l.Ref != "" && l.Amount != 0 {
			it, err := m.postFee(ctx, l, paymentID)
			if err != nil {
				return nil, err
			}
			out = append(out, it)
			continue
		}
		if tx != nil && !l.Fee && tx.Currency != bt.Currency && bt.ExchangeRate.Valid {
			it, err := m.settle(ctx, l, tx)
			if err != nil {
				return nil, err
			}
			out = append(out, it)
			continue
		}
		it := Compare(l, tx)
		if l.Fee && tx != nil && tx.EventID == m.postedBy && it.Status == StatusMatched {
			it.Status = StatusFeePosted // by an earlier attempt of this run
		}
		out = append(out, it)
	}
	return out, nil
}

// postFee posts a fee the ledger lacks. When the ref turns out to be posted
// already (a concurrent run, or different content), the item compares with
// what the ledger holds instead.
func (m *matching) postFee(ctx context.Context, l Line, paymentID string) (Item, error) {
	fee := FeeTransaction(l, paymentID, m.postedBy)
	var created bool
	err := pgx.BeginFunc(ctx, m.r.cfg.Pool, func(tx pgx.Tx) error {
		var err error
		created, err = ledger.PostTx(ctx, tx, fee)
		return err
	})
	if err != nil && !errors.Is(err, ledger.ErrRefConflict) {
		return Item{}, fmt.Errorf("post fee %s: %w", l.Ref, err)
	}
	m.claimed[l.Ref] = true
	delete(m.missing, l.Ref)
	stored, rerr := ledger.TransactionByRef(ctx, m.r.cfg.Pool, l.Ref)
	if rerr != nil {
		return Item{}, fmt.Errorf("read fee %s: %w", l.Ref, rerr)
	}
	m.byRef[l.Ref] = &stored
	it := Compare(l, &stored)
	if (created || stored.EventID == m.postedBy) && it.Status == StatusMatched {
		it.Status = StatusFeePosted
	}
	return it, nil
}

// settle matches a movement the provider booked in another currency than
// the ledger posted it in, at the rate it reports: the ledger's conversion
// of moved into the settlement currency (ledger.NewSettlement, refs
// stripe:fx:<txn>:<currency>) is posted when missing, and the item compares
// the provider's amount with the settlement leg, in the settlement
// currency, showing the presentment side and the rate beside it.
func (m *matching) settle(ctx context.Context, l Line, moved *ledger.Transaction) (Item, error) {
	bt := l.BT
	legRef := func(currency string) string { return stripe.SettlementRef(bt.ID, currency) }
	presented := ledger.Money{Amount: Effect(*moved), Currency: moved.Currency}
	legs := ledger.NewSettlement(legRef, moved.PaymentID, m.postedBy, presented,
		ledger.Money{Amount: money(l.Amount, bt.Currency), Currency: bt.Currency}, bt.ExchangeRate.Decimal, bt.Created)
	var stored [2]*ledger.Transaction
	for i, leg := range legs {
		tx, err := m.lookup(ctx, leg.Ref)
		if err != nil {
			return Item{}, err
		}
		stored[i] = tx
	}
	if stored[0] == nil || stored[1] == nil {
		err := pgx.BeginFunc(ctx, m.r.cfg.Pool, func(tx pgx.Tx) error {
			_, err := ledger.PostManyTx(ctx, tx, legs[:])
			return err
		})
		if err != nil && !errors.Is(err, ledger.ErrRefConflict) {
			return Item{}, fmt.Errorf("post settlement of %s: %w", bt.ID, err)
		}
		for i, leg := range legs {
			delete(m.missing, leg.Ref)
			got, err := ledger.TransactionByRef(ctx, m.r.cfg.Pool, leg.Ref)
			if err != nil {
				return Item{}, fmt.Errorf("read settlement %s: %w", leg.Ref, err)
			}
			m.byRef[leg.Ref] = &got
			stored[i] = &got
		}
	}
	for _, leg := range legs {
		m.claimed[leg.Ref] = true
	}
	it := Compare(l, stored[1])
	it.Ref = l.Ref
	it.PresentmentCurrency = moved.Currency
	it.PresentmentAmount = ptr(presented.Amount)
	rate := bt.ExchangeRate.Decimal
	it.ExchangeRate = &rate
	if it.Status == StatusMatched && !Effect(*stored[0]).Equal(presented.Amount.Neg()) {
		// The conversion stored earlier took another presentment amount
		// out of the balance than the movement put in.
		it.Status = StatusAmountMismatch
	}
	return it, nil
}

// atProvider looks for the provider's record of a ledger ref that no record
// of the day claimed, on whatever day the provider booked it.
func (m *matching) atProvider(ctx context.Context, ref string) (BalanceTransaction, bool, error) {
	source, txnID, ok := SourceOfRef(ref)
	if !ok {
		return BalanceTransaction{}, false, nil
	}
	var candidates []BalanceTransaction
	if txnID != "" {
		bt, found, err := m.r.cfg.Provider.BalanceTransaction(ctx, txnID)
		if err != nil || !found {
			return BalanceTransaction{}, false, err
		}
		candidates = []BalanceTransaction{bt}
	} else {
		var err error
		if candidates, err = m.r.cfg.Provider.BalanceTransactionsBySource(ctx, source); err != nil {
			return BalanceTransaction{}, false, err
		}
	}
	for _, bt := range candidates {
		if stripe.IsSettlementRefOf(ref, bt.ID) {
			return bt, true, nil // a leg of the record's conversion
		}
		for _, l := range Lines(bt) {
			if l.Ref == ref {
				return bt, true, nil
			}
		}
	}
	return BalanceTransaction{}, false, nil
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
	for _, ev := range events {
		_, err := inbox.Get(ctx, r.cfg.Pool, providerName, ev.ID)
		if err == nil {
			continue
		}
		if !errors.Is(err, inbox.ErrNotFound) {
			return rec, fmt.Errorf("look up event %s: %w", ev.ID, err)
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
	pending := slices.Clone(rec.EventIDs)
	deadline := time.Now().Add(max(r.cfg.RecoveryWait, 0))
	for {
		still := pending[:0]
		for _, id := range pending {
			ev, err := inbox.Get(ctx, r.cfg.Pool, providerName, id)
			if err != nil {
				return rec, fmt.Errorf("look up recovered event %s: %w", id, err)
			}
			if ev.Status == inbox.StatusReceived {
				still = append(still, id)
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
