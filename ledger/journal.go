package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// JournalFormat is the layout of a journal export.
type JournalFormat string

// The journal export formats.
const (
	// JournalGeneric: date,journal,account,account_code,currency,debit,credit,description;
	// by transaction, reference too.
	JournalGeneric JournalFormat = "generic"
	// JournalXero: Xero's manual journal import (Narration, Date,
	// Description, AccountCode, TaxRate, Amount; debits positive, credits
	// negative; lines of one journal share Narration and Date).
	JournalXero JournalFormat = "xero"
	// JournalQuickBooks: QuickBooks Online's journal entry import (Journal
	// No, Journal Date, Account Name, Debits, Credits, Description).
	JournalQuickBooks JournalFormat = "quickbooks"
)

// JournalFormats lists the formats.
var JournalFormats = []JournalFormat{JournalGeneric, JournalXero, JournalQuickBooks}

// Valid reports whether f is one of JournalFormats.
func (f JournalFormat) Valid() bool { return slices.Contains(JournalFormats, f) }

// JournalGranularity is what one journal of an export holds.
type JournalGranularity string

// The granularities.
const (
	// JournalByDay: one journal per UTC day (of posted_at) and currency,
	// each account's movements netted into one line.
	JournalByDay JournalGranularity = "day"
	// JournalByTransaction: one journal per ledger transaction, its
	// entries as they are, naming the order reference of its payment.
	JournalByTransaction JournalGranularity = "transaction"
)

// JournalGranularities lists the granularities.
var JournalGranularities = []JournalGranularity{JournalByDay, JournalByTransaction}

// Valid reports whether g is one of JournalGranularities.
func (g JournalGranularity) Valid() bool { return slices.Contains(JournalGranularities, g) }

// JournalOpts says what to export.
type JournalOpts struct {
	From, To    time.Time // posted_at in [From, To)
	Format      JournalFormat
	Granularity JournalGranularity
	Currency    string // one currency; "" for all
	Settings    ExportSettings
}

// JournalSummary counts what an export wrote.
type JournalSummary struct {
	Journals int
	Lines    int
}

// journalEntry is one line of a journal being written.
type journalEntry struct {
	account       Account
	debit, credit decimal.Decimal
}

// journal is one balanced journal of an export.
type journal struct {
	id          string // PG-20260305-USD, PG-T1234: short enough for QuickBooks' Journal No (21)
	day         time.Time
	currency    string
	description string
	// reference is the merchant's order reference of the transaction's
	// payment; empty for a day's journal, which sums many payments.
	reference string
	lines     []journalEntry
}

// WriteJournal writes the journals of the transactions posted in
// [o.From, o.To) to w as CSV in o.Format, one header line first. Every
// journal balances; a day whose accounts all net to zero in a currency
// has no journal. Rows are written as the database returns them, a
// journal at a time, so a month of millions of entries is exported in
// bounded memory (the statement runs without the session's statement
// timeout: ctx bounds it). The same ledger rows and options give the same
// bytes.
//
// It fails with ErrInvalidPeriod for an empty range, with an error naming
// a bad format or granularity, or with w's or the database's error (the
// output is then incomplete).
func WriteJournal(ctx context.Context, db Beginner, w io.Writer, o JournalOpts) (JournalSummary, error) {
	var sum JournalSummary
	if !o.Format.Valid() || !o.Granularity.Valid() {
		return sum, fmt.Errorf("journal export: format %q, granularity %q", o.Format, o.Granularity)
	}
	if !o.From.Before(o.To) {
		return sum, fmt.Errorf("%w: the export's range [%s, %s) is empty", ErrInvalidPeriod, o.From.Format(time.RFC3339), o.To.Format(time.RFC3339))
	}
	out := newJournalWriter(w, o)
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return sum, fmt.Errorf("journal export: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only
	if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
		return sum, fmt.Errorf("journal export: %w", err)
	}
	if err := out.header(); err != nil {
		return sum, fmt.Errorf("journal export: write: %w", err)
	}
	emit := func(j *journal) error {
		if len(j.lines) == 0 {
			return nil
		}
		sum.Journals++
		sum.Lines += len(j.lines)
		if err := out.journal(j); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return nil
	}
	if o.Granularity == JournalByDay {
		err = journalsByDay(ctx, tx, o, emit)
	} else {
		err = journalsByTransaction(ctx, tx, o, emit)
	}
	if err != nil {
		return sum, fmt.Errorf("journal export: %w", err)
	}
	if err := out.flush(); err != nil {
		return sum, fmt.Errorf("journal export: write: %w", err)
	}
	return sum, nil
}

func chartOrder() []string {
	names := make([]string, len(chart))
	for i, a := range chart {
		names[i] = string(a)
	}
	return names
}

// journalsByDay nets each account per day and currency, in the database:
// what comes back is a few lines a day, however many entries the day has.
func journalsByDay(ctx context.Context, tx pgx.Tx, o JournalOpts, emit func(*journal) error) error {
	rows, err := tx.Query(ctx, `
		SELECT (t.posted_at AT TIME ZONE 'UTC')::date AS day, t.currency, e.account,
		       (sum(e.debit) - sum(e.credit))::text
		FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
		WHERE t.posted_at >= $1 AND t.posted_at < $2 AND ($3 = '' OR t.currency = $3)
		GROUP BY 1, 2, 3
		ORDER BY 1, 2, array_position($4::text[], e.account) NULLS LAST, 3`,
		o.From, o.To, o.Currency, chartOrder())
	if err != nil {
		return err
	}
	defer rows.Close()
	var cur *journal
	for rows.Next() {
		var (
			day      time.Time
			currency string
			account  string
			netText  string
		)
		if err := rows.Scan(&day, &currency, &account, &netText); err != nil {
			return err
		}
		net, err := decimal.NewFromString(netText)
		if err != nil {
			return fmt.Errorf("parse %q: %w", netText, err)
		}
		day = day.UTC()
		if cur == nil || !cur.day.Equal(day) || cur.currency != currency {
			if cur != nil {
				if err := emit(cur); err != nil {
					return err
				}
			}
			cur = &journal{
				id:  fmt.Sprintf("PG-%s-%s", day.Format("20060102"), strings.ToUpper(currency)),
				day: day, currency: currency,
				description: fmt.Sprintf("paygate %s %s", currency, day.Format(time.DateOnly)),
			}
		}
		switch net.Sign() {
		case 1:
			cur.lines = append(cur.lines, journalEntry{account: Account(account), debit: present(net, currency)})
		case -1:
			cur.lines = append(cur.lines, journalEntry{account: Account(account), credit: present(net.Neg(), currency)})
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if cur != nil {
		return emit(cur)
	}
	return nil
}

// journalsByTransaction writes each transaction as its own journal, in
// posting order (posted_at, then id), with its payment's order reference
// as the payment has it now: an export by transaction is of the ledger as
// it stands, not a closed period's frozen export (PeriodJournalOpts), which
// is by day and names no payment.
func journalsByTransaction(ctx context.Context, tx pgx.Tx, o JournalOpts, emit func(*journal) error) error {
	rows, err := tx.Query(ctx, `
		SELECT t.id, t.ref, t.kind, t.currency, t.occurred_at, t.posted_at, coalesce(t.payment_id, ''),
		       coalesce(p.reference, ''), e.account, e.debit::text, e.credit::text
		FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
		LEFT JOIN payments p ON p.id = t.payment_id
		WHERE t.posted_at >= $1 AND t.posted_at < $2 AND ($3 = '' OR t.currency = $3)
		ORDER BY t.posted_at, t.id, e.id`,
		o.From, o.To, o.Currency)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		cur    *journal
		lastID int64 = -1
	)
	for rows.Next() {
		var (
			id                                        int64
			ref, kind, currency, paymentID, reference string
			occurred, posted                          time.Time
			account, debitText, creditText            string
		)
		if err := rows.Scan(&id, &ref, &kind, &currency, &occurred, &posted, &paymentID, &reference,
			&account, &debitText, &creditText); err != nil {
			return err
		}
		if id != lastID {
			if cur != nil {
				if err := emit(cur); err != nil {
					return err
				}
			}
			lastID = id
			posted, occurred = posted.UTC(), occurred.UTC()
			desc := kind + " " + ref
			if paymentID != "" {
				desc += " payment " + paymentID
			}
			if occurred.Format(time.DateOnly) != posted.Format(time.DateOnly) {
				// Posted in a later period than it occurred in: say when the
				// money moved.
				desc += " occurred " + occurred.Format(time.DateOnly)
			}
			cur = &journal{
				id:  "PG-T" + strconv.FormatInt(id, 10),
				day: time.Date(posted.Year(), posted.Month(), posted.Day(), 0, 0, 0, 0, time.UTC), currency: currency,
				description: desc, reference: reference,
			}
		}
		debit, err1 := decimal.NewFromString(debitText)
		credit, err2 := decimal.NewFromString(creditText)
		if err := errors.Join(err1, err2); err != nil {
			return fmt.Errorf("parse entry of %s: %w", ref, err)
		}
		cur.lines = append(cur.lines, journalEntry{account: Account(account), debit: present(debit, currency), credit: present(credit, currency)})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if cur != nil {
		return emit(cur)
	}
	return nil
}

// journalWriter renders journals in one format.
type journalWriter struct {
	csv         *csv.Writer
	format      JournalFormat
	granularity JournalGranularity
	s           ExportSettings
}

func newJournalWriter(w io.Writer, o JournalOpts) *journalWriter {
	return &journalWriter{csv: csv.NewWriter(w), format: o.Format, granularity: o.Granularity, s: o.Settings}
}

// genericHeader is the generic format's header by day; by transaction it
// gains reference at the end, so that a reader by position reads the
// columns it knew where they were. A day's header never changes: closed
// periods' exports (by day) are kept as their first bytes.
var genericHeader = []string{"date", "journal", "account", "account_code", "currency", "debit", "credit", "description"}

// orderText is what Xero's and QuickBooks' descriptions add to name the
// order a transaction's payment is for: nothing when it has no reference.
func orderText(reference string) string {
	if reference == "" {
		return ""
	}
	return " · order " + reference
}

func (w *journalWriter) header() error {
	switch w.format {
	case JournalXero:
		return w.csv.Write([]string{"Narration", "Date", "Description", "AccountCode", "TaxRate", "Amount"})
	case JournalQuickBooks:
		return w.csv.Write([]string{"Journal No", "Journal Date", "Account Name", "Debits", "Credits", "Description"})
	default:
		if w.granularity == JournalByTransaction {
			return w.csv.Write(append(slices.Clip(genericHeader), "reference"))
		}
		return w.csv.Write(genericHeader)
	}
}

func (w *journalWriter) journal(j *journal) error {
	side := func(d decimal.Decimal) string {
		if d.IsZero() {
			return ""
		}
		return Format(d, j.currency)
	}
	// Accounting systems show Description beside the amounts, so Xero's
	// and QuickBooks' name the order there; the generic format has a
	// column of its own for it.
	order := orderText(j.reference)
	for _, l := range j.lines {
		var rec []string
		switch w.format {
		case JournalXero:
			amount := Format(l.debit, j.currency)
			if l.debit.IsZero() {
				amount = "-" + Format(l.credit, j.currency)
			}
			// Xero reads "dd mmm yyyy" whatever the organisation's
			// region, and groups lines into a journal by Narration and
			// Date.
			rec = []string{j.id + " " + j.description + order, j.day.Format("02 Jan 2006"), string(l.account) + order,
				w.s.Accounts.Code(l.account), w.s.XeroTaxRate, amount}
		case JournalQuickBooks:
			rec = []string{j.id, j.day.Format("01/02/2006"), w.s.Accounts.Code(l.account), side(l.debit), side(l.credit), j.description + order}
		default:
			rec = []string{j.day.Format(time.DateOnly), j.id, string(l.account), w.s.Accounts.Code(l.account), j.currency,
				side(l.debit), side(l.credit), j.description}
			if w.granularity == JournalByTransaction {
				rec = append(rec, j.reference)
			}
		}
		if err := w.csv.Write(rec); err != nil {
			return err
		}
	}
	return nil
}

func (w *journalWriter) flush() error {
	w.csv.Flush()
	return w.csv.Error()
}

// PeriodJournalOpts are the options of a closed period's frozen export in
// format: its days, every currency, one journal per day and currency, and
// the export settings stored with the close. By day, no line names a
// payment or its order reference, so nothing a payment learns after the
// close changes these bytes.
func PeriodJournalOpts(c ClosedPeriod, format JournalFormat) JournalOpts {
	return JournalOpts{From: c.Start, To: c.End(), Format: format, Granularity: JournalByDay, Settings: c.Export}
}

// PeriodJournalDigest returns the lowercase hex SHA-256 and the size of a
// closed period's export in format, computing them by one export the
// first time and keeping them: nothing can be posted in the period any
// more and its settings are stored, so every later export has the same
// bytes.
func PeriodJournalDigest(ctx context.Context, db interface {
	Beginner
	Querier
}, c ClosedPeriod, format JournalFormat) (digest string, size int64, err error) {
	err = db.QueryRow(ctx, `SELECT digest, bytes FROM ledger_period_exports WHERE period = $1 AND format = $2`,
		c.String(), string(format)).Scan(&digest, &size)
	if err == nil {
		return digest, size, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", 0, fmt.Errorf("read the digest of %s's %s export: %w", c.Period, format, err)
	}
	h := sha256.New()
	counted := &countingWriter{w: h}
	if _, err := WriteJournal(ctx, db, counted, PeriodJournalOpts(c, format)); err != nil {
		return "", 0, err
	}
	digest, size = hex.EncodeToString(h.Sum(nil)), counted.n
	// Two first readers compute the same bytes; the first to store wins.
	if _, err := db.Exec(ctx, `
		INSERT INTO ledger_period_exports (period, format, digest, bytes) VALUES ($1, $2, $3, $4)
		ON CONFLICT (period, format) DO NOTHING`, c.String(), string(format), digest, size); err != nil {
		return "", 0, fmt.Errorf("keep the digest of %s's %s export: %w", c.Period, format, err)
	}
	return digest, size, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
