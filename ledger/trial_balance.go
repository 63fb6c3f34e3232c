package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// TrialBalanceReport totals the whole ledger. In a healthy ledger every currency
// is Balanced; the triggers make anything else impossible, so an unbalanced
// currency here means the database was tampered with below them.
type TrialBalanceReport struct {
	Currencies []CurrencyTotal  // sorted by currency
	Accounts   []AccountBalance // sorted by currency, then chart order
}

// CurrencyTotal is the sum of all debits and all credits in one currency.
type CurrencyTotal struct {
	Currency string
	Debits   decimal.Decimal
	Credits  decimal.Decimal
	Balanced bool // Debits equal Credits
}

// AccountBalance is one account's totals in one currency. Balance is
// Debits − Credits: positive for assets and expenses, negative for revenue.
type AccountBalance struct {
	Account  Account
	Currency string
	Debits   decimal.Decimal
	Credits  decimal.Decimal
	Balance  decimal.Decimal
}

// TrialBalance reads the totals of every account in every currency that has
// entries, from one snapshot (one statement), at each currency's scale. An
// empty ledger gives empty, non-nil lists.
func TrialBalance(ctx context.Context, q Querier) (TrialBalanceReport, error) {
	tb, err := readTrialBalance(ctx, q, `
		SELECT account, currency, sum(debit)::text, sum(credit)::text
		FROM ledger_entries GROUP BY account, currency`)
	if err != nil {
		return TrialBalanceReport{}, fmt.Errorf("read trial balance: %w", err)
	}
	return tb, nil
}

// trialBalanceAsOf sums every transaction posted at or before $1: the
// snapshot's latest cut at or before $1 that no mark of
// ledger_balance_stale precedes (balance_snapshot.go says why that is
// exact), plus the entries posted from that cut on. One statement, so one
// MVCC snapshot sees the marks, the cut and the entries together.
const trialBalanceAsOf = `
WITH stale AS (
    SELECT min(at) AS at FROM ledger_balance_stale
), base AS (
    SELECT max(s.cut) AS cut FROM ledger_balance_snapshots s
    WHERE s.cut <= $1::timestamptz
      AND s.cut <= coalesce((SELECT at FROM stale), 'infinity'::timestamptz)
)
SELECT account, currency, sum(debits)::text, sum(credits)::text FROM (
    SELECT s.account, s.currency, s.debits, s.credits
    FROM ledger_balance_snapshots s WHERE s.cut = (SELECT cut FROM base)
    UNION ALL
    SELECT e.account, e.currency, e.debit, e.credit
    FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
    WHERE t.posted_at >= coalesce((SELECT cut FROM base), '-infinity'::timestamptz) AND t.posted_at <= $1
) AS posted
GROUP BY account, currency`

// TrialBalanceAsOf is the trial balance of the transactions posted at or
// before asOf (their posted_at, to the microsecond the database keeps):
// what the books said at that instant, as they are known now. A period's
// close stores it as of the period's last instant; for an open period a
// late movement dated in it can still change it. It reads the balance
// snapshot's latest cut before asOf and the entries posted since (at most
// a day's), so its cost does not grow with the ledger.
func TrialBalanceAsOf(ctx context.Context, q Batcher, asOf time.Time) (TrialBalanceReport, error) {
	// The planner cannot know how few entries the cut leaves to add (the
	// cut is found by the statement itself), so it prices the sum as a
	// large share of the ledger and would compile it (JIT) and start
	// parallel workers: tens of milliseconds for a sum of a few. Both are
	// off for this statement (the batch is one transaction).
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('jit', 'off', true), set_config('max_parallel_workers_per_gather', '0', true)`)
	b.Queue(trialBalanceAsOf, asOf.Truncate(time.Microsecond))
	results := q.SendBatch(ctx, b)
	defer results.Close()
	fail := func(err error) (TrialBalanceReport, error) {
		return TrialBalanceReport{}, fmt.Errorf("read trial balance as of %s: %w", asOf.UTC().Format(time.RFC3339Nano), err)
	}
	if _, err := results.Exec(); err != nil {
		return fail(err)
	}
	rows, err := results.Query()
	if err != nil {
		return fail(err)
	}
	tb, err := trialBalanceOf(rows)
	if err != nil {
		return fail(err)
	}
	if err := results.Close(); err != nil {
		return fail(err)
	}
	return tb, nil
}

// endOfTime is an as-of instant after every posting.
var endOfTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// TrialBalanceNow is the trial balance of every transaction posted, as
// TrialBalance sums it, but read as TrialBalanceAsOf reads: the balance
// snapshot's newest usable cut and the entries posted since, so its cost
// does not grow with the ledger (TrialBalance sums every entry: over a
// second at 10 M).
func TrialBalanceNow(ctx context.Context, q Batcher) (TrialBalanceReport, error) {
	return TrialBalanceAsOf(ctx, q, endOfTime)
}

// Batcher is a Querier that also sends batches: *pgxpool.Pool, *pgx.Conn
// and pgx.Tx.
type Batcher interface {
	Querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// readTrialBalance runs sql, which answers (account, currency, debits,
// credits) with the sums as text, and builds the report.
func readTrialBalance(ctx context.Context, q Querier, sql string, args ...any) (TrialBalanceReport, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return TrialBalanceReport{}, err
	}
	return trialBalanceOf(rows)
}

// trialBalanceOf reads rows of (account, currency, debits, credits), sums
// as text, into the report, and closes them.
func trialBalanceOf(rows pgx.Rows) (TrialBalanceReport, error) {
	defer rows.Close()

	tb := TrialBalanceReport{Currencies: []CurrencyTotal{}, Accounts: []AccountBalance{}}
	for rows.Next() {
		var a AccountBalance
		var account, debits, credits string
		if err := rows.Scan(&account, &a.Currency, &debits, &credits); err != nil {
			return TrialBalanceReport{}, err
		}
		a.Account = Account(account)
		var err error
		if a.Debits, err = decimal.NewFromString(debits); err != nil {
			return TrialBalanceReport{}, fmt.Errorf("parse %q: %w", debits, err)
		}
		if a.Credits, err = decimal.NewFromString(credits); err != nil {
			return TrialBalanceReport{}, fmt.Errorf("parse %q: %w", credits, err)
		}
		tb.Accounts = append(tb.Accounts, a)
	}
	if err := rows.Err(); err != nil {
		return TrialBalanceReport{}, err
	}

	slices.SortFunc(tb.Accounts, func(x, y AccountBalance) int {
		return cmp.Or(cmp.Compare(x.Currency, y.Currency), cmp.Compare(x.Account.rank(), y.Account.rank()))
	})
	for i := range tb.Accounts {
		a := &tb.Accounts[i]
		a.Balance = present(a.Debits.Sub(a.Credits), a.Currency)
		if n := len(tb.Currencies); n == 0 || tb.Currencies[n-1].Currency != a.Currency {
			tb.Currencies = append(tb.Currencies, CurrencyTotal{Currency: a.Currency, Debits: decimal.Zero, Credits: decimal.Zero})
		}
		c := &tb.Currencies[len(tb.Currencies)-1]
		c.Debits, c.Credits = c.Debits.Add(a.Debits), c.Credits.Add(a.Credits)
		a.Debits, a.Credits = present(a.Debits, a.Currency), present(a.Credits, a.Currency)
	}
	for i := range tb.Currencies {
		c := &tb.Currencies[i]
		c.Balanced = c.Debits.Equal(c.Credits)
		c.Debits, c.Credits = present(c.Debits, c.Currency), present(c.Credits, c.Currency)
	}
	return tb, nil
}
