package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/outbox"
)

// Run is one reconciliation of one UTC day.
type Run struct {
	ID          int64
	Date        time.Time // midnight UTC of the day
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

const runColumns = `id, date, trigger, status, started_at, finished_at, coalesce(error, ''), requested_by, report`

func scanRun(row pgx.Row) (Run, error) {
	var (
		r      Run
		report []byte
	)
	err := row.Scan(&r.ID, &r.Date, &r.Trigger, &r.Status, &r.StartedAt, &r.FinishedAt, &r.Error, &r.RequestedBy, &report)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, ErrRunNotFound
	}
	if err != nil {
		return Run{}, err
	}
	r.Date = time.Date(r.Date.Year(), r.Date.Month(), r.Date.Day(), 0, 0, 0, 0, time.UTC)
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

// CreateRunTx records a new running run of day in tx, for a trigger that
// may repeat (api, cli): a re-run is a new run and the old one is kept.
func CreateRunTx(ctx context.Context, q Querier, day time.Time, trigger Trigger, requestedBy string) (Run, error) {
	r, err := scanRun(q.QueryRow(ctx, `
		INSERT INTO reconciliation_runs (date, trigger, requested_by) VALUES ($1, $2, $3)
		RETURNING `+runColumns, day.Format(DateLayout), trigger, requestedBy))
	if err != nil {
		return Run{}, fmt.Errorf("create reconciliation run of %s: %w", day.Format(DateLayout), err)
	}
	return r, nil
}

// ScheduledRun returns the scheduled run of day, creating it (running)
// when there is none. created is false when the day's scheduled run already
// existed: the database's unique key on the day decides, so two schedulers
// (after a leader change, or a restart) never both create one.
func ScheduledRun(ctx context.Context, q Querier, day time.Time) (run Run, created bool, err error) {
	date := day.Format(DateLayout)
	r, err := scanRun(q.QueryRow(ctx, `
		INSERT INTO reconciliation_runs (date, trigger, requested_by) VALUES ($1, 'scheduled', 'scheduler')
		ON CONFLICT (date) WHERE trigger = 'scheduled' DO NOTHING
		RETURNING `+runColumns, date))
	if err == nil {
		return r, true, nil
	}
	if !errors.Is(err, ErrRunNotFound) {
		return Run{}, false, fmt.Errorf("create scheduled run of %s: %w", date, err)
	}
	r, err = scanRun(q.QueryRow(ctx, `SELECT `+runColumns+` FROM reconciliation_runs WHERE date = $1 AND trigger = 'scheduled'`, date))
	if err != nil {
		return Run{}, false, fmt.Errorf("read scheduled run of %s: %w", date, err)
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

// RunsOfDay returns every run of day, oldest first.
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
	items, _, err := items(ctx, q, runID, "", -1, 0)
	return items, err
}

// items returns a run's items after position after, in report order, at
// most limit of them (all when limit is 0), only those of status when it is
// not empty, with their positions.
func items(ctx context.Context, q Querier, runID int64, status Status, after, limit int) ([]Item, []int, error) {
	sql := `
		SELECT position, status, coalesce(provider_txn_id, ''), coalesce(source_id, ''), coalesce(ref, ''), type,
		       reporting_category, currency, coalesce(ledger_currency, ''),
		       provider_amount::text, provider_fee::text, ledger_amount::text,
		       coalesce(presentment_currency, ''), presentment_amount::text, exchange_rate::text
		FROM reconciliation_items WHERE run_id = $1 AND position > $2 AND ($3 = '' OR status = $3) ORDER BY position`
	args := []any{runID, after, string(status)}
	if limit > 0 {
		sql += ` LIMIT $4`
		args = append(args, limit)
	}
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read items of run %d: %w", runID, err)
	}
	defer rows.Close()
	out, positions := []Item{}, []int{}
	for rows.Next() {
		var (
			it                 Item
			pos                int
			pa, pf, la, pr, xr *string
		)
		if err := rows.Scan(&pos, &it.Status, &it.ProviderTxnID, &it.SourceID, &it.Ref, &it.Type,
			&it.ReportingCategory, &it.Currency, &it.LedgerCurrency, &pa, &pf, &la,
			&it.PresentmentCurrency, &pr, &xr); err != nil {
			return nil, nil, fmt.Errorf("read items of run %d: %w", runID, err)
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
				return nil, nil, fmt.Errorf("read items of run %d: parse %q: %w", runID, *f.raw, err)
			}
			*f.dst = &d
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
			day    time.Time
		)
		if err := tx.QueryRow(ctx, `SELECT status, date FROM reconciliation_runs WHERE id = $1 FOR UPDATE`, runID).Scan(&status, &day); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("run %d: %w", runID, ErrRunNotFound)
			}
			return fmt.Errorf("lock run %d: %w", runID, err)
		}
		if status != RunRunning {
			return fmt.Errorf("run %d is %s: %w", runID, status, ErrRunFinished)
		}
		n := len(items)
		var (
			pos                                   = make([]int32, n)
			statuses, typ, cat, cur               = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			txn, src, ref, lcur, pAmt, pFee, lAmt = make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
			prCur, prAmt, rate                    = make([]*string, n), make([]*string, n), make([]*string, n)
		)
		for i, it := range items {
			pos[i] = int32(i)
			statuses[i], typ[i], cat[i], cur[i] = string(it.Status), it.Type, it.ReportingCategory, it.Currency
			txn[i], src[i], ref[i], lcur[i] = nullable(it.ProviderTxnID), nullable(it.SourceID), nullable(it.Ref), nullable(it.LedgerCurrency)
			pAmt[i], pFee[i], lAmt[i] = numeric(it.ProviderAmount), numeric(it.ProviderFee), numeric(it.LedgerAmount)
			prCur[i], prAmt[i], rate[i] = nullable(it.PresentmentCurrency), numeric(it.PresentmentAmount), numeric(it.ExchangeRate)
		}
		if n > 0 {
			if _, err := tx.Exec(ctx, `
				INSERT INTO reconciliation_items (run_id, position, status, provider_txn_id, source_id, ref, type,
				    reporting_category, currency, ledger_currency, provider_amount, provider_fee, ledger_amount,
				    presentment_currency, presentment_amount, exchange_rate)
				SELECT $1, t.pos, t.status, t.txn, t.src, t.ref, t.typ, t.cat, t.cur, t.lcur,
				       t.pamt::numeric, t.pfee::numeric, t.lamt::numeric, t.prcur, t.pramt::numeric, t.rate::numeric
				FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
				            $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[])
				     AS t(pos, status, txn, src, ref, typ, cat, cur, lcur, pamt, pfee, lamt, prcur, pramt, rate)`,
				runID, pos, statuses, txn, src, ref, typ, cat, cur, lcur, pAmt, pFee, lAmt, prCur, prAmt, rate); err != nil {
				return fmt.Errorf("store %d items of run %d: %w", n, runID, err)
			}
		}
		if _, err := tx.Exec(ctx, `
			UPDATE reconciliation_runs SET status = 'completed', finished_at = now(), report = $2, error = NULL
			WHERE id = $1`, runID, body); err != nil {
			return fmt.Errorf("complete run %d: %w", runID, err)
		}
		if err := writeRunMessageTx(ctx, tx, runID, day, RunCompleted, report.Summary); err != nil {
			return err
		}
		if exceptions := Exceptions(report.Summary); alert != nil && len(exceptions) > 0 {
			a := Alert{RunID: runID, Date: utcDay(day), Status: RunCompleted, Exceptions: exceptions}
			if err := alert(ctx, tx, a); err != nil {
				return fmt.Errorf("alert on run %d: %w", runID, err)
			}
		}
		return nil
	})
}

// writeRunMessageTx tells downstream, in the transaction that finishes it,
// that run runID of day finished.
func writeRunMessageTx(ctx context.Context, tx pgx.Tx, runID int64, day time.Time, status RunStatus, summary map[Status]int) error {
	v := outbox.RunView{ID: runID, Provider: "stripe", Date: utcDay(day).Format(time.DateOnly), Status: string(status),
		Summary: make(map[string]int, len(summary))}
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
		var day time.Time
		err := tx.QueryRow(ctx, `
			UPDATE reconciliation_runs SET status = 'failed', finished_at = now(), error = $2
			WHERE id = $1 AND status = 'running' RETURNING date`, runID, reason).Scan(&day)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := writeRunMessageTx(ctx, tx, runID, day, RunFailed, nil); err != nil {
			return err
		}
		if alert == nil {
			return nil
		}
		if err := alert(ctx, tx, Alert{RunID: runID, Date: utcDay(day), Status: RunFailed, Error: reason}); err != nil {
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
