package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// Details are the merchant's words about the payment (reference,
	// customer, description, metadata), folded from its events.
	Details statemachine.Details
	statemachine.Summary
	CreatedAt time.Time
	UpdatedAt time.Time
	// MessageSequence counts the messages written of this payment's
	// changes (outbox); kept on the payment, under its lock, so it is never
	// counted twice and outlives the messages' retention.
	MessageSequence int64

	// unsaved marks a payment LockPaymentsWithFactsTx found no row for:
	// SavePaymentsTx inserts it, with its summary, instead of updating it.
	unsaved bool
}

// ErrPaymentCreatedMeanwhile is SavePaymentsTx's answer when a payment it
// was to create was created by another transaction after
// LockPaymentsWithFactsTx found none: the summary was folded without that
// payment's stored facts, so nothing of tx may stand. Applying the events
// again, in a new transaction, finds the payment and locks it.
var ErrPaymentCreatedMeanwhile = errors.New("payment created by another transaction meanwhile")

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
	amount::text, amount_captured::text, amount_refunded::text, amount_disputed::text, created_at, updated_at,
	message_sequence, coalesce(reference, ''), coalesce(customer, ''), coalesce(description, ''), metadata, details_stamps`

func scanPayment(row pgx.Row) (Payment, error) {
	var p Payment
	var amounts [4]string
	err := row.Scan(&p.ID, &p.Provider, &p.ReceiptEmail, &p.ReceiptEmailKnown, &p.State, &p.Currency,
		&amounts[0], &amounts[1], &amounts[2], &amounts[3], &p.CreatedAt, &p.UpdatedAt, &p.MessageSequence,
		&p.Details.Reference, &p.Details.Customer, &p.Details.Description, &p.Details.Metadata, &p.Details.Stamps)
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
	ps, _, err := lockPaymentsTx(ctx, tx, provider, []string{id}, lockCreating)
	return ps[id], err
}

// LockPaymentWithFactsTx is LockPaymentTx that also returns the payment's
// stored facts, read under the lock, in one round trip to the database.
func LockPaymentWithFactsTx(ctx context.Context, tx pgx.Tx, provider, id string) (Payment, []statemachine.Fact, error) {
	ps, facts, err := lockPaymentsTx(ctx, tx, provider, []string{id}, lockCreating|lockWithFacts)
	return ps[id], facts[id], err
}

// LockPaymentsWithFactsTx is LockPaymentWithFactsTx for many payments, in
// one round trip whatever len(ids): every id has its payment in the first
// map, locked until tx ends, and its stored facts, if any, in the second. An
// id may be given more than once.
//
// A payment that does not exist yet is not created here: it is in the map
// empty, with provider and the state of a payment without facts, and
// SavePaymentsTx inserts it with its folded summary (so a new payment is
// written once, not created empty and then updated). Until then no row
// holds it; should another transaction create it first, SavePaymentsTx
// fails with ErrPaymentCreatedMeanwhile.
//
// The payments are locked in id order, so two transactions locking
// overlapping sets wait for each other instead of deadlocking.
func LockPaymentsWithFactsTx(ctx context.Context, tx pgx.Tx, provider string, ids []string) (map[string]Payment, map[string][]statemachine.Fact, error) {
	return lockPaymentsTx(ctx, tx, provider, ids, lockWithFacts)
}

// lockOpts are what lockPaymentsTx does besides locking.
type lockOpts int

const (
	lockCreating  lockOpts = 1 << iota // creates the payments it does not find, empty
	lockWithFacts                      // reads their facts too
)

// lockPaymentsTx pipelines its statements: they run one after the other as
// if sent one by one (the locks are held before the facts are read), in one
// round trip. A payment it neither finds nor creates is returned unsaved.
func lockPaymentsTx(ctx context.Context, tx pgx.Tx, provider string, ids []string, opts lockOpts) (map[string]Payment, map[string][]statemachine.Fact, error) {
	if len(ids) == 0 {
		return map[string]Payment{}, map[string][]statemachine.Fact{}, nil
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	create, withFacts := opts&lockCreating != 0, opts&lockWithFacts != 0
	batch := &pgx.Batch{}
	if create {
		batch.Queue(`INSERT INTO payments (id, provider) SELECT id, $2 FROM unnest($1::text[]) AS u(id) ORDER BY id
			ON CONFLICT (id) DO NOTHING`, ids, provider)
	}
	batch.Queue(`SELECT `+paymentColumns+` FROM payments WHERE id = ANY($1) ORDER BY id FOR UPDATE`, ids)
	if withFacts {
		batch.Queue(selectFacts, ids)
	}
	results := tx.SendBatch(ctx, batch)
	defer results.Close()
	if create {
		if _, err := results.Exec(); err != nil {
			return nil, nil, fmt.Errorf("create payment %s: %w", andMore(ids), err)
		}
	}
	rows, err := results.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("lock payment %s: %w", andMore(ids), err)
	}
	ps := make(map[string]Payment, len(ids))
	for rows.Next() {
		p, err := scanPayment(rows)
		if err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("lock payment %s: %w", andMore(ids), err)
		}
		ps[p.ID] = p
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("lock payment %s: %w", andMore(ids), err)
	}
	now := time.Now()
	for _, id := range ids {
		if _, ok := ps[id]; ok {
			continue
		}
		if create {
			return nil, nil, fmt.Errorf("lock payment %s: %w", id, ErrPaymentNotFound)
		}
		// What the row would hold if it were created empty now.
		ps[id] = Payment{ID: id, Provider: provider, Summary: statemachine.Summary{State: statemachine.StateProcessing},
			CreatedAt: now, UpdatedAt: now, unsaved: true}
	}
	var facts map[string][]statemachine.Fact
	if withFacts {
		if rows, err = results.Query(); err == nil {
			facts, err = scanFacts(rows)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read facts of %s: %w", andMore(ids), err)
		}
	}
	if err := results.Close(); err != nil {
		return nil, nil, fmt.Errorf("lock payment %s: %w", andMore(ids), err)
	}
	return ps, facts, nil
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

// PaymentFact is a fact of one payment, for AddFactsManyTx.
type PaymentFact struct {
	PaymentID string
	statemachine.Fact
}

// insertFacts stores facts in their order with one statement, whatever
// their number; a fact whose key its payment already has, or given twice,
// is a duplicate report and is skipped.
const insertFacts = `
		INSERT INTO payment_facts (payment_id, key, kind, object_id, amount, currency, event_id, occurred_at)
		SELECT f.payment_id, f.key, f.kind, f.object_id, f.amount::numeric, f.currency, f.event_id, f.occurred_at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[])
			WITH ORDINALITY AS f (payment_id, key, kind, object_id, amount, currency, event_id, occurred_at, ord)
		ORDER BY f.ord
		ON CONFLICT ON CONSTRAINT payment_facts_pkey DO NOTHING`

// factColumns are insertFacts' arguments.
func factColumns(facts []PaymentFact) []any {
	var (
		payments = make([]string, len(facts))
		keys     = make([]string, len(facts))
		kinds    = make([]string, len(facts))
		objects  = make([]string, len(facts))
		amounts  = make([]string, len(facts))
		currency = make([]string, len(facts))
		events   = make([]string, len(facts))
		occurred = make([]time.Time, len(facts))
	)
	for i, f := range facts {
		payments[i], keys[i], kinds[i], objects[i] = f.PaymentID, f.Key(), string(f.Kind), f.ObjectID
		amounts[i], currency[i], events[i], occurred[i] = f.Amount.String(), f.Currency, f.EventID, f.At
	}
	return []any{payments, keys, kinds, objects, amounts, currency, events, occurred}
}

// AddFactsTx stores facts not yet known for the payment and returns the
// ones that were new, in their order, with one statement. A fact already
// stored under the same key, or given twice, is a duplicate report and
// changes nothing.
func AddFactsTx(ctx context.Context, tx pgx.Tx, paymentID string, facts []statemachine.Fact) ([]statemachine.Fact, error) {
	if len(facts) == 0 {
		return nil, nil
	}
	pfs := make([]PaymentFact, len(facts))
	positions := make(map[string]int, len(facts))
	for i, f := range facts {
		pfs[i] = PaymentFact{PaymentID: paymentID, Fact: f}
		if _, seen := positions[f.Key()]; !seen {
			positions[f.Key()] = i
		}
	}
	rows, err := tx.Query(ctx, insertFacts+"\n\t\tRETURNING key", factColumns(pfs)...)
	if err != nil {
		return nil, fmt.Errorf("store %d facts of %s: %w", len(facts), paymentID, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store %d facts of %s: %w", len(facts), paymentID, err)
	}
	isNew := make([]bool, len(facts))
	for _, key := range keys {
		isNew[positions[key]] = true
	}
	var added []statemachine.Fact
	for i, f := range facts {
		if isNew[i] {
			added = append(added, f)
		}
	}
	return added, nil
}

// AddFactsManyTx stores facts of any payments, in their order, with one
// statement. The caller has already decided which facts are new (from the
// facts LockPaymentsWithFactsTx returned); one already stored under the same
// payment and key, or given twice, is a duplicate report and is skipped.
// Every payment must exist. Empty facts does nothing.
func AddFactsManyTx(ctx context.Context, tx pgx.Tx, facts []PaymentFact) error {
	if len(facts) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, insertFacts, factColumns(facts)...); err != nil {
		return fmt.Errorf("store %d facts: %w", len(facts), err)
	}
	return nil
}

// selectFacts reads the facts of the payments in $1, grouped by payment.
const selectFacts = `
		SELECT payment_id, kind, object_id, amount::text, currency, event_id, occurred_at
		FROM payment_facts WHERE payment_id = ANY($1) ORDER BY payment_id, recorded_at, key`

// Facts returns every fact stored for a payment.
func Facts(ctx context.Context, q Querier, paymentID string) ([]statemachine.Fact, error) {
	rows, err := q.Query(ctx, selectFacts, []string{paymentID})
	if err == nil {
		var facts map[string][]statemachine.Fact
		if facts, err = scanFacts(rows); err == nil {
			return facts[paymentID], nil
		}
	}
	return nil, fmt.Errorf("read facts of %s: %w", paymentID, err)
}

// scanFacts reads selectFacts' rows by payment and closes them.
func scanFacts(rows pgx.Rows) (map[string][]statemachine.Fact, error) {
	defer rows.Close()
	out := map[string][]statemachine.Fact{}
	for rows.Next() {
		var (
			paymentID, amount string
			f                 statemachine.Fact
		)
		if err := rows.Scan(&paymentID, &f.Kind, &f.ObjectID, &amount, &f.Currency, &f.EventID, &f.At); err != nil {
			return nil, err
		}
		var err error
		if f.Amount, err = decimal.NewFromString(amount); err != nil {
			return nil, fmt.Errorf("payment %s: amount %q: %w", paymentID, amount, err)
		}
		out[paymentID] = append(out[paymentID], f)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// StateChange is one change of a payment's state, for SavePaymentsTx; From
// is empty for the payment's first state.
type StateChange struct {
	PaymentID string
	From, To  statemachine.State
	EventID   string
}

// SavePaymentTx writes the payment's new summary, and a history row when
// its state changed. A known receipt email is kept once learnt: a later
// report without one does not erase it.
func SavePaymentTx(ctx context.Context, tx pgx.Tx, p Payment, previous statemachine.State, eventID string) error {
	var changes []StateChange
	if previous != p.State {
		changes = []StateChange{{PaymentID: p.ID, From: previous, To: p.State, EventID: eventID}}
	}
	return SavePaymentsTx(ctx, tx, []Payment{p}, changes)
}

// SavePaymentsTx is SavePaymentTx for many payments, in one round trip
// whatever their number: it inserts the payments LockPaymentsWithFactsTx
// found no row for, with their summaries, with one statement, writes the
// new summary of every other payment of ps with another, and one history
// row per change, in the order of changes (history reads back in that
// order), with a third. The payments must be locked already
// (LockPaymentsWithFactsTx): the update takes their row locks in no set
// order, which only the earlier lock keeps from deadlocking. Since a new
// payment has no row until then, its facts and history can only be written
// after it (they refer to it). Each must be in ps once: given twice it fails
// before touching the database, since which of the two summaries should win
// is not this function's to guess.
//
// It fails with ErrPaymentCreatedMeanwhile when another transaction created
// one of the new payments after it was locked.
//
// Each payment's MessageSequence is stored as given, and its updated_at is
// its UpdatedAt, or the transaction's time when that is zero: a payment
// message carries the time of the change, and the API shows the same.
func SavePaymentsTx(ctx context.Context, tx pgx.Tx, ps []Payment, changes []StateChange) error {
	if len(ps) == 0 && len(changes) == 0 {
		return nil
	}
	var (
		n        = len(ps)
		ids      = make([]string, n)
		states   = make([]string, n)
		currency = make([]string, n)
		amounts  = [4][]string{make([]string, n), make([]string, n), make([]string, n), make([]string, n)}
		emails   = make([]string, n)
		known    = make([]bool, n)
		seqs     = make([]int64, n)
		updated  = make([]*time.Time, n)
		details  = [5][]string{make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)}
		seen     = make(map[string]bool, n)
	)
	for _, p := range ps {
		if seen[p.ID] {
			return fmt.Errorf("save payment %s: given twice", p.ID)
		}
		seen[p.ID] = true
	}
	// The new ones first, in id order: inserting takes their unique keys,
	// which another transaction creating the same payment waits for.
	ps = slices.Clone(ps)
	slices.SortStableFunc(ps, func(a, b Payment) int {
		switch {
		case a.unsaved && !b.unsaved:
			return -1
		case b.unsaved && !a.unsaved:
			return 1
		case a.unsaved:
			return strings.Compare(a.ID, b.ID)
		}
		return 0
	})
	fresh := 0 // ps[:fresh] are new
	for fresh < n && ps[fresh].unsaved {
		fresh++
	}
	for i, p := range ps {
		ids[i], states[i], currency[i], emails[i], known[i] = p.ID, string(p.State), p.Currency, p.ReceiptEmail, p.ReceiptEmailKnown
		amounts[0][i], amounts[1][i] = p.Amount.String(), p.AmountCaptured.String()
		amounts[2][i], amounts[3][i] = p.AmountRefunded.String(), p.AmountDisputed.String()
		seqs[i] = p.MessageSequence
		d, err := detailColumns(p.Details)
		if err != nil {
			return fmt.Errorf("save payment %s: %w", p.ID, err)
		}
		for j := range details {
			details[j][i] = d[j]
		}
		if !p.UpdatedAt.IsZero() {
			updated[i] = &p.UpdatedAt
		}
	}
	var (
		changed = make([]string, len(changes))
		from    = make([]string, len(changes))
		to      = make([]string, len(changes))
		events  = make([]string, len(changes))
	)
	for i, c := range changes {
		changed[i], from[i], to[i], events[i] = c.PaymentID, string(c.From), string(c.To), c.EventID
	}

	// One round trip: the update and the history rows are pipelined behind
	// the insert.
	batch := &pgx.Batch{}
	if fresh > 0 {
		providers, created := make([]string, fresh), make([]time.Time, fresh)
		for i, p := range ps[:fresh] {
			providers[i], created[i] = p.Provider, p.CreatedAt
		}
		batch.Queue(`
			INSERT INTO payments (id, provider, status, currency, amount, amount_captured, amount_refunded, amount_disputed,
				receipt_email, created_at, updated_at, message_sequence,
				reference, customer, description, metadata, details_stamps)
			SELECT u.id, u.provider, u.status, u.currency, u.amount::numeric, u.captured::numeric, u.refunded::numeric,
				u.disputed::numeric, CASE WHEN u.email_known THEN u.email END, u.created_at, coalesce(u.updated_at, now()),
				u.message_sequence, nullif(u.reference, ''), nullif(u.customer, ''), nullif(u.description, ''),
				u.metadata::jsonb, u.stamps::jsonb
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
				$9::text[], $10::boolean[], $11::bigint[], $12::timestamptz[], $13::timestamptz[],
				$14::text[], $15::text[], $16::text[], $17::text[], $18::text[])
				AS u(id, provider, status, currency, amount, captured, refunded, disputed, email, email_known,
					message_sequence, created_at, updated_at, reference, customer, description, metadata, stamps)
			ORDER BY u.id
			ON CONFLICT (id) DO NOTHING`,
			ids[:fresh], providers, states[:fresh], currency[:fresh], amounts[0][:fresh], amounts[1][:fresh],
			amounts[2][:fresh], amounts[3][:fresh], emails[:fresh], known[:fresh], seqs[:fresh], created, updated[:fresh],
			details[0][:fresh], details[1][:fresh], details[2][:fresh], details[3][:fresh], details[4][:fresh])
	}
	if len(ps) > fresh {
		batch.Queue(`
			UPDATE payments AS p SET status = u.status, currency = u.currency, amount = u.amount::numeric,
				amount_captured = u.captured::numeric, amount_refunded = u.refunded::numeric,
				amount_disputed = u.disputed::numeric,
				receipt_email = CASE WHEN u.email_known THEN coalesce(nullif(u.email, ''), p.receipt_email, '') ELSE p.receipt_email END,
				updated_at = coalesce(u.updated_at, now()), message_sequence = u.message_sequence,
				reference = nullif(u.reference, ''), customer = nullif(u.customer, ''),
				description = nullif(u.description, ''), metadata = u.metadata::jsonb, details_stamps = u.stamps::jsonb
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::boolean[],
				$10::bigint[], $11::timestamptz[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[])
				AS u(id, status, currency, amount, captured, refunded, disputed, email, email_known, message_sequence, updated_at,
					reference, customer, description, metadata, stamps)
			WHERE p.id = u.id`,
			ids[fresh:], states[fresh:], currency[fresh:], amounts[0][fresh:], amounts[1][fresh:], amounts[2][fresh:],
			amounts[3][fresh:], emails[fresh:], known[fresh:], seqs[fresh:], updated[fresh:],
			details[0][fresh:], details[1][fresh:], details[2][fresh:], details[3][fresh:], details[4][fresh:])
	}
	if len(changes) > 0 {
		// In the order of changes, so history ids, which History reads by,
		// follow it.
		batch.Queue(`
			INSERT INTO payment_history (payment_id, from_status, to_status, event_id)
			SELECT c.payment_id, nullif(c.from_status, ''), c.to_status, c.event_id
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS c(payment_id, from_status, to_status, event_id, ord)
			ORDER BY c.ord`,
			changed, from, to, events)
	}
	results := tx.SendBatch(ctx, batch)
	defer results.Close()
	if fresh > 0 {
		tag, err := results.Exec()
		if err != nil {
			return fmt.Errorf("create payment %s: %w", andMore(ids[:fresh]), err)
		}
		if tag.RowsAffected() != int64(fresh) {
			return fmt.Errorf("create payment %s: %w", andMore(ids[:fresh]), ErrPaymentCreatedMeanwhile)
		}
	}
	if len(ps) > fresh {
		if _, err := results.Exec(); err != nil {
			return fmt.Errorf("save payment %s: %w", andMore(ids[fresh:]), err)
		}
	}
	if len(changes) > 0 {
		if _, err := results.Exec(); err != nil {
			return fmt.Errorf("record history of %s: %w", andMore(changed), err)
		}
	}
	if err := results.Close(); err != nil {
		return fmt.Errorf("save payment %s: %w", andMore(append(ids, changed...)), err)
	}
	return nil
}

// detailColumns are d as SavePaymentsTx stores it: reference, customer,
// description, and the metadata and stamps as JSON.
func detailColumns(d statemachine.Details) ([5]string, error) {
	metadata := d.Metadata
	if metadata == nil {
		metadata = map[string]string{}
	}
	m, err := json.Marshal(metadata)
	if err != nil {
		return [5]string{}, err
	}
	st, err := json.Marshal(d.Stamps)
	if err != nil {
		return [5]string{}, err
	}
	return [5]string{d.Reference, d.Customer, d.Description, string(m), string(st)}, nil
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

// EventsOfPayment returns the provider of a payment and the ids of the
// events that name it: those its facts, its ledger transactions or its
// state history were recorded from, each id once. Every source is read by
// its payment_id index. An unknown payment has none.
func EventsOfPayment(ctx context.Context, q Querier, paymentID string) (provider string, eventIDs []string, err error) {
	err = q.QueryRow(ctx, `
		SELECT p.provider, coalesce(array(
			SELECT event_id FROM payment_facts WHERE payment_id = p.id
			UNION SELECT event_id FROM ledger_transactions WHERE payment_id = p.id AND event_id IS NOT NULL
			UNION SELECT event_id FROM payment_history WHERE payment_id = p.id), '{}')
		FROM payments p WHERE p.id = $1`, paymentID).Scan(&provider, &eventIDs)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", []string{}, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("events of payment %s: %w", paymentID, err)
	}
	return provider, eventIDs, nil
}

// PaymentsNamed maps each of names, as a provider's record of a movement
// names things (the object that moved: a charge, a refund, a dispute; or
// the payment itself), to the payment of provider it names: the payment
// with that id, or else the payment whose facts are about that object. A
// name that names no payment is absent. It reads payment_facts whole,
// once: it is for the few movements a caller cannot tie to a payment
// otherwise (those the ledger lacks), not for a hot path.
func PaymentsNamed(ctx context.Context, q Querier, provider string, names []string) (map[string]string, error) {
	out := map[string]string{}
	if len(names) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `
		WITH names AS (SELECT DISTINCT n FROM unnest($2::text[]) AS n WHERE n <> ''),
		facts AS (
			SELECT DISTINCT ON (f.object_id) f.object_id, f.payment_id
			FROM payment_facts f JOIN payments fp ON fp.id = f.payment_id AND fp.provider = $1
			WHERE f.object_id IN (SELECT n FROM names)
			ORDER BY f.object_id, f.recorded_at, f.payment_id)
		SELECT names.n, coalesce(p.id, facts.payment_id)
		FROM names
		LEFT JOIN payments p ON p.id = names.n AND p.provider = $1
		LEFT JOIN facts ON facts.object_id = names.n
		WHERE coalesce(p.id, facts.payment_id) IS NOT NULL`, provider, names)
	if err != nil {
		return nil, fmt.Errorf("payments named by %d records: %w", len(names), err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, payment string
		if err := rows.Scan(&name, &payment); err != nil {
			return nil, fmt.Errorf("payments named by %d records: %w", len(names), err)
		}
		out[name] = payment
	}
	return out, rows.Err()
}
