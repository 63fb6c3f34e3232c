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

	"github.com/paygate/paygate/internal/csvtext"
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
	// JournalByDay: one journal per UTC day (of posted_at) and currency
	// (in the books currency: per day), each account's movements netted
	// into one line.
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
	// Currency keeps one currency ("" all): the generic format's journals
	// in it; in the books currency (Xero, QuickBooks), the movements made
	// in it, converted.
	Currency string
	Settings ExportSettings
	// Part is the part of a Xero export to write, from 1 (XeroPartLines);
	// 0 writes every journal in one file. Other formats have one part.
	Part int
	// Ready, when set, is called once the export knows how many parts it
	// has and how many movements it leaves out, before its first byte is
	// written (an HTTP answer's headers); its error ends the export.
	Ready func(JournalSummary) error
}

// XeroPartLines is the most data lines (the header row not counted) a
// part of a Xero export holds: Xero refuses a larger import file.
const XeroPartLines = 300

// JournalSummary says what an export wrote, and what it left out.
type JournalSummary struct {
	Journals int
	Lines    int
	// Parts is how many parts the export has (Xero; 1 for the others).
	Parts int
	// Unconverted counts the ledger transactions posted in the range that
	// an export in the books currency leaves out, their provider having
	// not settled them into it by the end of the range (0 in the generic
	// format, which has every currency).
	Unconverted int
}

// JournalPartError is the answer to a part beyond an export's last: it
// has Parts.
type JournalPartError struct {
	Part, Parts int
}

func (e *JournalPartError) Error() string {
	return fmt.Sprintf("ledger: the export has %d part(s), so no part %d", e.Parts, e.Part)
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

// booksCurrency is the currency o's journals are converted into: the
// books currency for Xero and QuickBooks, "" for the generic format, and
// for a period closed before exports had one (its settings carry none),
// whose bytes stay those of its close.
func (o JournalOpts) booksCurrency() string {
	if o.Format == JournalGeneric {
		return ""
	}
	return o.Settings.BooksCurrency
}

// errPartWritten stops reading the journals once the part asked for is
// written.
var errPartWritten = errors.New("the part is written")

// partCounter places journals, in order, into parts of at most
// XeroPartLines lines, a journal never split: a journal that does not fit
// in the current part starts the next.
type partCounter struct{ part, lines int }

func (p *partCounter) place(lines int) int {
	if p.part == 0 || p.lines > 0 && p.lines+lines > XeroPartLines {
		p.part++
		p.lines = 0
	}
	p.lines += lines
	return p.part
}

// WriteJournal writes the journals of the transactions posted in
// [o.From, o.To) to w as CSV in o.Format, one header line first. Every
// journal balances; a day whose accounts all net to zero has no journal.
// Rows are written as the database returns them, a journal at a time, so
// a month of millions of entries is exported in bounded memory (the
// statements run without the session's statement timeout: ctx bounds
// them). The same ledger rows and options give the same bytes.
//
// Xero and QuickBooks exports with a books currency
// (o.Settings.BooksCurrency) are in it only: a movement in another
// currency is exported once its provider settled it into the books
// currency, on the day of that settlement (or its own, if later), each
// line converted at the settlement's rate and rounded half away from
// zero to the currency's minor unit, the rounding difference on
// fx_clearing; the conversions themselves are not exported (in one
// currency they net to nothing). The movements posted in the range and
// not settled by its end are left out and counted (Unconverted). A Xero
// export is read twice in one snapshot: once to place its journals into
// parts, once to write the part asked for.
//
// It fails with ErrInvalidPeriod for an empty range, with
// *JournalPartError for a part the export does not have (nothing
// written), with an error naming a bad format, granularity or books
// currency, with Ready's error, or with w's or the database's error (the
// output is then incomplete).
func WriteJournal(ctx context.Context, db Beginner, w io.Writer, o JournalOpts) (JournalSummary, error) {
	sum := JournalSummary{Parts: 1}
	if !o.Format.Valid() || !o.Granularity.Valid() || o.Part < 0 {
		return sum, fmt.Errorf("journal export: format %q, granularity %q, part %d", o.Format, o.Granularity, o.Part)
	}
	if !o.From.Before(o.To) {
		return sum, fmt.Errorf("%w: the export's range [%s, %s) is empty", ErrInvalidPeriod, o.From.Format(time.RFC3339), o.To.Format(time.RFC3339))
	}
	books := o.booksCurrency()
	var exp int32
	if books != "" {
		var err error
		if exp, err = Exponent(books); err != nil {
			return sum, fmt.Errorf("journal export: books currency: %w", err)
		}
	}
	// One snapshot for every statement: the parts counted are the parts
	// written, and the movements left out are those the journals lack.
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return sum, fmt.Errorf("journal export: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only
	if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
		return sum, fmt.Errorf("journal export: %w", err)
	}
	journals := func(emit func(*journal) error) error {
		nonEmpty := func(j *journal) error {
			if len(j.lines) == 0 {
				return nil
			}
			return emit(j)
		}
		switch {
		case books != "" && o.Granularity == JournalByDay:
			return journalsByDayIn(ctx, tx, o, books, exp, nonEmpty)
		case books != "":
			return journalsByTransactionIn(ctx, tx, o, books, exp, nonEmpty)
		case o.Granularity == JournalByDay:
			return journalsByDay(ctx, tx, o, nonEmpty)
		}
		return journalsByTransaction(ctx, tx, o, nonEmpty)
	}

	if books != "" {
		if sum.Unconverted, err = countUnconverted(ctx, tx, o, books); err != nil {
			return sum, fmt.Errorf("journal export: count the movements not settled into %s: %w", books, err)
		}
	}
	part := o.Part
	if o.Format == JournalXero {
		var parts partCounter
		if err := journals(func(j *journal) error { parts.place(len(j.lines)); return nil }); err != nil {
			return sum, fmt.Errorf("journal export: place the journals into parts: %w", err)
		}
		sum.Parts = max(parts.part, 1)
	} else if part == 1 {
		part = 0 // the one part is the whole export
	}
	if part > sum.Parts {
		return sum, &JournalPartError{Part: part, Parts: sum.Parts}
	}
	if o.Ready != nil {
		if err := o.Ready(sum); err != nil {
			return sum, err
		}
	}

	out := newJournalWriter(w, o)
	if err := out.header(); err != nil {
		return sum, fmt.Errorf("journal export: write: %w", err)
	}
	var placed partCounter
	err = journals(func(j *journal) error {
		if part > 0 {
			switch p := placed.place(len(j.lines)); {
			case p < part:
				return nil
			case p > part:
				return errPartWritten
			}
		}
		sum.Journals++
		sum.Lines += len(j.lines)
		if err := out.journal(j); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errPartWritten) {
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
	return dayJournals(rows, emit)
}

// dayJournals reads rows of (day, currency, account, net), in day and
// currency order, into one journal per day and currency.
func dayJournals(rows pgx.Rows, emit func(*journal) error) error {
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

// settledCTE finds, for the payments with a transaction in another
// currency than the books currency ($3) posted in [$1, $2), which of their
// movements in that other currency the provider settled into the books
// currency: converted holds each one's id, the rate of its settlement, and
// the instant it counts at in the books currency (its own posting or its
// settlement's, whichever is later).
//
// The ledger records a settlement as the two legs of NewSettlement, named
// by one ref followed by each leg's currency, both carrying the rate and
// the payment: the leg in the movement's currency took out of
// provider_balance what the movement put in. A movement and the
// presentment leg of its settlement are paired within their payment,
// currency and effect on provider_balance (as reconciliation computes it:
// the movement's amount when it does not touch the account), the n-th
// movement with the n-th settlement in posting order: the ledger does not
// name the movement a leg settles, and movements alike in all of these
// are alike in the books currency but for the rate. Posting order keeps
// the pairs of a closed period fixed: whatever is posted after its close
// comes later in that order.
//
// A payment's movements are read whole (its few transactions, by
// ledger_transactions_payment_id_idx); movements of no payment are never
// settled into another currency (payouts and fees are made in the
// balance's), so they count as not settled.
const settledCTE = `
touched AS MATERIALIZED (
    SELECT DISTINCT payment_id FROM ledger_transactions
    WHERE posted_at >= $1 AND posted_at < $2 AND currency <> $3 AND payment_id IS NOT NULL
), foreign_tx AS MATERIALIZED (
    SELECT t.id, t.ref, t.payment_id, t.currency, t.posted_at, t.exchange_rate,
           CASE WHEN bool_or(e.account = 'provider_balance')
                THEN sum(e.debit - e.credit) FILTER (WHERE e.account = 'provider_balance')
                ELSE sum(e.debit) END AS effect
    FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
    WHERE t.payment_id IN (SELECT payment_id FROM touched) AND t.currency <> $3
    GROUP BY t.id
), moves AS (
    SELECT id, payment_id, currency, effect, posted_at,
           row_number() OVER (PARTITION BY payment_id, currency, effect ORDER BY posted_at, id) AS n
    FROM foreign_tx WHERE exchange_rate IS NULL
), settlements AS (
    SELECT p.payment_id, p.currency, -p.effect AS effect, p.exchange_rate AS rate,
           greatest(p.posted_at, s.posted_at) AS settled_at,
           row_number() OVER (PARTITION BY p.payment_id, p.currency, p.effect
                              ORDER BY greatest(p.posted_at, s.posted_at), p.id) AS n
    FROM foreign_tx p
    JOIN ledger_transactions s ON s.ref = left(p.ref, -length(p.currency)) || $3 AND s.currency = $3
         AND s.payment_id = p.payment_id AND s.exchange_rate = p.exchange_rate
    WHERE p.exchange_rate IS NOT NULL AND right(p.ref, length(p.currency)) = p.currency
), converted AS (
    SELECT m.id, s.rate, greatest(m.posted_at, s.settled_at) AS at
    FROM moves m JOIN settlements s USING (payment_id, currency, effect, n)
)`

// exportedCTE (after settledCTE) is what an export in the books currency
// holds: the books currency's transactions posted in [$1, $2) as they are
// (rate NULL), and the other currencies' movements settled in it, at the
// instant they count at; never a leg of a conversion. $4 keeps the
// movements made in one currency (” all).
const exportedCTE = `, exported AS (
    SELECT t.id, t.posted_at AS at, NULL::numeric AS rate
    FROM ledger_transactions t
    WHERE t.posted_at >= $1 AND t.posted_at < $2 AND t.currency = $3 AND t.exchange_rate IS NULL
      AND ($4 = '' OR $4 = $3)
    UNION ALL
    SELECT c.id, c.at, c.rate
    FROM converted c JOIN ledger_transactions t ON t.id = c.id
    WHERE c.at >= $1 AND c.at < $2 AND ($4 = '' OR t.currency = $4)
)`

// convertedAmount is an entry's side in the books currency: as it is
// without a rate, else converted and rounded half away from zero (as
// numeric round does) to the books currency's $5 places.
func convertedAmount(side string) string {
	return `CASE WHEN x.rate IS NULL THEN e.` + side + ` ELSE round(e.` + side + ` * x.rate, $5) END`
}

// journalsByDayIn is journalsByDay in the books currency: one journal a
// day, each exported movement's lines converted, a converted movement's
// rounding difference on fx_clearing, every account netted, in the
// database.
func journalsByDayIn(ctx context.Context, tx pgx.Tx, o JournalOpts, books string, exp int32, emit func(*journal) error) error {
	rows, err := tx.Query(ctx, `WITH `+settledCTE+exportedCTE+`, lines AS (
		SELECT x.id, (x.at AT TIME ZONE 'UTC')::date AS day, e.account,
		       `+convertedAmount("debit")+` AS debit, `+convertedAmount("credit")+` AS credit
		FROM exported x JOIN ledger_entries e ON e.transaction_id = x.id
	), nets AS (
		SELECT day, account, debit - credit AS net FROM lines
		UNION ALL
		SELECT day, 'fx_clearing', sum(credit) - sum(debit) FROM lines
		GROUP BY id, day HAVING sum(debit) <> sum(credit)
	)
	SELECT day, $3::text, account, sum(net)::text FROM nets
	GROUP BY day, account
	ORDER BY day, array_position($6::text[], account) NULLS LAST, account`,
		o.From, o.To, books, o.Currency, exp, chartOrder())
	if err != nil {
		return err
	}
	return dayJournals(rows, emit)
}

// journalsByTransactionIn is journalsByTransaction in the books currency:
// each exported transaction a journal, in the order of the instant it
// counts at; a converted movement's description says what it was and the
// rate, its rounding difference is on fx_clearing, and a line converted
// to nothing is left out.
func journalsByTransactionIn(ctx context.Context, tx pgx.Tx, o JournalOpts, books string, exp int32, emit func(*journal) error) error {
	rows, err := tx.Query(ctx, `WITH `+settledCTE+exportedCTE+`
		SELECT t.id, t.ref, t.kind, t.currency, t.occurred_at, x.at, coalesce(t.payment_id, ''),
		       coalesce(p.reference, ''), coalesce(x.rate::text, ''), e.account, e.debit::text,
		       (`+convertedAmount("debit")+`)::text, (`+convertedAmount("credit")+`)::text
		FROM exported x JOIN ledger_transactions t ON t.id = x.id
		JOIN ledger_entries e ON e.transaction_id = t.id
		LEFT JOIN payments p ON p.id = t.payment_id
		ORDER BY x.at, t.id, e.id`,
		o.From, o.To, books, o.Currency, exp)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		cur    *journal
		lastID int64           = -1
		moved  decimal.Decimal // the movement in its own currency: the sum of its debits
		from   string
		rate   string
	)
	done := func() error {
		if cur == nil {
			return nil
		}
		if rate != "" {
			cur.description += fmt.Sprintf(" · %s %s at %s", from, Format(moved, from), rate)
		}
		balanceOnFXClearing(cur)
		return emit(cur)
	}
	for rows.Next() {
		var (
			id                                        int64
			ref, kind, currency, paymentID, reference string
			occurred, at                              time.Time
			rateText, account, movedText              string
			debitText, creditText                     string
		)
		if err := rows.Scan(&id, &ref, &kind, &currency, &occurred, &at, &paymentID, &reference,
			&rateText, &account, &movedText, &debitText, &creditText); err != nil {
			return err
		}
		if id != lastID {
			if err := done(); err != nil {
				return err
			}
			lastID, moved, from, rate = id, decimal.Zero, currency, rateText
			cur = &journal{id: "PG-T" + strconv.FormatInt(id, 10), currency: books, reference: reference}
			cur.day, cur.description = transactionDay(kind, ref, paymentID, occurred, at)
		}
		m, err1 := decimal.NewFromString(movedText)
		debit, err2 := decimal.NewFromString(debitText)
		credit, err3 := decimal.NewFromString(creditText)
		if err := errors.Join(err1, err2, err3); err != nil {
			return fmt.Errorf("parse entry of %s: %w", ref, err)
		}
		moved = moved.Add(m)
		if debit.IsZero() && credit.IsZero() {
			continue // too small to be anything in the books currency
		}
		cur.lines = append(cur.lines, journalEntry{account: Account(account), debit: present(debit, books), credit: present(credit, books)})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return done()
}

// transactionDay is the day a transaction's journal is dated (of at, the
// instant it counts at) and its description: its kind, ref and payment,
// and the day the money moved when that is another.
func transactionDay(kind, ref, paymentID string, occurred, at time.Time) (time.Time, string) {
	at, occurred = at.UTC(), occurred.UTC()
	desc := kind + " " + ref
	if paymentID != "" {
		desc += " payment " + paymentID
	}
	if occurred.Format(time.DateOnly) != at.Format(time.DateOnly) {
		// Posted in a later period than it occurred in, or settled later:
		// say when the money moved.
		desc += " occurred " + occurred.Format(time.DateOnly)
	}
	return time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC), desc
}

// balanceOnFXClearing puts a converted journal's rounding difference (its
// lines rounded one by one) on its fx_clearing line, adding one if it has
// none, so that it balances.
func balanceOnFXClearing(j *journal) {
	diff := decimal.Zero // debits - credits
	for _, l := range j.lines {
		diff = diff.Add(l.debit).Sub(l.credit)
	}
	if diff.IsZero() {
		return
	}
	i := slices.IndexFunc(j.lines, func(l journalEntry) bool { return l.account == AccountFXClearing })
	net := diff.Neg()
	if i >= 0 {
		net = net.Add(j.lines[i].debit).Sub(j.lines[i].credit)
		j.lines = slices.Delete(j.lines, i, i+1)
	}
	switch net.Sign() {
	case 1:
		j.lines = append(j.lines, journalEntry{account: AccountFXClearing, debit: present(net, j.currency), credit: decimal.Zero})
	case -1:
		j.lines = append(j.lines, journalEntry{account: AccountFXClearing, debit: decimal.Zero, credit: present(net.Neg(), j.currency)})
	}
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
			cur = &journal{id: "PG-T" + strconv.FormatInt(id, 10), currency: currency, reference: reference}
			cur.day, cur.description = transactionDay(kind, ref, paymentID, occurred, posted)
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
	// Text cells may carry the merchant's words (the order reference):
	// csvtext.Cell keeps a spreadsheet from reading them as formulas.
	// Amounts are written as they are: Xero's credits are negative.
	text := csvtext.Cell
	// Accounting systems show Description beside the amounts, so Xero's
	// and QuickBooks' name the order there; the generic format has a
	// column of its own for it.
	order := orderText(j.reference)
	for _, l := range j.lines {
		var rec []string
		code := text(w.s.Accounts.Code(l.account))
		switch w.format {
		case JournalXero:
			amount := Format(l.debit, j.currency)
			if l.debit.IsZero() {
				amount = "-" + Format(l.credit, j.currency)
			}
			// Xero reads "dd mmm yyyy" whatever the organisation's
			// region, and groups lines into a journal by Narration and
			// Date.
			rec = []string{text(j.id + " " + j.description + order), j.day.Format("02 Jan 2006"), text(string(l.account) + order),
				code, text(w.s.XeroTaxRate), amount}
		case JournalQuickBooks:
			rec = []string{text(j.id), j.day.Format("01/02/2006"), code, side(l.debit), side(l.credit), text(j.description + order)}
		default:
			rec = []string{j.day.Format(time.DateOnly), text(j.id), text(string(l.account)), code, text(j.currency),
				side(l.debit), side(l.credit), text(j.description)}
			if w.granularity == JournalByTransaction {
				rec = append(rec, text(j.reference))
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
// format: its days, every currency, one journal per day (and currency, in
// the generic format), and the export settings stored with the close,
// its books currency among them (none for a period closed before exports
// had one: its Xero and QuickBooks exports stay per currency, as they
// were at its close). By day, no line names a payment or its order
// reference, so nothing a payment learns after the close changes these
// bytes; a movement of the period settled into the books currency after
// the close counts in the open period the settlement is posted in.
func PeriodJournalOpts(c ClosedPeriod, format JournalFormat) JournalOpts {
	return JournalOpts{From: c.Start, To: c.End(), Format: format, Granularity: JournalByDay, Settings: c.Export}
}

// PeriodJournalDigest returns the lowercase hex SHA-256 and the size of a
// closed period's export in format (of its part, from 1, for Xero; 0 the
// whole export), computing them by one export the first time and keeping
// them: nothing can be posted in the period any more and its settings are
// stored, so every later export has the same bytes. It fails with
// *JournalPartError for a part the export does not have, or a database
// error.
func PeriodJournalDigest(ctx context.Context, db interface {
	Beginner
	Querier
}, c ClosedPeriod, format JournalFormat, part int) (digest string, size int64, err error) {
	key := string(format)
	if format == JournalXero && part > 0 {
		key += "/" + strconv.Itoa(part)
	}
	err = db.QueryRow(ctx, `SELECT digest, bytes FROM ledger_period_exports WHERE period = $1 AND format = $2`,
		c.String(), key).Scan(&digest, &size)
	if err == nil {
		return digest, size, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", 0, fmt.Errorf("read the digest of %s's %s export: %w", c.Period, key, err)
	}
	h := sha256.New()
	counted := &countingWriter{w: h}
	o := PeriodJournalOpts(c, format)
	o.Part = part
	if _, err := WriteJournal(ctx, db, counted, o); err != nil {
		return "", 0, err
	}
	digest, size = hex.EncodeToString(h.Sum(nil)), counted.n
	// Two first readers compute the same bytes; the first to store wins.
	if _, err := db.Exec(ctx, `
		INSERT INTO ledger_period_exports (period, format, digest, bytes) VALUES ($1, $2, $3, $4)
		ON CONFLICT (period, format) DO NOTHING`, c.String(), key, digest, size); err != nil {
		return "", 0, fmt.Errorf("keep the digest of %s's %s export: %w", c.Period, key, err)
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
