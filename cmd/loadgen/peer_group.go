package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/paygate/paygate/outbox"
)

// A grouped peer (loadgen peer -group) is the least work a gateway can do
// for an event on this machine, not a design anyone would ship as is: the
// signature checked (stripe-go's ValidatePayload, no Event built), the id,
// type and object read into a small struct, the payload kept as bytes, and
// the webhooks that wait together written by one transaction, a few
// statements for all of them (the events and their jobs; or the events,
// their payments and their captures), answered once it commits. It keeps
// what the peers promise (an answered event is stored, once; sync's
// captures post once, balanced) and nothing more: no inbox statuses, no
// state machine, no order-freedom, no messages. Its rate is the limit a
// batching gateway's ingest and end to end can approach here
// (docs/performance.md).
const (
	// groupers are the transactions a grouped peer runs at once.
	groupers = 4
	// contractGroupers are a contract peer's: its transactions place
	// messages in the feed, so they commit one after the other, and two
	// (one writing while the other commits) applied 11 to 27 % more than
	// four, whose groups were smaller (docs/performance.md).
	contractGroupers = 2
	// inboxGroupers are an inbox peer's: as many as paygate's ingest
	// flushers, whose commits wait mostly on the WAL's flush (four
	// measured no different: docs/performance.md).
	inboxGroupers = 8
	// maxGroup bounds the webhooks one transaction writes.
	maxGroup = 512
)

// groupedEvent is one webhook waiting for its group's commit.
type groupedEvent struct {
	ev   lightEvent
	body []byte
	done chan error
}

// lightEvent is what a grouped peer reads of an event.
type lightEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// Read for a contract peer's inbox row.
	Created    int64  `json:"created"`
	APIVersion string `json:"api_version"`
	Livemode   bool   `json:"livemode"`
	Data       struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// invalidEventError is a webhook refused with a 400: its signature or its
// shape.
type invalidEventError struct{ reason string }

func (e *invalidEventError) Error() string { return e.reason }

// startGroupers starts the transactions that write the waiting webhooks.
func (p *peer) startGroupers(ctx context.Context) {
	p.waiting = make(chan *groupedEvent, 4*maxGroup)
	if p.mode == peerContract {
		p.startMarker(ctx)
	}
	n := p.groupers
	switch {
	case n > 0:
	case p.mode == peerContract:
		n = contractGroupers
	case p.mode == peerInbox:
		n = inboxGroupers
	default:
		n = groupers
	}
	for range n {
		go func() {
			for {
				var group []*groupedEvent
				select {
				case <-ctx.Done():
					return
				case g := <-p.waiting:
					group = append(group, g)
				}
			more:
				for len(group) < maxGroup {
					select {
					case g := <-p.waiting:
						group = append(group, g)
					default:
						break more
					}
				}
				err := p.writeGroup(ctx, group)
				for _, g := range group {
					g.done <- err
				}
			}
		}()
	}
}

// submit checks a webhook, hands its event to the groupers and waits for
// its group's commit; it returns the event's id once it is read.
func (p *peer) submit(ctx context.Context, body []byte, signature string) (string, error) {
	if err := webhook.ValidatePayload(body, signature, p.secret); err != nil {
		return "", &invalidEventError{"invalid signature"}
	}
	g := &groupedEvent{body: body, done: make(chan error, 1)}
	if err := json.Unmarshal(body, &g.ev); err != nil || g.ev.ID == "" || g.ev.Type == "" {
		return "", &invalidEventError{"not a Stripe event"}
	}
	select {
	case p.waiting <- g:
	case <-ctx.Done():
		return g.ev.ID, ctx.Err()
	}
	select {
	case err := <-g.done:
		return g.ev.ID, err
	case <-ctx.Done():
		return g.ev.ID, ctx.Err()
	}
}

// writeGroup writes a group in one transaction, tried again when it was
// chosen as a deadlock's victim or failed to serialize.
func (p *peer) writeGroup(ctx context.Context, group []*groupedEvent) error {
	var (
		err    error
		emails []int64
		msgs   []outbox.Message
	)
	for range 5 {
		err = pgx.BeginFunc(ctx, p.db, func(tx pgx.Tx) (err error) {
			switch p.mode {
			case peerContract:
				emails, msgs, err = p.writeContractTx(ctx, tx, group)
				return err
			case peerInbox:
				return p.writeInboxTx(ctx, tx, group)
			}
			return p.writeGroupTx(ctx, tx, group)
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || (pgErr.Code != "40P01" && pgErr.Code != "40001") {
			break
		}
	}
	if err == nil && len(emails) > 0 {
		select {
		case p.emails <- emails:
		case <-ctx.Done():
		}
	}
	if err == nil && p.endpoint != nil {
		p.endpoint.hand(ctx, msgs)
	}
	return err
}

func (p *peer) writeGroupTx(ctx context.Context, tx pgx.Tx, group []*groupedEvent) error {
	// In id order, each once: two groups insert the same event only in
	// that order, so they wait for each other but never deadlock.
	byID := make(map[string]*groupedEvent, len(group))
	for _, g := range group {
		byID[g.ev.ID] = g
	}
	ids := slices.Sorted(maps.Keys(byID))
	types, payloads := make([]string, len(ids)), make([][]byte, len(ids))
	for i, id := range ids {
		types[i], payloads[i] = byID[id].ev.Type, byID[id].body
	}
	const insertEvents = `INSERT INTO grouped_events (id, type, payload)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[]) ORDER BY 1
		ON CONFLICT (id) DO NOTHING RETURNING id`
	if p.mode == peerStore {
		_, err := tx.Exec(ctx, `WITH e AS (`+insertEvents+`) INSERT INTO jobs (event_id) SELECT id FROM e`, ids, types, payloads)
		if err != nil {
			return fmt.Errorf("store %d events: %w", len(ids), err)
		}
		return nil
	}
	rows, err := tx.Query(ctx, insertEvents, ids, types, payloads)
	if err != nil {
		return fmt.Errorf("store %d events: %w", len(ids), err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("store %d events: %w", len(ids), err)
	}
	slices.Sort(stored)

	// The group's changes folded by payment as the one-event peer's
	// statements would leave them: refunded stays refunded, the largest
	// capture is kept, the first capture event (in id order) posts.
	type folded struct {
		paymentChange
		captureEvent string
	}
	payments := map[string]*folded{}
	for _, id := range stored {
		ev := byID[id].ev
		c, ok, err := changeOf(ev.Type, ev.Data.Object)
		if err != nil {
			return fmt.Errorf("apply %s: %w", id, err)
		}
		if !ok {
			continue
		}
		f := payments[c.payment]
		if f == nil {
			f = &folded{paymentChange: c}
			payments[c.payment] = f
		}
		if f.status != "refunded" {
			f.status = c.status
		}
		f.captured = max(f.captured, c.captured)
		if c.capture && f.captureEvent == "" {
			f.captureEvent, f.currency = id, c.currency
		}
	}
	if len(payments) == 0 {
		return nil
	}
	order := slices.Sorted(maps.Keys(payments)) // row locks in one order
	var (
		statuses, currencies       []string
		amounts                    []int64
		posted, postedBy, postedIn []string
		postedAmounts              []int64
	)
	for _, id := range order {
		f := payments[id]
		statuses, amounts, currencies = append(statuses, f.status), append(amounts, f.captured), append(currencies, f.currency)
		if f.captureEvent != "" {
			posted, postedBy = append(posted, id), append(postedBy, f.captureEvent)
			postedAmounts, postedIn = append(postedAmounts, f.captured), append(postedIn, f.currency)
		}
	}
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO payments (id, status, amount_captured, currency)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) ORDER BY 1
		ON CONFLICT (id) DO UPDATE SET status = CASE WHEN payments.status = 'refunded' THEN payments.status ELSE excluded.status END,
			amount_captured = greatest(payments.amount_captured, excluded.amount_captured), updated_at = now()`,
		order, statuses, amounts, currencies)
	if len(posted) > 0 {
		batch.Queue(`WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS u (payment_id, event_id, amount, currency)),
			t AS (
				INSERT INTO ledger_transactions (payment_id, kind, event_id)
				SELECT payment_id, 'capture', event_id FROM u ORDER BY payment_id
				ON CONFLICT (payment_id, kind) DO NOTHING RETURNING id, payment_id)
			INSERT INTO ledger_entries (transaction_id, account, direction, amount, currency)
			SELECT t.id, e.account, e.direction, u.amount::numeric, u.currency FROM t JOIN u USING (payment_id),
				(VALUES ('cash', 'debit'), ('revenue', 'credit')) AS e (account, direction)`,
			posted, postedBy, postedAmounts, postedIn)
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("apply %d events: %w", len(stored), err)
	}
	return nil
}
