package reconcile

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/outbox"
)

// Run is one reconciliation of one provider's UTC day or settlement batch.
type Run struct {
	ID          int64
	Provider    string
	Date        time.Time // midnight UTC of the day; zero for a batch's run
	Batch       int64     // the settlement batch; zero for a day's run
	Trigger     Trigger
	Status      RunStatus
	StartedAt   time.Time
	FinishedAt  *time.Time
	Error       string
	RequestedBy string
	Report      *Report // nil until completed
}

// Querier is what reads need: a pool, a connection or a transaction.
type Querier = ledger.Querier

// Scope is what the run reconciles.
func (r Run) Scope() Scope { return Scope{Provider: r.Provider, Date: r.Date, Batch: r.Batch} }

const runColumns = `id, provider, date, coalesce(batch, 0), trigger, status, started_at, finished_at, coalesce(error, ''), requested_by, report`

func scanRun(row pgx.Row) (Run, error) {
	var (
		r      Run
		date   *time.Time
		report []byte
	)
	err := row.Scan(&r.ID, &r.Provider, &date, &r.Batch, &r.Trigger, &r.Status, &r.StartedAt, &r.FinishedAt, &r.Error, &r.RequestedBy, &report)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, ErrRunNotFound
	}
	if err != nil {
		return Run{}, err
	}
	if date != nil {
		r.Date = utcDay(*date)
	}
	r.StartedAt = r.StartedAt.UTC()
	if r.FinishedAt != nil {
		t := r.FinishedAt.UTC()
		r.FinishedAt = &t
	}
	if report != nil {
		r.Report = &Report{}
		if err := json.Unmarshal(report, r.Report); err != nil {
			return Run{}, fmt.Errorf("decode report of run %d: %w", r.ID, err)
		}
	}
	return r, nil
}

// scopeArgs are a scope's provider, date and batch columns.
func scopeArgs(s Scope) (provider string, date *string, batch *int64) {
	if s.Batch != 0 {
		return s.Provider, nil, &s.Batch
	}
	d := s.Date.Format(DateLayout)
	return s.Provider, &d, nil
}

// CreateRunTx records a new running run of scope in tx, for a trigger that
// may repeat (api, cli): a re-run is a new run and the old one is kept.
func CreateRunTx(ctx context.Context, q Querier, scope Scope, trigger Trigger, requestedBy string) (Run, error) {
	provider, date, batch := scopeArgs(scope)
	r, err := scanRun(q.QueryRow(ctx, `
		INSERT INTO reconciliation_runs (provider, date, batch, trigger, requested_by) VALUES ($1, $2, $3, $4, $5)
		RETURNING `+runColumns, provider, date, batch, trigger, requestedBy))
	if err != nil {
		return Run{}, fmt.Errorf("create reconciliation run of %s: %w", scope, err)
	}
	return r, nil
}

// ScheduledRun returns the scheduled run of scope (a provider's day, or
// one of its batches), creating it (running) when there is none. created
// is false when it already existed: the database's unique key on the
// provider's day or batch decides, so two schedulers (after a leader
// change, or a restart), or two notifications of one batch's report, never
// both create one.
func ScheduledRun(ctx context.Context, q Querier, scope Scope) (run Run, created bool, err error) {
	provider, date, batch := scopeArgs(scope)
	conflict := `(provider, date) WHERE trigger = 'scheduled' AND date IS NOT NULL`
	if batch != nil {
		conflict = `(provider, batch) WHERE trigger = 'scheduled' AND batch IS NOT NULL`
	}
	r, err := scanRun(q.QueryRow(ctx, `
		INSERT INTO reconciliation_runs (provider, date, batch, trigger, requested_by) VALUES ($1, $2, $3, 'scheduled', 'scheduler')
		ON CONFLICT `+conflict+` DO NOTHING
		RETURNING `+runColumns, provider, date, batch))
	if err == nil {
		return r, true, nil
	}
	if !errors.Is(err, ErrRunNotFound) {
		return Run{}, false, fmt.Errorf("create scheduled run of %s: %w", scope, err)
	}
	r, err = scanRun(q.QueryRow(ctx, `SELECT `+runColumns+` FROM reconciliation_runs
		WHERE provider = $1 AND date IS NOT DISTINCT FROM $2::date AND batch IS NOT DISTINCT FROM $3::bigint AND trigger = 'scheduled'`,
		provider, date, batch))
	if err != nil {
		return Run{}, false, fmt.Errorf("read scheduled run of %s: %w", scope, err)
	}
	return r, false, nil
}

// GetRun returns one run. It fails with ErrRunNotFound.
func GetRun(ctx context.Context, q Querier, id int64) (Run, error) {
	r, err := scanRun(q.QueryRow(ctx, `SELECT `+runColumns+` FROM reconciliation_runs WHERE id = $1`, id))
	if err != nil && !errors.Is(err, ErrRunNotFound) {
		return Run{}, fmt.Errorf("read reconciliation run %d: %w", id, err)
	}
	if err != nil {
		return Run{}, fmt.Errorf("run %d: %w", id, err)
	}
	return r, nil
}

// RunsOfDay returns every run of day (of any provider), oldest first.
func RunsOfDay(ctx context.Context, q Querier, day time.Time) ([]Run, error) {
	rows, err := q.Query(ctx, `SELECT `+runColumns+` FROM reconciliation_runs WHERE date = $1 ORDER BY id`, day.Format(DateLayout))
	if err != nil {
		return nil, fmt.Errorf("read runs of %s: %w", day.Format(DateLayout), err)
	}
	defer rows.Close()
	out := []Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Items returns a run's items in report order; none is an empty slice. It
// reads them all at once: for a run of any size, page with ItemsPage or
// EachItem.
func Items(ctx context.Context, q Querier, runID int64) ([]Item, error) {
	items, _, err := items(ctx, q, runID, ItemFilter{}, -1, 0)
	return items, err
}

// itemColumns are what an item is read with, from itemTables: the item
// and its resolution, if any.
const (
	itemColumns = `i.id, i.run_id, i.position, i.status, coalesce(i.provider_txn_id, ''), coalesce(i.source_id, ''),
		coalesce(i.ref, ''), i.type, i.reporting_category, i.currency, coalesce(i.ledger_currency, ''),
		i.provider_amount::text, i.provider_fee::text, i.ledger_amount::text,
		coalesce(i.presentment_currency, ''), i.presentment_amount::text, i.exchange_rate::text, coalesce(i.payment_id, ''),
		r.resolution, coalesce(r.note, ''), coalesce(r.resolved_by, ''), r.resolved_at, coalesce(r.adjustment_ref, ''),
		coalesce(i.reference, '')`
	itemTables = `reconciliation_items i LEFT JOIN reconciliation_resolutions r ON r.item_id = i.id`
)

// exceptionCondition selects the exceptions among items, written as the
// partial index reconciliation_items_exceptions_idx is, so that a run's
// exceptions are read without its matched items.
var exceptionCondition = func() string {
	quoted := make([]string, len(ExceptionStatuses))
	for i, st := range ExceptionStatuses {
		quoted[i] = "'" + string(st) + "'"
	}
	return "i.status IN (" + strings.Join(quoted, ", ") + ")"
}()

// scanItem reads one row of itemColumns, with the item's position.
func scanItem(row pgx.Row) (Item, int, error) {
	var (
		it                 Item
		pos                int
		pa, pf, la, pr, xr *string
		kind               *string
		res                Resolution
		resolvedAt         *time.Time
	)
	if err := row.Scan(&it.ID, &it.RunID, &pos, &it.Status, &it.ProviderTxnID, &it.SourceID, &it.Ref, &it.Type,
		&it.ReportingCategory, &it.Currency, &it.LedgerCurrency, &pa, &pf, &la,
		&it.PresentmentCurrency, &pr, &xr, &it.PaymentID,
		&kind, &res.Note, &res.ResolvedBy, &resolvedAt, &res.AdjustmentRef, &it.Reference); err != nil {
		return Item{}, 0, err
	}
	for _, f := range []struct {
		raw *string
		dst **decimal.Decimal
	}{{pa, &it.ProviderAmount}, {pf, &it.ProviderFee}, {la, &it.LedgerAmount}, {pr, &it.PresentmentAmount}, {xr, &it.ExchangeRate}} {
		if f.raw == nil {
			continue
		}
		d, err := decimal.NewFromString(*f.raw)
		if err != nil {
			return Item{}, 0, fmt.Errorf("parse %q: %w", *f.raw, err)
		}
		*f.dst = &d
	}
	if kind != nil && resolvedAt != nil {
		res.Kind, res.ResolvedAt = ResolutionKind(*kind), resolvedAt.UTC()
		it.Resolution = &res
	}
	return it, pos, nil
}

// items returns a run's items after position after, in report order, at
// most limit of them (all when limit is 0), those f selects, with their
// positions.
func items(ctx context.Context, q Querier, runID int64, f ItemFilter, after, limit int) ([]Item, []int, error) {
	conds, args := []string{"i.run_id = $1", "i.position > $2"}, []any{runID, after}
	if f.Status != "" {
		args = append(args, string(f.Status))
		conds = append(conds, fmt.Sprintf("i.status = $%d", len(args)))
	}
	switch f.State {
	case ItemOpen:
		conds = append(conds, exceptionCondition, "r.item_id IS NULL")
	case ItemResolved:
		conds = append(conds, exceptionCondition, "r.item_id IS NOT NULL")
	}
	sql := `SELECT ` + itemColumns + ` FROM ` + itemTables + ` WHERE ` + strings.Join(conds, " AND ") + ` ORDER BY i.position`
	if limit > 0 {
		args = append(args, limit)
		sql += fmt.Sprintf(` LIMIT $%d`, len(args))
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read items of run %d: %w", runID, err)
	}
	defer rows.Close()
	out, positions := []Item{}, []int{}
	for rows.Next() {
		it, pos, err := scanItem(rows)
		if err != nil {
			return nil, nil, fmt.Errorf("read items of run %d: %w", runID, err)
		}
		out, positions = append(out, it), append(positions, pos)
	}
	return out, positions, rows.Err()
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func numeric(d *decimal.Decimal) *string {
	if d == nil {
		return nil
	}
	s := d.String()
	return &s
}

// complete stores a run's items and report and marks it completed, in one
// transaction: the run is locked and checked first, so of two attempts
// racing to complete it one wins and the other stores nothing. It fails with
// ErrRunFinished.
func complete(ctx context.Context, pool *pgxpool.Pool, runID int64, items []Item, report Report,
	alert func(context.Context, pgx.Tx, Alert) error) error {
	body, err := json.Marshal(report)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var (
			status RunStatus
			scope  Scope
			date   *time.Time
		)
		if err := tx.QueryRow(ctx, `SELECT status, provider, date, coalesce(batch, 0) FROM reconciliation_runs WHERE id = $1 FOR UPDATE`,
			runID).Scan(&status, &scope.Provider, &date, &scope.Batch); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("run %d: %w", runID, ErrRunNotFound)
			}
			return fmt.Errorf("lock run %d: %w", runID, err)
		}
		if status != RunRunning {
			return fmt.Errorf("run %d is %s: %w", runID, status, ErrRunFinished)
		}
		if date != nil {
			scope.Date = utcDay(*date)
		}
		if err := paymentsOfMissing(ctx, tx, scope.Provider, items); err != nil {
			return fmt.Errorf("run %d: %w", runID, err)
		}
		if err := referencesOf(ctx, tx, items); err != nil {
			return fmt.Errorf("run %d: %w", runID, err)
		}
		n := len(items)
		var (
			pos                                   = make([]int32, n)
			statuses, typ, cat, cur               = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			txn, src, ref, lcur, pAmt, pFee, lAmt = make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
			prCur, prAmt, rate, payment           = make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
			reference                             = make([]*string, n)
		)
		for i, it := range items {
			pos[i] = int32(i)
			statuses[i], typ[i], cat[i], cur[i] = string(it.Status), it.Type, it.ReportingCategory, it.Currency
			txn[i], src[i], ref[i], lcur[i] = nullable(it.ProviderTxnID), nullable(it.SourceID), nullable(it.Ref), nullable(it.LedgerCurrency)
			pAmt[i], pFee[i], lAmt[i] = numeric(it.ProviderAmount), numeric(it.ProviderFee), numeric(it.LedgerAmount)
			prCur[i], prAmt[i], rate[i] = nullable(it.PresentmentCurrency), numeric(it.PresentmentAmount), numeric(it.ExchangeRate)
			payment[i], reference[i] = nullable(it.PaymentID), nullable(it.Reference)
		}
		if n > 0 {
			if _, err := tx.Exec(ctx, `
				INSERT INTO reconciliation_items (run_id, position, status, provider_txn_id, source_id, ref, type,
				    reporting_category, currency, ledger_currency, provider_amount, provider_fee, ledger_amount,
				    presentment_currency, presentment_amount, exchange_rate, payment_id, reference)
				SELECT $1, t.pos, t.status, t.txn, t.src, t.ref, t.typ, t.cat, t.cur, t.lcur,
				       t.pamt::numeric, t.pfee::numeric, t.lamt::numeric, t.prcur, t.pramt::numeric, t.rate::numeric, t.payment,
				       t.reference
				FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
				            $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[],
				            $17::text[], $18::text[])
				     AS t(pos, status, txn, src, ref, typ, cat, cur, lcur, pamt, pfee, lamt, prcur, pramt, rate, payment, reference)`,
				runID, pos, statuses, txn, src, ref, typ, cat, cur, lcur, pAmt, pFee, lAmt, prCur, prAmt, rate, payment, reference); err != nil {
				return fmt.Errorf("store %d items of run %d: %w", n, runID, err)
			}
		}
		if _, err := tx.Exec(ctx, `
			UPDATE reconciliation_runs SET status = 'completed', finished_at = now(), report = $2, error = NULL
			WHERE id = $1`, runID, body); err != nil {
			return fmt.Errorf("complete run %d: %w", runID, err)
		}
		if err := writeRunMessageTx(ctx, tx, runID, scope, RunCompleted, report.Summary); err != nil {
			return err
		}
		if exceptions := Exceptions(report.Summary); alert != nil && len(exceptions) > 0 {
			a := Alert{RunID: runID, Scope: scope, Date: scope.Date, Status: RunCompleted, Exceptions: exceptions}
			if err := alert(ctx, tx, a); err != nil {
				return fmt.Errorf("alert on run %d: %w", runID, err)
			}
		}
		return nil
	})
}

// paymentsOfMissing gives each movement missing in the ledger the payment
// its record names, when the provider reported the payment otherwise (its
// authorization, another event): the payment whose facts are about its
// source object, or the payment the record names itself (a charge
// without a payment intent, Adyen's Psp Reference). Finance follows the
// item to it. One statement, and only for a run with such items.
func paymentsOfMissing(ctx context.Context, q Querier, provider string, items []Item) error {
	var names []string
	for _, it := range items {
		if it.Status == StatusMissingInLedger && it.PaymentID == "" {
			names = append(names, it.SourceID, it.ProviderTxnID)
		}
	}
	if len(names) == 0 {
		return nil
	}
	payments, err := ledger.PaymentsNamed(ctx, q, provider, names)
	if err != nil {
		return err
	}
	for i := range items {
		if it := &items[i]; it.Status == StatusMissingInLedger && it.PaymentID == "" {
			it.PaymentID = cmp.Or(payments[it.SourceID], payments[it.ProviderTxnID])
		}
	}
	return nil
}

// referencesOf gives each item with a payment that payment's order
// reference as it stands now, in the transaction that stores the items: the
// reference is kept with the item rather than joined when read, so that a
// run's items and CSV read the same whatever the payment learns later.
// One statement, whatever the number of items.
func referencesOf(ctx context.Context, q Querier, items []Item) error {
	ids := make([]string, 0, len(items))
	for _, it := range items {
		if it.PaymentID != "" {
			ids = append(ids, it.PaymentID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	refs, err := ledger.PaymentReferences(ctx, q, ids)
	if err != nil {
		return err
	}
	for i := range items {
		items[i].Reference = refs[items[i].PaymentID]
	}
	return nil
}

// writeRunMessageTx tells downstream, in the transaction that finishes it,
// that run runID of scope finished.
func writeRunMessageTx(ctx context.Context, tx pgx.Tx, runID int64, scope Scope, status RunStatus, summary map[Status]int) error {
	v := outbox.RunView{ID: runID, Provider: scope.Provider, Status: string(status), Summary: make(map[string]int, len(summary))}
	if scope.Batch != 0 {
		v.Batch = &scope.Batch
	} else {
		v.Date = scope.Date.Format(time.DateOnly)
	}
	for s, n := range summary {
		v.Summary[string(s)] = n
	}
	msg, err := outbox.RunMessage(v, time.Now())
	if err != nil {
		return err
	}
	return outbox.WriteTx(ctx, tx, []outbox.Message{msg})
}

func utcDay(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// fail marks a running run failed with the reason, and alerts in the same
// transaction. A run already finished is left as it is, and not alerted on
// again.
func fail(ctx context.Context, pool *pgxpool.Pool, runID int64, reason string, alert func(context.Context, pgx.Tx, Alert) error) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var (
			scope Scope
			date  *time.Time
		)
		err := tx.QueryRow(ctx, `
			UPDATE reconciliation_runs SET status = 'failed', finished_at = now(), error = $2
			WHERE id = $1 AND status = 'running' RETURNING provider, date, coalesce(batch, 0)`, runID, reason).Scan(&scope.Provider, &date, &scope.Batch)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if date != nil {
			scope.Date = utcDay(*date)
		}
		if err := writeRunMessageTx(ctx, tx, runID, scope, RunFailed, nil); err != nil {
			return err
		}
		if alert == nil {
			return nil
		}
		if err := alert(ctx, tx, Alert{RunID: runID, Scope: scope, Date: scope.Date, Status: RunFailed, Error: reason}); err != nil {
			return fmt.Errorf("alert: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("fail run %d: %w", runID, err)
	}
	return nil
}

// noteError keeps the error of an attempt that will be retried on the
// still-running run.
func noteError(ctx context.Context, q Querier, runID int64, reason string) error {
	_, err := q.Exec(ctx, `UPDATE reconciliation_runs SET error = $2 WHERE id = $1 AND status = 'running'`, runID, reason)
	if err != nil {
		return fmt.Errorf("note error on run %d: %w", runID, err)
	}
	return nil
}
