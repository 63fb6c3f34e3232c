package jobs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/outbox"
	"github.com/paygate/paygate/refund"
)

// requireRefundMessages checks the messages of refund request r against
// the types expected, in sequence order, and that the last one shows the
// request as it stands (as GET /v1/refund-requests/{id} does).
func requireRefundMessages(t *testing.T, b *sagaBundle, r refund.Request, types ...string) []outbox.Message {
	t.Helper()
	ctx := context.Background()
	msgs, err := outbox.OfAggregate(ctx, b.world.Pool, outbox.AggregateRefundRequest, r.ID)
	require.NoError(t, err)
	got := make([]string, len(msgs))
	for i, m := range msgs {
		got[i] = m.Type
		require.Equal(t, int64(i+1), m.Sequence)
		require.Equal(t, outbox.ID(outbox.AggregateRefundRequest, r.ID, m.Sequence), m.ID)
		var body struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Sequence int64  `json:"sequence"`
			Data     struct {
				RefundRequest json.RawMessage `json:"refund_request"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(m.Body, &body))
		require.Equal(t, m.ID, body.ID)
		require.Equal(t, m.Type, body.Type)
		require.Equal(t, m.Sequence, body.Sequence)
	}
	require.Equal(t, append([]string{}, types...), got, "messages of refund request %s", r.ID)

	now, err := refund.Get(ctx, b.world.Pool, r.ID)
	require.NoError(t, err)
	require.Equal(t, int64(len(msgs)), now.MessageSequence)
	if len(msgs) == 0 {
		return msgs
	}
	want, err := json.Marshal(outbox.RefundRequestData{RefundRequest: now.View()})
	require.NoError(t, err)
	var last struct {
		Data json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal(msgs[len(msgs)-1].Body, &last))
	require.JSONEq(t, string(want), string(last.Data))
	return msgs
}

// applyAgain redelivers every event of the simulator and replays them all,
// as an operator would, and waits until they are applied again.
func (b *sagaBundle) applyAgain(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	b.world.Apply(t, b.sim.Events()...)
	require.NoError(t, pgx.BeginFunc(ctx, b.world.Pool, func(tx pgx.Tx) error {
		_, err := b.world.Jobs.ReplayMatchingTx(ctx, tx, inbox.Filter{Provider: "stripe"},
			inbox.Operation{Actor: "ops:test", Reason: "replay everything"}, false)
		return err
	}))
	b.world.Settle(t)
}

// TestRefundRequestSettlementsAreMessages: a request the provider reports
// refunded tells downstream once, refund_request.succeeded, however often
// the reports come; a failure reported a week later is its second
// message, refund_request.failed; each shows the request as the API does.
func TestRefundRequestSettlementsAreMessages(t *testing.T) {
	t.Parallel()
	b := sagaSetup(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "usd", Email: "buyer@example.test"})
	b.deliver(t)
	r := b.request(t, p.ID, "20.00")
	r = b.await(t, r.ID, "submitted", submitted)
	requireRefundMessages(t, b, r) // submitted is not settled: nothing yet

	b.deliver(t)
	require.Equal(t, refund.StateSucceeded, b.await(t, r.ID, "settled", settled).State)
	first := requireRefundMessages(t, b, r, outbox.TypeRefundRequestSucceeded)
	b.applyAgain(t)
	require.Equal(t, first, requireRefundMessages(t, b, r, outbox.TypeRefundRequestSucceeded), "applied again: nothing new")

	b.sim.Advance(7 * 24 * time.Hour)
	b.sim.FailRefund(r.ProviderRefundID)
	b.deliver(t)
	b.await(t, r.ID, "failed", func(r refund.Request) bool { return r.State == refund.StateFailed })
	msgs := requireRefundMessages(t, b, r, outbox.TypeRefundRequestSucceeded, outbox.TypeRefundRequestFailed)
	require.Equal(t, first[0], msgs[0], "the first message is unchanged")
	b.applyAgain(t)
	require.Equal(t, msgs, requireRefundMessages(t, b, r, outbox.TypeRefundRequestSucceeded, outbox.TypeRefundRequestFailed))
}

// TestRefundRequestRefusedIsAMessage: a request the provider refuses, which
// paygate fails itself, tells downstream once, refund_request.failed.
func TestRefundRequestRefusedIsAMessage(t *testing.T) {
	t.Parallel()
	b := sagaSetup(t)
	p := b.sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "usd"})
	b.deliver(t)

	b.sim.RefuseNextRefund("invalid_request_error", "charge_disputed", "Charge ch_x has been charged back; cannot issue a refund.")
	r := b.request(t, p.ID, "")
	require.Equal(t, refund.StateFailed, b.await(t, r.ID, "settled", settled).State)
	msgs := requireRefundMessages(t, b, r, outbox.TypeRefundRequestFailed)
	b.applyAgain(t)
	require.Equal(t, msgs, requireRefundMessages(t, b, r, outbox.TypeRefundRequestFailed))
}
