package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"
)

// Querier is what the read functions need; *pgxpool.Pool, *pgx.Conn and
// pgx.Tx all satisfy it, so a caller reads either on its own or inside its
// transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// The headers and their entries go in one statement: one round trip, and no
// window in which a header exists without its entries. A header whose ref
// is taken is not returned by the header CTE, so none of its entries is
// inserted either.
//
// Headers are inserted in ref order so that two batches posting some of the
// same refs take the unique key's locks in the same order: the later waits
// for the earlier instead of each waiting for the other. Entries follow
// their input order, so a transaction's entries keep the order they were
// posted in.
//
// posted_at is occurred_at, or the books' boundary when that is later (the
// movement occurred in a closed period). The boundary is read FOR SHARE
// before any row is written and stays locked until commit: a close, which
// locks it FOR UPDATE, waits for this transaction, and a posting that comes
// while a close runs waits for it and reads the boundary it moved.
const insertTransactions = `
WITH books AS MATERIALIZED (
    SELECT closed_through FROM ledger_books FOR SHARE
), header AS (
    INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, posted_at, payment_id, event_id, entry_count, exchange_rate)
    SELECT h.ref, h.kind, h.currency, h.occurred_at, greatest(h.occurred_at, books.closed_through),
           NULLIF(h.payment_id, ''), NULLIF(h.event_id, ''), h.entry_count, NULLIF(h.exchange_rate, '')::numeric
    FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::integer[], $12::text[])
        AS h(ref, kind, currency, occurred_at, payment_id, event_id, entry_count, exchange_rate)
    CROSS JOIN books
    ORDER BY h.ref
    ON CONFLICT ON CONSTRAINT ledger_transactions_ref_key DO NOTHING
    RETURNING id, ref, currency
), lines AS (
    INSERT INTO ledger_entries (transaction_id, account, currency, debit, credit)
    SELECT header.id, e.account, header.currency, e.debit::numeric, e.credit::numeric
    FROM unnest($8::text[], $9::text[], $10::text[], $11::text[]) WITH ORDINALITY AS e(ref, account, debit, credit, n)
    JOIN header ON header.ref = e.ref
    ORDER BY e.n
)
SELECT ref FROM header`

// PostTx records t in the caller's transaction, once. It returns created
// true when t is new, and false with a nil error when a transaction with the
// same Ref and the same content (kind, currency, payment, entries; not
// OccurredAt nor EventID) is already in the ledger: the provider delivered
// the movement twice, which is normal.
//
// Concurrent posts of one ref are decided by the ref's unique key: the
// losers wait for the winner's commit and then see its row. Under
// REPEATABLE READ or SERIALIZABLE a loser instead gets a serialization
// failure, to be retried like any other.
//
// t is posted at its OccurredAt, or, when that falls in a closed period, at
// the first instant of the first open period (its OccurredAt is kept): the
// books of a closed period never change.
//
// It fails with the errors of Validate, with *RefConflictError (matching
// ErrRefConflict) when the ref holds different content, or with a wrapped
// database error.
func PostTx(ctx context.Context, tx pgx.Tx, t Transaction) (created bool, err error) {
	got, err := PostManyTx(ctx, tx, []Transaction{t})
	if err != nil {
		return false, err
	}
	return got[0], nil
}

// PostManyTx is PostTx for many transactions, with a fixed number of
// statements whatever len(ts): created[i] tells whether ts[i] was new. A ref
// given twice in ts is posted once, by its first occurrence; the later ones
// are duplicates (created false) when their content is the same.
//
// Every transaction is validated before the database is touched. It fails
// with the errors of Validate, with *RefConflictError (matching
// ErrRefConflict) when a ref holds, or is given in ts with, different
// content, or with a wrapped database error; the errors name the ref at
// fault. On an error some of ts may already be written in tx, which the
// caller must then roll back. An empty ts does nothing.
func PostManyTx(ctx context.Context, tx pgx.Tx, ts []Transaction) (created []bool, err error) {
	if len(ts) == 0 {
		return nil, nil
	}
	for _, t := range ts {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("post %s: %w", t.Ref, err)
		}
	}

	// first[ref] is the index in ts of the ref's first occurrence, the one
	// sent to the database; a later one is compared with it here, with no
	// need to ask the database.
	first := make(map[string]int, len(ts))
	var (
		refs, kinds, currencies, payments, events []string
		rates                                     []string
		occurred                                  []time.Time
		counts                                    []int32
		entryRefs, accounts, debits, credits      []string
	)
	for i, t := range ts {
		if j, seen := first[t.Ref]; seen {
			if err := CheckSameContent(ts[j], t); err != nil {
				return nil, err
			}
			continue
		}
		first[t.Ref] = i
		refs, kinds, currencies = append(refs, t.Ref), append(kinds, string(t.Kind)), append(currencies, t.Currency)
		payments, events = append(payments, t.PaymentID), append(events, t.EventID)
		occurred, counts = append(occurred, t.OccurredAt), append(counts, int32(len(t.Entries)))
		rate := ""
		if t.ExchangeRate.Valid {
			rate = t.ExchangeRate.Decimal.String()
		}
		rates = append(rates, rate)
		exp, _ := Exponent(t.Currency) // Validate checked it
		for _, e := range t.Entries {
			// At the currency's scale, so the stored NUMERIC reads as
			// 360.00 for anyone querying the table directly. Exact:
			// Validate refused anything finer.
			entryRefs, accounts = append(entryRefs, t.Ref), append(accounts, string(e.Account))
			debits, credits = append(debits, e.Debit.StringFixed(exp)), append(credits, e.Credit.StringFixed(exp))
		}
	}

	rows, err := tx.Query(ctx, insertTransactions,
		refs, kinds, currencies, occurred, payments, events, counts,
		entryRefs, accounts, debits, credits, rates)
	if err != nil {
		return nil, fmt.Errorf("post %s: %w", andMore(refs), translate(err))
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("post %s: %w", andMore(refs), translate(err))
	}

	created = make([]bool, len(ts))
	for _, ref := range inserted {
		created[first[ref]] = true
	}
	if len(inserted) == len(refs) {
		return created, nil
	}

	// The refs not inserted were taken, earlier or by a transaction that
	// committed while this one waited on the key; either way their rows are
	// visible now.
	var taken []string
	for _, ref := range refs {
		if !created[first[ref]] {
			taken = append(taken, ref)
		}
	}
	stored, err := TransactionsByRefs(ctx, tx, taken)
	if err != nil {
		return nil, fmt.Errorf("post %s: load existing: %w", andMore(taken), err)
	}
	for _, ref := range taken {
		s, ok := stored[ref]
		if !ok {
			return nil, fmt.Errorf("post %s: load existing: %w", ref, ErrNotFound)
		}
		if err := CheckSameContent(s, ts[first[ref]]); err != nil {
			return nil, err
		}
	}
	return created, nil
}

// CheckSameContent tells whether t may be posted where stored, the
// transaction with t's ref, already is: nil when both are the same money
// movement (kind, currency, payment and entries; not OccurredAt nor
// EventID), so posting t would be a no-op, else a *RefConflictError
// (matching ErrRefConflict) wrapped as PostTx wraps it. It lets a caller that
// already read the stored transactions decide before writing anything.
func CheckSameContent(stored, t Transaction) error {
	if diff := sameContent(stored, t); diff != "" {
		return fmt.Errorf("post %s: %w", t.Ref, &RefConflictError{Ref: t.Ref, Detail: diff})
	}
	return nil
}

// andMore names a set of refs or ids in an error: the one when there is one,
// as the single-item functions always did, else the first and a count.
func andMore(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return fmt.Sprintf("%s and %d more", names[0], len(names)-1)
}

// translate turns the database's refusals into this package's sentinels, so
// that no other package inspects pgconn errors. Validate runs first, so
// reaching one of these means Go and the schema disagree.
func translate(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	var sentinel error
	switch pgErr.ConstraintName {
	case "ledger_transaction_balanced":
		sentinel = ErrUnbalanced
	case "ledger_transaction_entries", "ledger_transactions_entry_count_check", "ledger_entries_transaction_fkey":
		sentinel = ErrInvalidEntries
	case "ledger_transactions_kind_check":
		sentinel = ErrInvalidKind
	case "ledger_transactions_currency_check":
		sentinel = ErrUnknownCurrency
	case "ledger_transactions_ref_check":
		sentinel = ErrInvalidTransaction
	case "ledger_entries_account_check":
		sentinel = ErrInvalidAccount
	case "ledger_entries_amount_check":
		sentinel = ErrInvalidAmount
	case "ledger_period_closed":
		sentinel = ErrPeriodClosed
	case "ledger_period_order":
		sentinel = ErrPeriodOrder
	case "ledger_period_not_ended":
		sentinel = ErrPeriodNotEnded
	default:
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}

// queryTransactions reads the ledger transactions named t by the FROM item
// transactions (ledger_transactions itself, or a lookup), restricted by
// where, with their entries, and groups the rows, which come ordered by
// transaction then entry, into transactions.
//
// Each read costs what it finds, whatever the ledger's size or its
// statistics: the entries are read per transaction found, through their
// index, and a lookup by refs probes the refs' index per ref. As plain
// joins the planner chose, on statistics taken while the ledger was small,
// to hash all the entries or to scan all the transactions, and kept those
// plans as the ledger grew: applying's lookup of a batch's refs, which
// mostly finds nothing, read the whole ledger. OFFSET 0 keeps a subquery
// from being flattened back into such a join.
func queryTransactions(ctx context.Context, q Querier, transactions, where string, args ...any) ([]Transaction, error) {
	query := `
SELECT t.ref, t.kind, t.currency, t.occurred_at, t.posted_at, coalesce(t.payment_id, ''), coalesce(t.event_id, ''),
       e.account, e.debit::text, e.credit::text, t.id, t.exchange_rate::text
FROM ` + transactions + `
CROSS JOIN LATERAL (
    SELECT e.id, e.account, e.debit, e.credit FROM ledger_entries e WHERE e.transaction_id = t.id OFFSET 0
) e
` + where
	// Ties on occurred_at are common (a capture and its fee share the
	// charge's timestamp) and break by ref, not by id: id is arrival order,
	// and the same movements arriving in another order must read the same.
	rows, err := q.Query(ctx, query+"\nORDER BY t.occurred_at, t.ref, e.id", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()

	out := []Transaction{}
	lastID := int64(-1)
	for rows.Next() {
		var (
			t             Transaction
			kind, account string
			debit, credit string
			id            int64
			dr, cr        decimal.Decimal
			rate          *string
		)
		if err := rows.Scan(&t.Ref, &kind, &t.Currency, &t.OccurredAt, &t.PostedAt, &t.PaymentID, &t.EventID,
			&account, &debit, &credit, &id, &rate); err != nil {
			return nil, err
		}
		if rate != nil {
			r, err := decimal.NewFromString(*rate)
			if err != nil {
				return nil, fmt.Errorf("parse exchange rate %q: %w", *rate, err)
			}
			t.ExchangeRate = decimal.NewNullDecimal(r)
		}
		if dr, err = decimal.NewFromString(debit); err != nil {
			return nil, fmt.Errorf("parse debit %q: %w", debit, err)
		}
		if cr, err = decimal.NewFromString(credit); err != nil {
			return nil, fmt.Errorf("parse credit %q: %w", credit, err)
		}
		if id != lastID {
			t.Kind = Kind(kind)
			t.OccurredAt, t.PostedAt = t.OccurredAt.UTC(), t.PostedAt.UTC()
			out = append(out, t)
			lastID = id
		}
		last := &out[len(out)-1]
		last.Entries = append(last.Entries, Entry{
			Account: Account(account),
			Debit:   present(dr, last.Currency),
			Credit:  present(cr, last.Currency),
		})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// present gives an amount read from the ledger the currency's scale, so
// that 360 USD stored by hand as 360 still formats as 360.00.
func present(amount decimal.Decimal, currency string) decimal.Decimal {
	exp, err := Exponent(currency)
	if err != nil || !amount.Shift(exp).IsInteger() {
		return amount
	}
	return atScale(amount, exp)
}

// TransactionByRef returns the transaction with ref. It fails with
// ErrNotFound.
func TransactionByRef(ctx context.Context, q Querier, ref string) (Transaction, error) {
	ts, err := queryTransactions(ctx, q, "ledger_transactions t", "WHERE t.ref = $1", ref)
	if err != nil {
		return Transaction{}, fmt.Errorf("read transaction %s: %w", ref, err)
	}
	if len(ts) == 0 {
		return Transaction{}, fmt.Errorf("read transaction %s: %w", ref, ErrNotFound)
	}
	return ts[0], nil
}

// TransactionsByRefs returns the transactions with the given refs, by ref,
// with one query. A ref with no transaction is absent from the map, not an
// error; the map is never nil, so a caller may add to it.
func TransactionsByRefs(ctx context.Context, q Querier, refs []string) (map[string]Transaction, error) {
	out := make(map[string]Transaction, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	ts, err := queryTransactions(ctx, q,
		"(SELECT DISTINCT ref FROM unnest($1::text[]) AS r (ref)) r CROSS JOIN LATERAL (SELECT * FROM ledger_transactions t WHERE t.ref = r.ref OFFSET 0) t", "", refs)
	if err != nil {
		return nil, fmt.Errorf("read transactions %s: %w", andMore(refs), err)
	}
	for _, t := range ts {
		out[t.Ref] = t
	}
	return out, nil
}

// TransactionsForPayment returns the payment's transactions in the order
// the money moved (occurred_at, then ref, whatever order they were posted
// in); none is an empty slice, not an error.
func TransactionsForPayment(ctx context.Context, q Querier, paymentID string) ([]Transaction, error) {
	ts, err := queryTransactions(ctx, q, "ledger_transactions t", "WHERE t.payment_id = $1", paymentID)
	if err != nil {
		return nil, fmt.Errorf("read transactions for payment %s: %w", paymentID, err)
	}
	return ts, nil
}

// TransactionsBetween returns the transactions that occurred in [from, to),
// ordered by occurred_at then ref. Reconciliation compares a day
// of them with the provider's records.
func TransactionsBetween(ctx context.Context, q Querier, from, to time.Time) ([]Transaction, error) {
	ts, err := queryTransactions(ctx, q, "ledger_transactions t", "WHERE t.occurred_at >= $1 AND t.occurred_at < $2", from, to)
	if err != nil {
		return nil, fmt.Errorf("read transactions between %s and %s: %w", from.Format(time.RFC3339), to.Format(time.RFC3339), err)
	}
	return ts, nil
}

// Balance returns debits − credits of account in currency over the whole
// ledger, at the currency's scale. It fails with ErrInvalidAccount or
// ErrUnknownCurrency.
func Balance(ctx context.Context, q Querier, account Account, currency string) (decimal.Decimal, error) {
	if !account.Valid() {
		return decimal.Decimal{}, fmt.Errorf("balance: %w: %q", ErrInvalidAccount, account)
	}
	if _, err := Exponent(currency); err != nil {
		return decimal.Decimal{}, fmt.Errorf("balance: %w", err)
	}
	var raw string
	err := q.QueryRow(ctx, `
		SELECT coalesce(sum(debit) - sum(credit), 0)::text
		FROM ledger_entries WHERE account = $1 AND currency = $2`,
		string(account), currency).Scan(&raw)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("balance of %s %s: %w", account, currency, err)
	}
	d, err := decimal.NewFromString(raw)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("balance of %s %s: parse %q: %w", account, currency, raw, err)
	}
	return present(d, currency), nil
}
