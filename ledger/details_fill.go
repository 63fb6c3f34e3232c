package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fill of the details (reference, customer, description, metadata) of
// the payments written before they were kept: the payment_details_fill row
// records how far it got, and each step writes its payments' details and
// that row in one transaction, so a fill cut off anywhere goes on from the
// last step that committed.

// DetailsFill is where the fill of payments' details stands.
type DetailsFill struct {
	// AfterID is the id of the last payment filled: the next step reads
	// the payments after it, in id order.
	AfterID string
	// Filled counts the payments whose details a step changed.
	Filled     int64
	Done       bool
	StartedAt  *time.Time
	FinishedAt *time.Time
}

// ErrDetailsFillMoved is AdvanceDetailsFillTx's answer when the fill is no
// longer where the caller read it from: another step committed meanwhile,
// and what the caller read is to be read again from there.
var ErrDetailsFillMoved = errors.New("payment details fill moved meanwhile")

// GetDetailsFill returns where the fill stands.
func GetDetailsFill(ctx context.Context, q Querier) (DetailsFill, error) {
	var f DetailsFill
	err := q.QueryRow(ctx, `SELECT after_id, filled, done, started_at, finished_at FROM payment_details_fill`).
		Scan(&f.AfterID, &f.Filled, &f.Done, &f.StartedAt, &f.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// The migration writes the row; without it there is nothing the
		// fill could record its steps in, nor anything written before it.
		return DetailsFill{Done: true}, nil
	}
	if err != nil {
		return DetailsFill{}, fmt.Errorf("read payment details fill: %w", err)
	}
	return f, nil
}

// AdvanceDetailsFillTx records, in tx, one step of the fill that started
// after from and went up to to, changing filled payments; done marks the
// end. It locks the fill's row until tx ends, so steps commit one after
// the other.
//
// It fails with ErrDetailsFillMoved when the fill is no longer after from
// (or is done).
func AdvanceDetailsFillTx(ctx context.Context, tx pgx.Tx, from, to string, filled int, done bool) error {
	tag, err := tx.Exec(ctx, `UPDATE payment_details_fill SET after_id = $2, filled = filled + $3, done = $4,
			started_at = coalesce(started_at, now()), finished_at = CASE WHEN $4 THEN now() END
		WHERE after_id = $1 AND NOT done`, from, to, filled, done)
	if err != nil {
		return fmt.Errorf("advance payment details fill to %q: %w", to, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrDetailsFillMoved
	}
	return nil
}

// PaymentEvents are a payment's provider and the events that name it, as
// EventsOfPayment finds them.
type PaymentEvents struct {
	ID       string
	Provider string
	EventIDs []string
}

// PaymentEventsAfter returns up to limit payments whose ids come after
// afterID, in id order, each with the events that name it, in one
// statement: the payments by their primary key, the events by the
// payment_id indexes EventsOfPayment reads.
func PaymentEventsAfter(ctx context.Context, q Querier, afterID string, limit int) ([]PaymentEvents, error) {
	rows, err := q.Query(ctx, `
		SELECT p.id, p.provider, coalesce(array(
			SELECT event_id FROM payment_facts WHERE payment_id = p.id
			UNION SELECT event_id FROM ledger_transactions WHERE payment_id = p.id AND event_id IS NOT NULL
			UNION SELECT event_id FROM payment_history WHERE payment_id = p.id), '{}')
		FROM (SELECT id, provider FROM payments WHERE id > $1 ORDER BY id LIMIT $2) p
		ORDER BY p.id`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("events of payments after %q: %w", afterID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[PaymentEvents])
	if err != nil {
		return nil, fmt.Errorf("events of payments after %q: %w", afterID, err)
	}
	return out, nil
}

// LockPaymentsTx returns the payments of ids that exist, by id, each locked
// until tx ends. They are locked in id order, the order every writer of
// several payments takes them in, so it never deadlocks with one.
func LockPaymentsTx(ctx context.Context, tx pgx.Tx, ids []string) (map[string]Payment, error) {
	out := make(map[string]Payment, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	rows, err := tx.Query(ctx, `SELECT `+paymentColumns+` FROM payments WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
	if err != nil {
		return nil, fmt.Errorf("lock payment %s: %w", andMore(ids), err)
	}
	ps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Payment, error) { return scanPayment(row) })
	if err != nil {
		return nil, fmt.Errorf("lock payment %s: %w", andMore(ids), err)
	}
	for _, p := range ps {
		out[p.ID] = p
	}
	return out, nil
}

// SaveDetailsTx writes the details of ps, and nothing else of them (their
// state, amounts, messages' sequence and updated_at stay as they are), in
// one statement. The caller holds their locks (LockPaymentsTx).
func SaveDetailsTx(ctx context.Context, tx pgx.Tx, ps []Payment) error {
	if len(ps) == 0 {
		return nil
	}
	ids := make([]string, len(ps))
	cols := [5][]string{}
	for i, p := range ps {
		d, err := detailColumns(p.Details)
		if err != nil {
			return fmt.Errorf("save details of payment %s: %w", p.ID, err)
		}
		ids[i] = p.ID
		for j := range cols {
			cols[j] = append(cols[j], d[j])
		}
	}
	_, err := tx.Exec(ctx, `
		UPDATE payments p SET reference = nullif(u.reference, ''), customer = nullif(u.customer, ''),
			description = nullif(u.description, ''), metadata = u.metadata::jsonb, details_stamps = u.stamps::jsonb
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
			AS u(id, reference, customer, description, metadata, stamps)
		WHERE p.id = u.id`, ids, cols[0], cols[1], cols[2], cols[3], cols[4])
	if err != nil {
		return fmt.Errorf("save details of payment %s: %w", andMore(ids), err)
	}
	return nil
}
