package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/outbox"
	"github.com/paygate/paygate/statemachine"
)

// A contract peer (loadgen peer -mode contract -group) is the least work
// for what paygate promises of an event, where the grouped sync peer is
// the least work for what the peers promise: the same grouping and the
// same folding of a payment's changes, but every row paygate's contract
// writes for an applied event, in paygate's own tables (a database
// paygate migrated, with its indexes, checks and triggers):
//
//   - the event's dedupe key and its inbox row, processed at once (no job,
//     no second write of the row);
//   - the payment, read and locked with its facts before it is changed,
//     so that a retried or late event has no second effect;
//   - a fact for each new event of a payment, and a history row for each
//     change of its status;
//   - the capture's ledger transaction, once, with its two entries, and
//     the references the captures touch checked for a double charge; a
//     refund's transaction, once, and its confirmation email;
//   - a message placed in the feed for each change of the payment, and
//     the receipt email, marked afterwards as the email worker marks it
//     (skipped: no SMTP here, as in make bench).
//
// It keeps no River job, no inbox status to update, no poison queue, no
// state machine beyond statuses that never go back, and applies each event
// before answering. Its rate is what the least work reaches here with paygate's
// rows: the limit for paygate's own end to end on this machine.
const peerContract = "contract"

// contractObject is what a contract peer reads of a payment_intent or a
// charge: the sync peer's fields and the merchant's words.
type contractObject struct {
	paymentObject
	Amount         int64             `json:"amount"`
	AmountRefunded int64             `json:"amount_refunded"` // charge
	Customer       *string           `json:"customer"`
	Description    *string           `json:"description"`
	ReceiptEmail   *string           `json:"receipt_email"`
	Metadata       map[string]string `json:"metadata"`
}

// contractPayment is a payment as a contract peer changes it in a group.
// Its amounts are in cents and stored as two-decimal amounts whatever the
// currency: the rows cost the same.
type contractPayment struct {
	id, status, currency           string
	amount, captured, refunded     int64
	sequence                       int64
	known                          map[string]bool // its facts' keys
	reference, customer, describes *string
	email                          *string
	metadata                       map[string]string
	changed                        bool
	postedCapture                  bool // by this group
}

// checkPaygateTables refuses a database paygate did not migrate: a
// contract or inbox peer writes paygate's tables and creates none.
func checkPaygateTables(ctx context.Context, db *pgxpool.Pool, mode string) error {
	var migrated bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('paygate_migrations') IS NOT NULL AND to_regclass('payment_facts') IS NOT NULL`).Scan(&migrated); err != nil {
		return fmt.Errorf("check paygate's tables: %w", err)
	}
	if !migrated {
		return fmt.Errorf("-mode %s writes paygate's tables: run paygate migrate on -database-url first (and -schema public)", mode)
	}
	return nil
}

// startMarker marks the receipt emails the groups wrote, as paygate's
// email worker marks those it could not send: beside the groups, never in
// their way.
func (p *peer) startMarker(ctx context.Context) {
	p.emails = make(chan []int64, 64)
	go func() {
		var ids []int64
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case more := <-p.emails:
				ids = append(ids, more...)
				if len(ids) < maxGroup {
					continue
				}
			case <-tick.C:
				if len(ids) == 0 {
					continue
				}
			}
			if _, err := p.db.Exec(ctx, `UPDATE email_outbox SET status = 'skipped', attempts = attempts + 1,
				last_error = 'no SMTP server' WHERE id = ANY($1)`, ids); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "loadgen: peer: mark %d emails: %v\n", len(ids), err)
				continue // kept, and tried again with the next
			}
			ids = ids[:0]
		}
	}()
}

// writeContractTx writes a group's rows and returns its receipt emails
// and its messages.
func (p *peer) writeContractTx(ctx context.Context, tx pgx.Tx, group []*groupedEvent) ([]int64, []outbox.Message, error) {
	byID := make(map[string]*groupedEvent, len(group))
	for _, g := range group {
		byID[g.ev.ID] = g
	}
	ids := slices.Sorted(maps.Keys(byID))
	var (
		types, versions []string
		payloads        [][]byte
		created         []time.Time
		live            []bool
	)
	for _, id := range ids {
		ev := byID[id].ev
		types, versions, payloads = append(types, ev.Type), append(versions, ev.APIVersion), append(payloads, byID[id].body)
		created, live = append(created, time.Unix(ev.Created, 0).UTC()), append(live, ev.Livemode)
	}
	// The keys in id order, so that two groups inserting the same event
	// wait for each other and never deadlock.
	rows, err := tx.Query(ctx, `
		WITH e AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::timestamptz[], $5::text[], $6::bool[])
				AS e (event_id, type, payload, created, api_version, livemode)),
			k AS (INSERT INTO inbox_event_keys (provider, event_id) SELECT 'stripe', event_id FROM e ORDER BY event_id
				ON CONFLICT DO NOTHING RETURNING event_id)
		INSERT INTO inbox_events (provider, event_id, type, livemode, api_version, provider_created_at, payload, status, processed_at)
		SELECT 'stripe', e.event_id, e.type, e.livemode, e.api_version, e.created, e.payload, 'processed', now()
		FROM e JOIN k USING (event_id)
		RETURNING event_id`, ids, types, payloads, created, versions, live)
	if err != nil {
		return nil, nil, fmt.Errorf("store %d events: %w", len(ids), err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("store %d events: %w", len(ids), err)
	}
	slices.Sort(stored)

	type applied struct {
		id  string
		c   paymentChange
		obj contractObject
	}
	var todo []applied
	paymentIDs := map[string]bool{}
	for _, id := range stored {
		ev := byID[id].ev
		if ev.Data.Object == nil {
			continue
		}
		var o contractObject
		if err := json.Unmarshal(ev.Data.Object, &o); err != nil {
			return nil, nil, fmt.Errorf("apply %s: decode data.object: %w", id, err)
		}
		c, ok := changeFrom(ev.Type, o.paymentObject)
		if !ok && o.Object == "refund" && o.PaymentIntent != nil {
			// A refund's own events are facts of its payment, and change
			// nothing charge.refunded does not.
			c, ok = paymentChange{payment: *o.PaymentIntent, currency: o.Currency}, true
		}
		if !ok {
			continue
		}
		todo = append(todo, applied{id, c, o})
		paymentIDs[c.payment] = true
	}
	if len(todo) == 0 {
		return nil, nil, nil
	}

	// The payments, created by their first event whichever it is (a
	// refund's may come first), then locked in id order with their facts'
	// keys: two groups with a new payment each see the other's.
	order := slices.Sorted(maps.Keys(paymentIDs))
	payments := make(map[string]*contractPayment, len(order))
	lock := &pgx.Batch{}
	lock.Queue(`INSERT INTO payments (id, provider) SELECT id, 'stripe' FROM unnest($1::text[]) AS u (id) ORDER BY id
		ON CONFLICT DO NOTHING`, order)
	lock.Queue(`SELECT p.id, p.status, p.currency, p.message_sequence, (p.amount_captured * 100)::bigint,
			(p.amount_refunded * 100)::bigint, ARRAY(SELECT f.key FROM payment_facts f WHERE f.payment_id = p.id)
		FROM payments p WHERE p.id = ANY($1) ORDER BY p.id FOR UPDATE`, order).Query(func(rows pgx.Rows) error {
		var cp contractPayment
		var keys []string
		_, err := pgx.ForEachRow(rows, []any{&cp.id, &cp.status, &cp.currency, &cp.sequence, &cp.captured, &cp.refunded, &keys}, func() error {
			p := cp
			p.known = make(map[string]bool, len(keys))
			for _, k := range keys {
				p.known[k] = true
			}
			payments[p.id] = &p
			return nil
		})
		return err
	})
	if err := tx.SendBatch(ctx, lock).Close(); err != nil {
		return nil, nil, fmt.Errorf("lock %d payments: %w", len(order), err)
	}

	var (
		fPayment, fKey, fKind, fObject, fCurrency, fEvent []string
		fAmount                                           []int64
		fAt                                               []time.Time
		hPayment, hTo, hEvent                             []string
		hFrom                                             []*string
		lRef, lKind, lPayment, lEvent, lCurrency          []string
		lAmount                                           []int64
		eKind, eObject, ePayment, eRecipient, eMessage    []string
		references                                        []string
		msgs                                              []outbox.Message
	)
	now := time.Now().UTC()
	for _, a := range todo {
		c, o := a.c, a.obj
		cp := payments[c.payment]
		key := byID[a.id].ev.Type + ":" + o.ID
		if cp.known[key] {
			continue // a fact the payment has: no second effect
		}
		cp.known[key] = true
		fPayment, fKey, fKind, fObject = append(fPayment, cp.id), append(fKey, key), append(fKind, byID[a.id].ev.Type), append(fObject, o.ID)
		fAmount, fCurrency, fEvent, fAt = append(fAmount, c.captured), append(fCurrency, c.currency), append(fEvent, a.id), append(fAt, now)

		if c.status == "" {
			if cp.currency == "" {
				cp.currency, cp.changed = c.currency, true
			}
			continue // a refund's: its fact is all
		}
		cp.currency = c.currency
		cp.amount = max(cp.amount, o.Amount, c.captured)
		if o.Customer != nil {
			cp.customer = o.Customer
		}
		if o.Description != nil {
			cp.describes = o.Description
		}
		if o.ReceiptEmail != nil {
			cp.email = o.ReceiptEmail
		}
		if ref, ok := o.Metadata["order_id"]; ok {
			cp.reference, cp.metadata = &ref, o.Metadata
		}
		status := cp.status
		if statusRank(c.status) >= statusRank(cp.status) {
			status = c.status // never back: a late payment_intent.created changes nothing
		}
		captured, refunded := max(cp.captured, c.captured), cp.refunded
		if byID[a.id].ev.Type == "charge.refunded" {
			refunded = max(refunded, o.AmountRefunded)
		}
		newCapture, newRefund := c.capture && !cp.postedCapture, refunded > cp.refunded
		if status != cp.status || captured != cp.captured || newRefund {
			if status != cp.status {
				var from *string
				if cp.status != "" {
					from = &cp.status
				}
				hPayment, hFrom, hTo, hEvent = append(hPayment, cp.id), append(hFrom, from), append(hTo, status), append(hEvent, a.id)
			}
			previous := statemachine.State(cp.status)
			cp.status, cp.captured, cp.refunded, cp.sequence, cp.changed = status, captured, refunded, cp.sequence+1, true
			m, err := contractMessage(cp, previous, now)
			if err != nil {
				return nil, nil, err
			}
			msgs = append(msgs, m)
		}
		recipient := "ops@example.com"
		if cp.email != nil {
			recipient = *cp.email
		}
		// Posted once by the group, and once ever by the ref's key (an
		// earlier group's stays).
		if newCapture {
			cp.postedCapture = true
			lRef, lKind, lPayment, lEvent = append(lRef, "stripe:capture:"+cp.id), append(lKind, "capture"), append(lPayment, cp.id), append(lEvent, a.id)
			lAmount, lCurrency = append(lAmount, c.captured), append(lCurrency, c.currency)
			eKind, eObject = append(eKind, "payment_receipt"), append(eObject, cp.id)
			ePayment, eRecipient, eMessage = append(ePayment, cp.id), append(eRecipient, recipient), append(eMessage, "<receipt."+cp.id+"@paygate.invalid>")
			if cp.reference != nil {
				references = append(references, *cp.reference)
			}
		}
		if newRefund {
			lRef, lKind, lPayment, lEvent = append(lRef, "stripe:refund:"+o.ID), append(lKind, "refund"), append(lPayment, cp.id), append(lEvent, a.id)
			lAmount, lCurrency = append(lAmount, refunded), append(lCurrency, c.currency)
			eKind, eObject = append(eKind, "refund_confirmation"), append(eObject, o.ID)
			ePayment, eRecipient, eMessage = append(ePayment, cp.id), append(eRecipient, recipient), append(eMessage, "<refund."+o.ID+"@paygate.invalid>")
		}
	}

	var (
		pID, pStatus, pCurrency                   []string
		pAmount, pCaptured, pRefunded, pSequence  []int64
		pReference, pCustomer, pDescribes, pEmail []*string
		pMetadata                                 []map[string]string
	)
	for _, id := range order {
		cp := payments[id]
		if !cp.changed {
			continue
		}
		pID, pStatus, pCurrency = append(pID, cp.id), append(pStatus, cp.status), append(pCurrency, cp.currency)
		pAmount, pCaptured, pSequence = append(pAmount, cp.amount), append(pCaptured, cp.captured), append(pSequence, cp.sequence)
		pRefunded = append(pRefunded, cp.refunded)
		pReference, pCustomer, pDescribes, pEmail = append(pReference, cp.reference), append(pCustomer, cp.customer), append(pDescribes, cp.describes), append(pEmail, cp.email)
		if cp.metadata == nil {
			cp.metadata = map[string]string{}
		}
		pMetadata = append(pMetadata, cp.metadata)
	}

	batch := &pgx.Batch{}
	if len(pID) > 0 {
		batch.Queue(`UPDATE payments p SET status = u.status, currency = u.currency,
				amount = greatest(p.amount, u.amount::numeric / 100), amount_captured = u.captured::numeric / 100,
				amount_refunded = u.refunded::numeric / 100, message_sequence = u.sequence,
				reference = coalesce(u.reference, p.reference), customer = coalesce(u.customer, p.customer),
				description = coalesce(u.description, p.description), receipt_email = coalesce(u.email, p.receipt_email),
				metadata = CASE WHEN u.metadata = '{}' THEN p.metadata ELSE u.metadata END, updated_at = now()
			FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[],
				$7::text[], $8::text[], $9::text[], $10::text[], $11::jsonb[], $12::bigint[])
				AS u (id, status, currency, amount, captured, sequence, reference, customer, description, email, metadata, refunded)
			WHERE p.id = u.id`,
			pID, pStatus, pCurrency, pAmount, pCaptured, pSequence, pReference, pCustomer, pDescribes, pEmail, pMetadata, pRefunded)
	}
	if len(fPayment) > 0 {
		batch.Queue(`INSERT INTO payment_facts (payment_id, key, kind, object_id, amount, currency, event_id, occurred_at)
			SELECT u.payment_id, u.key, u.kind, u.object_id, u.amount::numeric / 100, u.currency, u.event_id, u.occurred_at
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[], $8::timestamptz[])
				AS u (payment_id, key, kind, object_id, amount, currency, event_id, occurred_at)
			ON CONFLICT DO NOTHING`, fPayment, fKey, fKind, fObject, fAmount, fCurrency, fEvent, fAt)
	}
	if len(hPayment) > 0 {
		batch.Queue(`INSERT INTO payment_history (payment_id, from_status, to_status, event_id)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[])`, hPayment, hFrom, hTo, hEvent)
	}
	if len(lRef) > 0 {
		// A capture debits the provider's balance and credits sales; a
		// refund debits refunds and credits the balance.
		batch.Queue(`WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[])
					AS u (ref, kind, payment_id, event_id, amount, currency)),
				t AS (
					INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, payment_id, event_id, entry_count, posted_at)
					SELECT ref, kind, currency, now(), payment_id, event_id, 2, now() FROM u ORDER BY ref
					ON CONFLICT (ref) DO NOTHING RETURNING id, ref)
			INSERT INTO ledger_entries (transaction_id, account, currency, debit, credit)
			SELECT t.id, e.account, u.currency, CASE WHEN e.debit THEN u.amount::numeric / 100 ELSE 0 END,
				CASE WHEN e.debit THEN 0 ELSE u.amount::numeric / 100 END
			FROM t JOIN u USING (ref), (VALUES ('capture', 'provider_balance', true), ('capture', 'sales', false),
				('refund', 'refunds', true), ('refund', 'provider_balance', false)) AS e (kind, account, debit)
			WHERE e.kind = u.kind`,
			lRef, lKind, lPayment, lEvent, lAmount, lCurrency)
	}
	if len(references) > 0 {
		// The double charges the captures may have made: a reference with
		// two captured payments (none in make bench's mix).
		batch.Queue(`SELECT reference FROM payments WHERE reference = ANY($1) AND amount_captured > 0
			GROUP BY reference HAVING count(*) > 1`, references)
	}
	var emails []int64
	if len(ePayment) > 0 {
		batch.Queue(`INSERT INTO email_outbox (kind, object_id, payment_id, recipient, message_id)
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
			ON CONFLICT (kind, object_id) DO NOTHING RETURNING id`, eKind, eObject, ePayment, eRecipient, eMessage).Query(func(rows pgx.Rows) (err error) {
			emails, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, nil, fmt.Errorf("apply %d events: %w", len(todo), err)
	}
	// Last, as paygate's applying: placing holds the feed's sequencer.
	if err := outbox.WritePlacedTx(ctx, tx, msgs); err != nil {
		return nil, nil, err
	}
	return emails, msgs, nil
}

// contractMessage is the message of a payment's change, by paygate's
// catalogue.
func contractMessage(cp *contractPayment, previous statemachine.State, at time.Time) (outbox.Message, error) {
	p := ledger.Payment{
		ID: cp.id, Provider: "stripe", UpdatedAt: at, MessageSequence: cp.sequence,
		Summary: statemachine.Summary{
			State: statemachine.State(cp.status), Currency: cp.currency, Amount: decimal.New(cp.amount, -2),
			AmountCaptured: decimal.New(cp.captured, -2), AmountRefunded: decimal.New(cp.refunded, -2),
		},
		Details: statemachine.Details{Reference: deref(cp.reference), Customer: deref(cp.customer),
			Description: deref(cp.describes), Metadata: cp.metadata},
	}
	return outbox.PaymentMessage(p, previous)
}

// deref is *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// statusRank orders a payment's statuses as they follow each other.
func statusRank(s string) int {
	switch s {
	case "refunded":
		return 3
	case "succeeded":
		return 2
	case "processing":
		return 0
	}
	return 1
}
