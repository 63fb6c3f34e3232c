package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/statemachine"
)

// Payment is the read model of one payment: the fold of its facts.
type Payment struct {
	ID       string
	Provider string
	// ReceiptEmail is where the customer's emails go; ReceiptEmailKnown
	// tells an address nobody gave (known, empty) from one not yet seen.
	ReceiptEmail      string
	ReceiptEmailKnown bool
	statemachine.Summary
	CreatedAt time.Time
	UpdatedAt time.Time
}

// HistoryEntry is one change of a payment's state.
type HistoryEntry struct {
	From    statemachine.State // empty for the first state
	To      statemachine.State
	EventID string
	At      time.Time
}

// ErrPaymentNotFound is returned when no payment has the given id.
var ErrPaymentNotFound = errors.New("payment not found")

const paymentColumns = `id, provider, coalesce(receipt_email, ''), receipt_email IS NOT NULL, status, currency,
	amount::text, amount_captured::text, amount_refunded::text, amount_disputed::text, created_at, updated_at`

func scanPayment(row pgx.Row) (Payment, error) {
	var p Payment
	var amounts [4]string
	err := row.Scan(&p.ID, &p.Provider, &p.ReceiptEmail, &p.ReceiptEmailKnown, &p.State, &p.Currency,
		&amounts[0], &amounts[1], &amounts[2], &amounts[3], &p.CreatedAt, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Payment{}, ErrPaymentNotFound
	}
	if err != nil {
		return Payment{}, err
	}
	for i, dst := range []*decimal.Decimal{&p.Amount, &p.AmountCaptured, &p.AmountRefunded, &p.AmountDisputed} {
		if *dst, err = decimal.NewFromString(amounts[i]); err != nil {
			return Payment{}, fmt.Errorf("read payment %s amount: %w", p.ID, err)
		}
	}
	return p, nil
}

// LockPaymentTx returns the payment, created empty if it is new, locked
// until tx ends. Every change to a payment happens under this lock, so two
// events of one payment are applied one after the other.
func LockPaymentTx(ctx context.Context, tx pgx.Tx, provider, id string) (Payment, error) {
	p, _, err := lockPaymentTx(ctx, tx, provider, id, false)
	return p, err
}

// LockPaymentWithFactsTx is LockPaymentTx that also returns the payment's
// stored facts, read under the lock, in one round trip to the database.
func LockPaymentWithFactsTx(ctx context.Context, tx pgx.Tx, provider, id string) (Payment, []statemachine.Fact, error) {
	return lockPaymentTx(ctx, tx, provider, id, true)
}

// lockPaymentTx pipelines its statements: they run one after the other as
// if sent one by one (the lock is held before the facts are read), in one
// round trip.
func lockPaymentTx(ctx context.Context, tx pgx.Tx, provider, id string, withFacts bool) (Payment, []statemachine.Fact, error) {
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO payments (id, provider) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, id, provider)
	batch.Queue(`SELECT `+paymentColumns+` FROM payments WHERE id = $1 FOR UPDATE`, id)
	if withFacts {
		batch.Queue(selectFacts, id)
	}
	results := tx.SendBatch(ctx, batch)
	defer results.Close()
	if _, err := results.Exec(); err != nil {
		return Payment{}, nil, fmt.Errorf("create payment %s: %w", id, err)
	}
	p, err := scanPayment(results.QueryRow())
	if err != nil {
		return Payment{}, nil, fmt.Errorf("lock payment %s: %w", id, err)
	}
	if !withFacts {
		return p, nil, results.Close()
	}
	rows, err := results.Query()
	if err != nil {
		return Payment{}, nil, fmt.Errorf("read facts of %s: %w", id, err)
	}
	facts, err := scanFacts(rows, id)
	if err != nil {
		return Payment{}, nil, err
	}
	return p, facts, results.Close()
}

// GetPayment returns one payment.
//
// It fails with ErrPaymentNotFound.
func GetPayment(ctx context.Context, q Querier, id string) (Payment, error) {
	p, err := scanPayment(q.QueryRow(ctx, `SELECT `+paymentColumns+` FROM payments WHERE id = $1`, id))
	if err != nil && !errors.Is(err, ErrPaymentNotFound) {
		return Payment{}, fmt.Errorf("get payment %s: %w", id, err)
	}
	return p, err
}

// AddFactsTx stores facts not yet known for the payment and returns the
// ones that were new, in their order, with one statement. A fact already
// stored under the same key, or given twice, is a duplicate report and
// changes nothing.
func AddFactsTx(ctx context.Context, tx pgx.Tx, paymentID string, facts []statemachine.Fact) ([]statemachine.Fact, error) {
	if len(facts) == 0 {
		return nil, nil
	}
	var (
		keys      = make([]string, len(facts))
		kinds     = make([]string, len(facts))
		objects   = make([]string, len(facts))
		amounts   = make([]string, len(facts))
		currency  = make([]string, len(facts))
		events    = make([]string, len(facts))
		occurred  = make([]time.Time, len(facts))
		positions = make(map[string]int, len(facts))
	)
	for i, f := range facts {
		keys[i], kinds[i], objects[i], amounts[i] = f.Key(), string(f.Kind), f.ObjectID, f.Amount.String()
		currency[i], events[i], occurred[i] = f.Currency, f.EventID, f.At
		if _, seen := positions[keys[i]]; !seen {
			positions[keys[i]] = i
		}
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO payment_facts (payment_id, key, kind, object_id, amount, currency, event_id, occurred_at)
		SELECT $1, f.key, f.kind, f.object_id, f.amount::numeric, f.currency, f.event_id, f.occurred_at
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[])
			WITH ORDINALITY AS f (key, kind, object_id, amount, currency, event_id, occurred_at, ord)
		ORDER BY f.ord
		ON CONFLICT ON CONSTRAINT payment_facts_pkey DO NOTHING
		RETURNING key`,
		paymentID, keys, kinds, objects, amounts, currency, events, occurred)
	if err != nil {
		return nil, fmt.Errorf("store %d facts of %s: %w", len(facts), paymentID, err)
	}
	defer rows.Close()
	isNew := make([]bool, len(facts))
	for rows.Next() {
		var key string
		if err := rows.Scan(&key); err != nil {
			return nil, fmt.Errorf("store %d facts of %s: %w", len(facts), paymentID, err)
		}
		isNew[positions[key]] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store %d facts of %s: %w", len(facts), paymentID, err)
	}
	var added []statemachine.Fact
	for i, f := range facts {
		if isNew[i] {
			added = append(added, f)
		}
	}
	return added, nil
}

const selectFacts = `
		SELECT kind, object_id, amount::text, currency, event_id, occurred_at
		FROM payment_facts WHERE payment_id = $1 ORDER BY recorded_at, key`

// Facts returns every fact stored for a payment.
func Facts(ctx context.Context, q Querier, paymentID string) ([]statemachine.Fact, error) {
	rows, err := q.Query(ctx, selectFacts, paymentID)
	if err != nil {
		return nil, fmt.Errorf("read facts of %s: %w", paymentID, err)
	}
	return scanFacts(rows, paymentID)
}

func scanFacts(rows pgx.Rows, paymentID string) ([]statemachine.Fact, error) {
	defer rows.Close()
	var out []statemachine.Fact
	for rows.Next() {
		var f statemachine.Fact
		var amount string
		if err := rows.Scan(&f.Kind, &f.ObjectID, &amount, &f.Currency, &f.EventID, &f.At); err != nil {
			return nil, fmt.Errorf("read facts of %s: %w", paymentID, err)
		}
		var err error
		if f.Amount, err = decimal.NewFromString(amount); err != nil {
			return nil, fmt.Errorf("read facts of %s: %w", paymentID, err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read facts of %s: %w", paymentID, err)
	}
	return out, nil
}

// SavePaymentTx writes the payment's new summary, and a history row when
// its state changed. A known receipt email is kept once learnt: a later
// report without one does not erase it.
func SavePaymentTx(ctx context.Context, tx pgx.Tx, p Payment, previous statemachine.State, eventID string) error {
	// One round trip: the history row, when there is one, is pipelined
	// behind the update.
	batch := &pgx.Batch{}
	batch.Queue(`
		UPDATE payments SET status = $2, currency = $3, amount = $4::numeric, amount_captured = $5::numeric,
			amount_refunded = $6::numeric, amount_disputed = $7::numeric,
			receipt_email = CASE WHEN $9 THEN coalesce(nullif($8, ''), receipt_email, '') ELSE receipt_email END,
			updated_at = now()
		WHERE id = $1`,
		p.ID, p.State, p.Currency, p.Amount.String(), p.AmountCaptured.String(),
		p.AmountRefunded.String(), p.AmountDisputed.String(), p.ReceiptEmail, p.ReceiptEmailKnown)
	changed := previous != p.State
	if changed {
		batch.Queue(`INSERT INTO payment_history (payment_id, from_status, to_status, event_id) VALUES ($1, nullif($2, ''), $3, $4)`,
			p.ID, previous, p.State, eventID)
	}
	results := tx.SendBatch(ctx, batch)
	defer results.Close()
	if _, err := results.Exec(); err != nil {
		return fmt.Errorf("save payment %s: %w", p.ID, err)
	}
	if changed {
		if _, err := results.Exec(); err != nil {
			return fmt.Errorf("record history of %s: %w", p.ID, err)
		}
	}
	if err := results.Close(); err != nil {
		return fmt.Errorf("save payment %s: %w", p.ID, err)
	}
	return nil
}

// History returns a payment's state changes, oldest first.
func History(ctx context.Context, q Querier, paymentID string) ([]HistoryEntry, error) {
	rows, err := q.Query(ctx, `SELECT coalesce(from_status, ''), to_status, event_id, at
		FROM payment_history WHERE payment_id = $1 ORDER BY id`, paymentID)
	if err != nil {
		return nil, fmt.Errorf("read history of %s: %w", paymentID, err)
	}
	defer rows.Close()
	var out []HistoryEntry
	for rows.Next() {
		var h HistoryEntry
		if err := rows.Scan(&h.From, &h.To, &h.EventID, &h.At); err != nil {
			return nil, fmt.Errorf("read history of %s: %w", paymentID, err)
		}
		out = append(out, h)
	}
	return out, rows.Err()
}
