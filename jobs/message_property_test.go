package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/outbox"
	"github.com/paygate/paygate/statemachine"
)

// paymentState is what a payment message tells of a payment, as the API
// prints it.
type paymentState struct {
	Status                               statemachine.State
	Currency                             string
	Amount, Captured, Refunded, Disputed string
}

// apiAmount formats an amount as GET /v1/payments/{id} does.
func apiAmount(d decimal.Decimal, currency string) string {
	if currency == "" {
		return d.String()
	}
	return ledger.Format(d, currency)
}

func stateOf(s statemachine.Summary) paymentState {
	return paymentState{Status: s.State, Currency: s.Currency,
		Amount: apiAmount(s.Amount, s.Currency), Captured: apiAmount(s.AmountCaptured, s.Currency),
		Refunded: apiAmount(s.AmountRefunded, s.Currency), Disputed: apiAmount(s.AmountDisputed, s.Currency)}
}

func stateOfView(v outbox.PaymentView) paymentState {
	return paymentState{Status: v.Status, Currency: v.Currency,
		Amount: v.Amount, Captured: v.AmountCaptured, Refunded: v.AmountRefunded, Disputed: v.AmountDisputed}
}

// paymentMessage is a payment message as a consumer decodes it.
type paymentMessage struct {
	ID        string             `json:"id"`
	Type      string             `json:"type"`
	CreatedAt time.Time          `json:"created_at"`
	Sequence  int64              `json:"sequence"`
	Data      outbox.PaymentData `json:"data"`
}

// requirePaymentMessages reads the messages of payment id and checks what
// must hold of any object's messages: sequences 1..n without a gap, ids
// derived from them and distinct, a body that says what the row says, and
// a type naming the status after the change.
func requirePaymentMessages(t *rapid.T, w *worldtest.World, id string) []paymentMessage {
	msgs, err := outbox.OfAggregate(context.Background(), w.Pool, outbox.AggregatePayment, id)
	require.NoError(t, err)
	out := make([]paymentMessage, len(msgs))
	ids := map[string]bool{}
	for i, m := range msgs {
		require.Equal(t, int64(i+1), m.Sequence, "payment %s: sequences must be 1..n", id)
		require.Equal(t, outbox.ID(outbox.AggregatePayment, id, m.Sequence), m.ID, "payment %s #%d", id, m.Sequence)
		require.False(t, ids[m.ID], "payment %s: id %s twice", id, m.ID)
		ids[m.ID] = true

		var pm paymentMessage
		dec := json.NewDecoder(bytes.NewReader(m.Body))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&pm), "%s", m.Body)
		require.Equal(t, m.ID, pm.ID)
		require.Equal(t, m.Sequence, pm.Sequence)
		require.True(t, m.CreatedAt.Equal(pm.CreatedAt), "%s: row %s, body %s", m.ID, m.CreatedAt, pm.CreatedAt)
		p := pm.Data.Payment
		require.Equal(t, id, p.ID)
		require.Equal(t, "stripe", p.Provider)
		require.Equal(t, outbox.PaymentType(p.Status), pm.Type)
		require.Equal(t, m.Type, pm.Type)
		require.True(t, p.UpdatedAt.Equal(pm.CreatedAt), "%s: updated_at is the time of the change", m.ID)
		out[i] = pm
	}
	return out
}

// requireChangesOnly: each message tells a change of the one before (no
// two in a row say the same), and names the status it left; the first
// names none.
func requireChangesOnly(t *rapid.T, id string, msgs []paymentMessage) {
	for i, m := range msgs {
		p := m.Data.Payment
		if i == 0 {
			require.Nil(t, p.PreviousStatus, "payment %s: first message", id)
			continue
		}
		prev := msgs[i-1].Data.Payment
		require.NotEqual(t, stateOfView(prev), stateOfView(p), "payment %s: messages %d and %d tell the same", id, i, i+1)
		require.NotNil(t, p.PreviousStatus, "payment %s #%d", id, m.Sequence)
		require.Equal(t, prev.Status, *p.PreviousStatus, "payment %s #%d: previous_status", id, m.Sequence)
	}
}

// expectedStates is the reference model: the payment's facts, as the
// inbox's events first brought them (each fact is stored with the event
// that first reported it), folded event by event in the order the events
// were first applied; each event that leaves the payment in another state
// than the one before it, or gives it its first, is one message.
func expectedStates(t *rapid.T, w *worldtest.World, id string, applied []string) []paymentState {
	facts, err := ledger.Facts(context.Background(), w.Pool, id)
	require.NoError(t, err)
	byEvent := map[string][]statemachine.Fact{}
	for _, f := range facts {
		byEvent[f.EventID] = append(byEvent[f.EventID], f)
	}
	var (
		have []statemachine.Fact
		out  []paymentState
	)
	for _, ev := range applied {
		if len(byEvent[ev]) == 0 {
			continue
		}
		have = append(have, byEvent[ev]...)
		s := stateOf(statemachine.Fold(have))
		if len(out) == 0 || s != out[len(out)-1] {
			out = append(out, s)
		}
	}
	require.Len(t, have, len(facts), "payment %s: every fact came from an event applied", id)
	return out
}

// requireLastIsPayment: the last message of a payment shows it as the API
// does now, its time of change included.
func requireLastIsPayment(t *rapid.T, w *worldtest.World, id string, msgs []paymentMessage) {
	require.NotEmpty(t, msgs, "payment %s has no message", id)
	p, err := ledger.GetPayment(context.Background(), w.Pool, id)
	require.NoError(t, err)
	last := msgs[len(msgs)-1].Data.Payment
	require.Equal(t, stateOf(p.Summary), stateOfView(last), "payment %s: last message vs GET", id)
	require.Equal(t, p.Provider, last.Provider)
	require.Equal(t, int64(len(msgs)), p.MessageSequence, "payment %s: counter", id)
	require.True(t, p.UpdatedAt.Equal(last.UpdatedAt), "payment %s: updated_at %s, last message's %s", id, p.UpdatedAt, last.UpdatedAt)
}

// replayAll replays events as an operator would, and waits until they are
// applied again.
func replayAll(t *rapid.T, w *worldtest.World, ids []string) {
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		res, err := w.Jobs.ReplayMatchingTx(ctx, tx, inbox.Filter{Provider: "stripe", EventIDs: ids},
			inbox.Operation{Actor: "ops:test", Reason: "message property"}, false)
		require.Equal(t, int64(len(ids)), res.Replayed)
		return err
	}))
	w.Settle(t)
}

// messageCounts is the number of messages of each payment.
func messageCounts(t *rapid.T, w *worldtest.World, ids []string) map[string]int {
	out := map[string]int{}
	for _, id := range ids {
		out[id] = w.Count(t, `SELECT count(*) FROM messages WHERE aggregate_type = 'payment' AND aggregate_id = $1`, id)
	}
	return out
}

// TestPaymentMessagesTellEveryChangeOnce (invariant 11): whatever the order
// and duplication of a payment's events, its messages are numbered 1..n
// under ids derived from that numbering; there is one per change of the
// payment and no other: exactly the changes a fold of its facts, event by
// event in the order they were first applied, goes through (one worker
// applying one event at a time, so that order is the delivery's), and,
// applied in concurrent batches, a chain of changes each from the status
// the one before left; the last shows the payment as the API does; the
// feed places them in sequence order; and redelivering or replaying every
// event writes nothing more.
func TestPaymentMessagesTellEveryChangeOnce(t *testing.T) {
	t.Parallel()
	serial := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) { c.EventWorkers = 1 }})
	batched := worldtest.New(t, nil)

	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		sim := stripesim.New(settledInUSD()) // fresh random ids: the worlds outlive each case
		handles, _ := script(rt, sim)
		events := sim.Events()
		var payments, eventIDs []string
		for _, p := range handles {
			payments = append(payments, p.ID)
		}
		var delivery []stripesim.Event
		for _, e := range events {
			eventIDs = append(eventIDs, e.ID)
			for range rapid.IntRange(1, 3).Draw(rt, "copies") {
				delivery = append(delivery, e)
			}
		}
		delivery = rapid.Permutation(delivery).Draw(rt, "order")
		var firstApplied []string
		seen := map[string]bool{}
		for _, e := range delivery {
			if !seen[e.ID] {
				seen[e.ID] = true
				firstApplied = append(firstApplied, e.ID)
			}
		}

		serial.Apply(rt, delivery...)
		batched.ApplyAtOnce(rt, rapid.Permutation(delivery).Draw(rt, "order_at_once")...)

		for _, named := range []struct {
			name string
			w    *worldtest.World
		}{{"one at a time", serial}, {"in batches", batched}} {
			name, w := named.name, named.w
			require.Zero(rt, w.Count(rt, `SELECT count(*) FROM inbox_events WHERE status = 'poison'`), name)
			for _, id := range payments {
				msgs := requirePaymentMessages(rt, w, id)
				requireChangesOnly(rt, id, msgs)
				requireLastIsPayment(rt, w, id, msgs)
				if w == serial {
					got := make([]paymentState, len(msgs))
					for i, m := range msgs {
						got[i] = stateOfView(m.Data.Payment)
					}
					require.Equal(rt, expectedStates(rt, w, id, firstApplied), got,
						"payment %s: messages vs the changes its events made, in the order %v", id, firstApplied)
				}
			}
			// The feed hands each payment's messages on in sequence order.
			for {
				placed, err := outbox.Sequence(ctx, w.Pool, 1000)
				require.NoError(rt, err)
				if placed == 0 {
					break
				}
			}
			require.Zero(rt, w.Count(rt, `
				SELECT count(*) FROM messages a JOIN messages b USING (aggregate_type, aggregate_id)
				WHERE a.aggregate_id = ANY($1) AND a.sequence < b.sequence AND a.position > b.position`, payments), name)
		}

		// Applying the same events again tells downstream nothing new:
		// redelivered (the inbox knows them all), then replayed, applied
		// again in concurrent batches.
		before := messageCounts(rt, batched, payments)
		batched.Apply(rt, delivery...)
		replayAll(rt, batched, eventIDs)
		require.Equal(rt, before, messageCounts(rt, batched, payments), "messages after redelivering and replaying every event")
		for _, id := range payments {
			requireLastIsPayment(rt, batched, id, requirePaymentMessages(rt, batched, id))
		}
	})
}
