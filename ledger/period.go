package ledger

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// PeriodLayout is how a period is written: a UTC calendar month.
const PeriodLayout = "2006-01"

// Period is a UTC calendar month of the books.
type Period struct {
	Start time.Time // its first instant, 00:00 UTC on the 1st
}

// ParsePeriod reads a period written YYYY-MM. It fails with
// ErrInvalidPeriod.
func ParsePeriod(s string) (Period, error) {
	t, err := time.Parse(PeriodLayout, s)
	if err != nil || t.Format(PeriodLayout) != s || t.Year() < 1970 {
		return Period{}, fmt.Errorf("%w: %q is not a month written YYYY-MM, such as 2026-03", ErrInvalidPeriod, s)
	}
	return Period{Start: t.UTC()}, nil
}

// PeriodOf returns the period holding t.
func PeriodOf(t time.Time) Period {
	t = t.UTC()
	return Period{Start: time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)}
}

// End is the first instant after the period: the next one's Start.
func (p Period) End() time.Time { return p.Start.AddDate(0, 1, 0) }

// Next is the period after p.
func (p Period) Next() Period { return Period{Start: p.End()} }

// String writes p as YYYY-MM.
func (p Period) String() string { return p.Start.Format(PeriodLayout) }

// ClosedPeriod is a period finance closed: nothing is ever posted in it
// again, so its trial balance and its journal export never change.
type ClosedPeriod struct {
	Period
	ClosedAt time.Time
	ClosedBy string
	// TrialBalance is the trial balance as of the period's last instant,
	// computed under the close's lock.
	TrialBalance TrialBalanceReport
	// Digest is the lowercase hex SHA-256 of TrialBalanceDigestInput.
	Digest string
	// Export is what the period's journal export is rendered with: the
	// settings in force when it was closed.
	Export ExportSettings
}

// CloseAuditReason is what the audit log says of a close: the period and
// the digest of the trial balance it froze.
func CloseAuditReason(c ClosedPeriod) string {
	return fmt.Sprintf("closed %s: trial balance digest %s", c.Period, c.Digest)
}

// ExportSettings are what a journal export depends on besides the ledger:
// the account codes (PAYGATE_GL_ACCOUNTS), the tax rate name Xero's lines
// carry (PAYGATE_GL_XERO_TAX_RATE) and the books currency Xero's and
// QuickBooks' exports are in (PAYGATE_BOOKS_CURRENCY; none in the
// settings of a period closed before exports had one).
type ExportSettings struct {
	Accounts      GLAccounts `json:"gl_accounts"`
	XeroTaxRate   string     `json:"xero_tax_rate"`
	BooksCurrency string     `json:"books_currency,omitempty"`
}

// PeriodState is one period as the list of periods shows it.
type PeriodState struct {
	Period
	Closed bool
	// Closable: open, ended, and the next to close.
	Closable bool
	ClosedAt time.Time // zero when open
	ClosedBy string
	Digest   string
}

// ClosePeriodTx closes p in the caller's transaction as by, with the
// export settings given, and returns it. A period already closed is
// returned as its first close left it, with created false: closing twice
// answers the first close.
//
// It first locks the books' boundary FOR UPDATE, which waits for every
// transaction that posted to the ledger and holds back every posting until
// the caller commits; the trial balance is computed after that, so a
// posting racing the close is either in it or posted in the next period.
// The caller should commit promptly.
//
// It fails with ErrPeriodNotEnded (p ends after now), *PeriodOrderError
// (matching ErrPeriodOrder: an earlier period with postings is open, or p
// is not the next to close), or a database error.
func ClosePeriodTx(ctx context.Context, tx pgx.Tx, p Period, by string, settings ExportSettings, now time.Time) (ClosedPeriod, bool, error) {
	if closed, err := GetClosedPeriod(ctx, tx, p); err == nil {
		return closed, false, nil
	} else if !errors.Is(err, ErrPeriodNotClosed) {
		return ClosedPeriod{}, false, err
	}
	if p.End().After(now) {
		return ClosedPeriod{}, false, fmt.Errorf("close %s: %w: it ends at %s", p, ErrPeriodNotEnded, p.End().Format(time.RFC3339))
	}
	var through, first *time.Time
	err := tx.QueryRow(ctx, `
		SELECT `+closedThrough+`, (SELECT min(posted_at) FROM ledger_transactions)
		FROM ledger_books FOR UPDATE`).Scan(&through, &first)
	if err != nil {
		return ClosedPeriod{}, false, fmt.Errorf("close %s: lock the books: %w", p, err)
	}
	// Another close may have committed while this one waited.
	if closed, err := GetClosedPeriod(ctx, tx, p); err == nil {
		return closed, false, nil
	} else if !errors.Is(err, ErrPeriodNotClosed) {
		return ClosedPeriod{}, false, err
	}
	if ok, next := mayClose(p, through, first); !ok {
		return ClosedPeriod{}, false, &PeriodOrderError{Period: p, Next: next}
	}

	tb, err := TrialBalanceAsOf(ctx, tx, p.End().Add(-time.Microsecond))
	if err != nil {
		return ClosedPeriod{}, false, fmt.Errorf("close %s: %w", p, err)
	}
	c := ClosedPeriod{Period: p, ClosedBy: by, TrialBalance: tb, Digest: TrialBalanceDigest(p, tb), Export: settings}
	if c.Export.Accounts == nil {
		c.Export.Accounts = GLAccounts{}
	}
	tbJSON, err := json.Marshal(storedTrialBalanceOf(tb))
	if err != nil {
		return ClosedPeriod{}, false, fmt.Errorf("close %s: %w", p, err)
	}
	settingsJSON, err := json.Marshal(c.Export)
	if err != nil {
		return ClosedPeriod{}, false, fmt.Errorf("close %s: %w", p, err)
	}
	err = tx.QueryRow(ctx, `
		INSERT INTO ledger_periods (period, starts_at, ends_at, closed_by, trial_balance, digest, export_settings)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING closed_at`,
		p.String(), p.Start, p.End(), by, tbJSON, c.Digest, settingsJSON).Scan(&c.ClosedAt)
	if err != nil {
		return ClosedPeriod{}, false, fmt.Errorf("close %s: %w", p, translate(err))
	}
	c.ClosedAt = c.ClosedAt.UTC()
	return c, true, nil
}

// closedThrough reads the books' boundary, NULL before any close.
const closedThrough = `nullif(closed_through, '-infinity')`

// mayClose tells whether p may be closed now, given the books' boundary
// (nil before any close) and the earliest posting (nil: none): after a
// close, only the period starting at the boundary; before any, a period
// before which nothing is posted (else next, the period of the earliest
// posting, must be closed first).
func mayClose(p Period, through, first *time.Time) (ok bool, next Period) {
	switch {
	case through != nil:
		next = PeriodOf(*through)
		return next.Start.Equal(p.Start), next
	case first != nil && first.Before(p.Start):
		return false, PeriodOf(*first)
	}
	return true, p
}

// GetClosedPeriod reads a closed period. It fails with ErrPeriodNotClosed.
func GetClosedPeriod(ctx context.Context, q Querier, p Period) (ClosedPeriod, error) {
	c := ClosedPeriod{Period: p}
	var tbJSON, settingsJSON []byte
	err := q.QueryRow(ctx, `
		SELECT closed_at, closed_by, trial_balance, digest, export_settings
		FROM ledger_periods WHERE period = $1`, p.String()).
		Scan(&c.ClosedAt, &c.ClosedBy, &tbJSON, &c.Digest, &settingsJSON)
	if errors.Is(err, pgx.ErrNoRows) {
		return ClosedPeriod{}, fmt.Errorf("%w: %s", ErrPeriodNotClosed, p)
	}
	if err != nil {
		return ClosedPeriod{}, fmt.Errorf("read period %s: %w", p, err)
	}
	c.ClosedAt = c.ClosedAt.UTC()
	var stored storedTrialBalance
	if err := json.Unmarshal(tbJSON, &stored); err != nil {
		return ClosedPeriod{}, fmt.Errorf("read period %s: trial balance: %w", p, err)
	}
	if c.TrialBalance, err = stored.report(); err != nil {
		return ClosedPeriod{}, fmt.Errorf("read period %s: trial balance: %w", p, err)
	}
	if err := json.Unmarshal(settingsJSON, &c.Export); err != nil {
		return ClosedPeriod{}, fmt.Errorf("read period %s: export settings: %w", p, err)
	}
	if c.Export.Accounts == nil {
		c.Export.Accounts = GLAccounts{}
	}
	return c, nil
}

// ListPeriods returns the closed periods and the open ones up to the
// period holding now, newest first. The open ones start at the first open
// period: the one after the last closed, or, before any close, the one of
// the earliest posting (the current one for an empty ledger).
func ListPeriods(ctx context.Context, q Querier, now time.Time) ([]PeriodState, error) {
	var through, first *time.Time
	err := q.QueryRow(ctx, `SELECT `+closedThrough+`, (SELECT min(posted_at) FROM ledger_transactions) FROM ledger_books`).
		Scan(&through, &first)
	if err != nil {
		return nil, fmt.Errorf("list periods: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT period, closed_at, closed_by, digest FROM ledger_periods ORDER BY period DESC`)
	if err != nil {
		return nil, fmt.Errorf("list periods: %w", err)
	}
	var closed []PeriodState
	for rows.Next() {
		var s PeriodState
		var name string
		if err := rows.Scan(&name, &s.ClosedAt, &s.ClosedBy, &s.Digest); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list periods: %w", err)
		}
		if s.Period, err = ParsePeriod(name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list periods: %w", err)
		}
		s.Closed, s.ClosedAt = true, s.ClosedAt.UTC()
		closed = append(closed, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list periods: %w", err)
	}

	current := PeriodOf(now)
	openFrom := current
	switch {
	case through != nil:
		openFrom = PeriodOf(*through)
	case first != nil && first.Before(openFrom.Start):
		openFrom = PeriodOf(*first)
	}
	var open []PeriodState
	for p := openFrom; !p.Start.After(current.Start); p = p.Next() {
		ok, _ := mayClose(p, through, first)
		open = append(open, PeriodState{Period: p, Closable: ok && !p.End().After(now)})
	}
	slices.Reverse(open)
	return append(open, closed...), nil
}

// TrialBalanceDigestInput is the canonical rendering of a period's trial
// balance that its digest is the SHA-256 of: the line "period,YYYY-MM",
// then one line "currency,account,debits,credits" per account and
// currency, sorted by currency then account name (byte order), amounts at
// the currency's scale with a "." (as the API writes them); every line
// ends in "\n", and the text is ASCII.
func TrialBalanceDigestInput(p Period, tb TrialBalanceReport) []byte {
	accounts := slices.Clone(tb.Accounts)
	slices.SortFunc(accounts, func(x, y AccountBalance) int {
		return cmp.Or(strings.Compare(x.Currency, y.Currency), strings.Compare(string(x.Account), string(y.Account)))
	})
	var b strings.Builder
	fmt.Fprintf(&b, "period,%s\n", p)
	for _, a := range accounts {
		fmt.Fprintf(&b, "%s,%s,%s,%s\n", a.Currency, a.Account, Format(a.Debits, a.Currency), Format(a.Credits, a.Currency))
	}
	return []byte(b.String())
}

// TrialBalanceDigest is the lowercase hex SHA-256 of
// TrialBalanceDigestInput.
func TrialBalanceDigest(p Period, tb TrialBalanceReport) string {
	sum := sha256.Sum256(TrialBalanceDigestInput(p, tb))
	return hex.EncodeToString(sum[:])
}

// storedTrialBalance is a trial balance as ledger_periods keeps it:
// amounts as the decimal strings the API shows.
type storedTrialBalance struct {
	Currencies []storedCurrencyTotal  `json:"currencies"`
	Accounts   []storedAccountBalance `json:"accounts"`
}

type storedCurrencyTotal struct {
	Currency string `json:"currency"`
	Debits   string `json:"debits"`
	Credits  string `json:"credits"`
	Balanced bool   `json:"balanced"`
}

type storedAccountBalance struct {
	Account  Account `json:"account"`
	Currency string  `json:"currency"`
	Debits   string  `json:"debits"`
	Credits  string  `json:"credits"`
	Balance  string  `json:"balance"`
}

func storedTrialBalanceOf(tb TrialBalanceReport) storedTrialBalance {
	s := storedTrialBalance{Currencies: []storedCurrencyTotal{}, Accounts: []storedAccountBalance{}}
	for _, c := range tb.Currencies {
		s.Currencies = append(s.Currencies, storedCurrencyTotal{Currency: c.Currency,
			Debits: Format(c.Debits, c.Currency), Credits: Format(c.Credits, c.Currency), Balanced: c.Balanced})
	}
	for _, a := range tb.Accounts {
		s.Accounts = append(s.Accounts, storedAccountBalance{Account: a.Account, Currency: a.Currency,
			Debits: Format(a.Debits, a.Currency), Credits: Format(a.Credits, a.Currency), Balance: Format(a.Balance, a.Currency)})
	}
	return s
}

func (s storedTrialBalance) report() (TrialBalanceReport, error) {
	tb := TrialBalanceReport{Currencies: []CurrencyTotal{}, Accounts: []AccountBalance{}}
	for _, c := range s.Currencies {
		debits, err1 := decimal.NewFromString(c.Debits)
		credits, err2 := decimal.NewFromString(c.Credits)
		if err := errors.Join(err1, err2); err != nil {
			return TrialBalanceReport{}, err
		}
		tb.Currencies = append(tb.Currencies, CurrencyTotal{Currency: c.Currency, Debits: debits, Credits: credits, Balanced: c.Balanced})
	}
	for _, a := range s.Accounts {
		debits, err1 := decimal.NewFromString(a.Debits)
		credits, err2 := decimal.NewFromString(a.Credits)
		balance, err3 := decimal.NewFromString(a.Balance)
		if err := errors.Join(err1, err2, err3); err != nil {
			return TrialBalanceReport{}, err
		}
		tb.Accounts = append(tb.Accounts, AccountBalance{Account: a.Account, Currency: a.Currency,
			Debits: debits, Credits: credits, Balance: balance})
	}
	return tb, nil
}
