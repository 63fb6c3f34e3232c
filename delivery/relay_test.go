package delivery_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/delivery"
	"github.com/paygate/paygate/outbox"
)

func (b *testBundle) deliverJobs(t *testing.T, endpointID string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job
		WHERE kind = 'deliver_endpoint' AND queue = $1 AND state = 'available' AND args->>'endpoint_id' = $2`,
		delivery.QueueDelivery, endpointID).Scan(&n))
	return n
}

func (b *testBundle) seriesTrigger(t *testing.T, endpointID, messageID string) string {
	t.Helper()
	var trigger string
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT series_trigger FROM deliveries WHERE endpoint_id = $1 AND message_id = $2`, endpointID, messageID).Scan(&trigger))
	return trigger
}

func triggers(as []delivery.Attempt) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Trigger
	}
	return out
}

// TestFanOutByTypeAndCreation: an endpoint is given the messages of its
// types only, and only those created after it, even if fanned out later; a
// payment's first message it gets is due at once even when the payment had
// earlier messages it was not given.
func TestFanOutByTypeAndCreation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := message(t, "pi_1", 1, "payment.processing")
	b.write(t, before)
	rcv := newReceiver(t)
	refunds := b.endpoint(t, rcv.URL, "payment.refunded")
	all := b.endpoint(t, "http://127.0.0.1:9/all")
	succeeded := message(t, "pi_1", 2, "payment.succeeded")
	refunded := message(t, "pi_1", 3, "payment.refunded")
	other := message(t, "pi_2", 1, "payment.processing")
	b.write(t, succeeded, refunded, other)
	b.step(t)

	require.Equal(t, []string{refunded.ID}, b.deliveries(t, refunds.ID))
	require.Equal(t, []string{succeeded.ID, refunded.ID, other.ID}, b.deliveries(t, all.ID), "not pi_1's first, from before it")
	require.NotNil(t, b.delivery(t, refunds.ID, refunded.ID).NextAttemptAt, "not held behind a message it never gets")
	require.NotNil(t, b.delivery(t, all.ID, succeeded.ID).NextAttemptAt, "not held behind a message from before it")
	require.Nil(t, b.delivery(t, all.ID, refunded.ID).NextAttemptAt, "held behind pi_1's second message")

	require.Equal(t, 1, b.dispatch(t, refunds.ID))
	got := rcv.requests()
	require.Len(t, got, 1)
	require.Equal(t, refunded.ID, got[0].ID)
	require.Equal(t, refunded.Body, got[0].Body)
}

// TestFanOutToDisabledEndpoint: a disabled endpoint is given its messages,
// kept pending and not dispatched; enabled, it gets them.
func TestFanOutToDisabledEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	e := b.endpoint(t, rcv.URL)
	disabled, enabled := delivery.StatusDisabled, delivery.StatusEnabled
	_, err := b.store.Update(t.Context(), e.ID, delivery.Patch{Status: &disabled})
	require.NoError(t, err)

	m := message(t, "pi_d", 1, "payment.succeeded")
	b.write(t, m)
	b.step(t)
	require.Equal(t, delivery.DeliveryPending, b.delivery(t, e.ID, m.ID).Status)
	require.Zero(t, b.deliverJobs(t, e.ID), "no dispatcher for a disabled endpoint")
	require.Zero(t, b.dispatch(t, e.ID))
	require.Empty(t, rcv.requests())

	_, err = b.store.Update(t.Context(), e.ID, delivery.Patch{Status: &enabled})
	require.NoError(t, err)
	b.step(t)
	require.Equal(t, 1, b.deliverJobs(t, e.ID))
	require.Equal(t, 1, b.dispatch(t, e.ID))
	require.Equal(t, 1, rcv.count(m.ID))
	require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, m.ID).Status)
}

// TestHandOutOnce: an endpoint's place moved back to the start of the feed
// gives it nothing twice and leaves settled deliveries as they are, and
// dispatchers of one endpoint started at once send each message once.
func TestHandOutOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	e := b.endpoint(t, rcv.URL)
	first := message(t, "pi_o", 1, "payment.processing")
	b.write(t, first, message(t, "pi_o", 2, "payment.succeeded"), message(t, "pi_p", 1, "payment.succeeded"))
	b.step(t)
	require.Len(t, b.deliveries(t, e.ID), 3, "pending before they are sent")
	require.Equal(t, 3, b.dispatch(t, e.ID), "pi_o's first and pi_p's, then pi_o's second after its first")
	require.Zero(t, b.dispatch(t, e.ID), "nothing new")

	_, err := b.pool.Exec(t.Context(), `UPDATE endpoints SET handed_through = 0 WHERE id = $1`, e.ID)
	require.NoError(t, err)
	require.Zero(t, b.dispatch(t, e.ID), "read again from the start, none sent again")
	require.Len(t, b.deliveries(t, e.ID), 3)
	require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, first.ID).Status)
	require.Equal(t, 1, b.delivery(t, e.ID, first.ID).Attempts)
	require.Equal(t, 1, rcv.count(first.ID))

	var more []outbox.Message
	for i := range 50 {
		more = append(more, message(t, "pi_q", int64(i+1), "payment.succeeded"))
		more = append(more, message(t, fmt.Sprintf("pi_r%d", i), 1, "payment.succeeded"))
	}
	b.write(t, more...)
	b.step(t)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := b.dispatcher.Dispatch(context.WithoutCancel(t.Context()), b.river, e.ID); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for b.dispatch(t, e.ID) > 0 {
	}
	var total, distinct int
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT count(*), count(DISTINCT message_id) FROM deliveries WHERE endpoint_id = $1 AND status = 'succeeded'`, e.ID).Scan(&total, &distinct))
	require.Equal(t, 103, total)
	require.Equal(t, 103, distinct)
	for _, m := range more {
		require.Equal(t, 1, rcv.count(m.ID), m.ID)
	}
	got := rcv.requests()
	var seq []string
	for _, r := range got {
		if r.Payment == "pi_q" {
			seq = append(seq, r.ID)
		}
	}
	want := make([]string, 50)
	for i := range 50 {
		want[i] = more[2*i].ID
	}
	require.Equal(t, want, seq, "one object's messages in order")
}

// TestResend: a succeeded message sent again is pending on a manual series
// whose attempts, retries included, are recorded as manual; one pending
// already is left alone.
func TestResend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	e := b.endpoint(t, rcv.URL)
	m := message(t, "pi_r", 1, "payment.succeeded")
	b.write(t, m)
	b.step(t)
	require.Equal(t, 1, b.dispatch(t, e.ID))
	require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, m.ID).Status)

	queued, err := b.store.Resend(t.Context(), m.ID, e.ID)
	require.NoError(t, err)
	require.True(t, queued)
	d := b.delivery(t, e.ID, m.ID)
	require.Equal(t, delivery.DeliveryPending, d.Status)
	require.NotNil(t, d.NextAttemptAt)
	require.WithinDuration(t, time.Now(), *d.NextAttemptAt, time.Second)
	require.Equal(t, "manual", b.seriesTrigger(t, e.ID, m.ID))

	queued, err = b.store.Resend(t.Context(), m.ID, e.ID)
	require.NoError(t, err)
	require.False(t, queued, "pending already")

	rcv.setAnswer(status(http.StatusInternalServerError))
	require.Equal(t, 1, b.dispatch(t, e.ID))
	rcv.setAnswer(status(http.StatusOK))
	b.drain(t, e.ID)
	require.Equal(t, 3, rcv.count(m.ID))
	as := b.attempts(t, e.ID, m.ID)
	require.Equal(t, []string{"scheduled", "manual", "manual"}, triggers(as))
	require.Equal(t, 3, as[2].Attempt)
	require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, m.ID).Status)

	_, err = b.store.Resend(t.Context(), outbox.ID(outbox.AggregatePayment, "pi_none", 1), e.ID)
	require.ErrorIs(t, err, outbox.ErrNotFound)
	_, err = b.store.Resend(t.Context(), m.ID, "ep_nosuchendpoint")
	require.ErrorIs(t, err, delivery.ErrEndpointNotFound)
}

// TestRecover: a recovery queues, within its window and the endpoint's
// types, the messages that failed there and those it was never given
// (created before it), not those that succeeded, and says how many.
func TestRecover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	now := time.Now()
	outside := messageAt(t, "pi_r0", 1, "payment.succeeded", now.Add(-3*time.Hour))
	before := messageAt(t, "pi_r1", 1, "payment.succeeded", now.Add(-time.Hour))
	otherType := messageAt(t, "pi_r4", 1, "payment.refunded", now.Add(-time.Hour))
	b.write(t, outside, before, otherType)
	e := b.endpoint(t, rcv.URL, "payment.succeeded")
	failed := message(t, "pi_r2", 1, "payment.succeeded")
	ok := message(t, "pi_r3", 1, "payment.succeeded")
	b.write(t, failed, ok)
	rcv.setAnswer(func(w http.ResponseWriter, r request) {
		if r.ID == failed.ID {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	b.step(t)
	require.Equal(t, []string{failed.ID, ok.ID}, b.deliveries(t, e.ID))
	b.drain(t, e.ID)
	require.Equal(t, delivery.DeliveryFailed, b.delivery(t, e.ID, failed.ID).Status)
	require.Equal(t, 1, rcv.count(ok.ID))

	rcv.setAnswer(status(http.StatusOK))
	n, err := b.store.Recover(t.Context(), e.ID, now.Add(-2*time.Hour), time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, "manual", b.seriesTrigger(t, e.ID, before.ID))
	require.Equal(t, "manual", b.seriesTrigger(t, e.ID, failed.ID))
	b.drain(t, e.ID)

	require.Equal(t, 1, rcv.count(before.ID))
	require.Equal(t, len(testSchedule)+2, rcv.count(failed.ID))
	require.Equal(t, 1, rcv.count(ok.ID), "succeeded: not sent again")
	require.Zero(t, rcv.count(outside.ID), "before the window")
	require.Zero(t, rcv.count(otherType.ID), "not of its types")
	require.Equal(t, []string{"manual"}, triggers(b.attempts(t, e.ID, before.ID)))
	as := b.attempts(t, e.ID, failed.ID)
	require.Equal(t, "manual", as[len(as)-1].Trigger)
	require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, failed.ID).Status)

	n, err = b.store.Recover(t.Context(), e.ID, now.Add(-2*time.Hour), time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, n, "everything succeeded")
	_, err = b.store.Recover(t.Context(), "ep_nosuchendpoint", now.Add(-time.Hour), now)
	require.ErrorIs(t, err, delivery.ErrEndpointNotFound)
}

// TestKick: a step queues one dispatcher per endpoint with messages due,
// none for an endpoint with nothing due or disabled, and no second one
// while the first waits.
func TestKick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	due := b.endpoint(t, "http://127.0.0.1:9/due")
	due2 := b.endpoint(t, "http://127.0.0.1:9/due2", "payment.succeeded")
	idle := b.endpoint(t, "http://127.0.0.1:9/idle", "reconciliation_run.failed")
	off := b.endpoint(t, "http://127.0.0.1:9/off")
	disabled := delivery.StatusDisabled
	_, err := b.store.Update(t.Context(), off.ID, delivery.Patch{Status: &disabled})
	require.NoError(t, err)
	require.NoError(t, b.relay.Step(t.Context()))
	require.Zero(t, b.deliverJobs(t, due.ID), "nothing due yet")

	b.write(t, message(t, "pi_k", 1, "payment.succeeded"), message(t, "pi_k2", 1, "payment.succeeded"))
	b.step(t)
	require.Equal(t, 1, b.deliverJobs(t, due.ID))
	require.Equal(t, 1, b.deliverJobs(t, due2.ID), "one each")
	require.Zero(t, b.deliverJobs(t, idle.ID))
	require.Zero(t, b.deliverJobs(t, off.ID))

	b.write(t, message(t, "pi_k3", 1, "payment.succeeded"))
	b.step(t)
	b.step(t)
	require.Equal(t, 1, b.deliverJobs(t, due.ID), "unique per endpoint while one is available")
	require.Equal(t, 1, b.deliverJobs(t, due2.ID))
	var all int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = 'deliver_endpoint'`).Scan(&all))
	require.Equal(t, 2, all)
}

// TestEndpointChangedMidSend: an endpoint deleted while its messages are
// being sent takes its deliveries with it, and recording their outcome then
// is no error; one an operator disables meanwhile has the attempts
// recorded, stays disabled and sends nothing more.
func TestEndpointChangedMidSend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// sendAndWait starts a dispatcher of endpointID and returns once the
	// receiver holds n requests, and a function that waits for the
	// dispatcher's result.
	sendAndWait := func(t *testing.T, rcv *receiver, endpointID string, n int) func() (int, error) {
		type outcome struct {
			n   int
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			n, err := b.dispatcher.Dispatch(context.WithoutCancel(t.Context()), b.river, endpointID)
			done <- outcome{n, err}
		}()
		require.Eventually(t, func() bool { return len(rcv.requests()) == n }, 5*time.Second, 5*time.Millisecond)
		return func() (int, error) { o := <-done; return o.n, o.err }
	}

	t.Run("deleted", func(t *testing.T) {
		rcv, release := blockingReceiver(t, http.StatusInternalServerError)
		e := b.endpoint(t, rcv.URL)
		b.write(t, message(t, "pi_del", 1, "payment.succeeded"), message(t, "pi_del2", 1, "payment.succeeded"))
		b.step(t)
		wait := sendAndWait(t, rcv, e.ID, 2)
		require.NoError(t, b.store.Delete(t.Context(), e.ID))
		release()
		n, err := wait()
		require.NoError(t, err)
		require.Equal(t, 2, n)

		var deliveries, attempts int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT
			(SELECT count(*) FROM deliveries WHERE endpoint_id = $1),
			(SELECT count(*) FROM delivery_attempts WHERE endpoint_id = $1)`, e.ID).Scan(&deliveries, &attempts))
		require.Zero(t, deliveries)
		require.Zero(t, attempts)
		require.Zero(t, b.dispatch(t, e.ID))
		require.ErrorIs(t, b.store.Delete(t.Context(), e.ID), delivery.ErrEndpointNotFound)
	})

	t.Run("disabled", func(t *testing.T) {
		rcv, release := blockingReceiver(t, http.StatusInternalServerError)
		e := b.endpoint(t, rcv.URL)
		m := message(t, "pi_dis", 1, "payment.succeeded")
		b.write(t, m)
		b.step(t)
		wait := sendAndWait(t, rcv, e.ID, 1)
		disabled := delivery.StatusDisabled
		_, err := b.store.Update(t.Context(), e.ID, delivery.Patch{Status: &disabled})
		require.NoError(t, err)
		release()
		_, err = wait()
		require.NoError(t, err)

		require.Len(t, b.attempts(t, e.ID, m.ID), 1, "the attempt is recorded")
		d := b.delivery(t, e.ID, m.ID)
		require.Equal(t, delivery.DeliveryPending, d.Status)
		require.Equal(t, 1, d.Attempts)
		e = b.getEndpoint(t, e.ID)
		require.Equal(t, delivery.StatusDisabled, e.Status)
		require.Equal(t, "disabled by an operator", e.DisabledReason)
		require.Zero(t, b.disabledEmails(t, e.ID), "ops disabled it themselves")
		time.Sleep(testSchedule[0])
		require.Zero(t, b.dispatch(t, e.ID))
		require.Len(t, rcv.requests(), 1)
	})
}

// TestPlaceMovesPastOtherTypes: an endpoint far behind in the feed with
// nothing of its types there is kicked once; its dispatcher sends nothing
// and moves its place to the end of the feed, after which it is left
// alone; a message of its types placed later is sent.
func TestPlaceMovesPastOtherTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	e := b.endpoint(t, rcv.URL, "payment.refunded")
	var msgs []outbox.Message
	for i := range 300 {
		msgs = append(msgs, message(t, fmt.Sprintf("pi_m%d", i), 1, "payment.succeeded"))
	}
	b.write(t, msgs...)
	b.step(t)
	require.Equal(t, 1, b.deliverJobs(t, e.ID), "more than the look-ahead behind")
	require.Zero(t, b.dispatch(t, e.ID))
	require.Empty(t, rcv.requests())
	var place, last int64
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT handed_through, (SELECT last_position FROM message_sequencer)
		FROM endpoints WHERE id = $1`, e.ID).Scan(&place, &last))
	require.Equal(t, last, place, "moved past what is not of its types")
	_, err := b.pool.Exec(t.Context(), `DELETE FROM river_job WHERE kind = 'deliver_endpoint'`)
	require.NoError(t, err)
	b.write(t, message(t, "pi_m0", 2, "payment.succeeded"))
	b.step(t)
	require.Zero(t, b.deliverJobs(t, e.ID), "nothing of its types ahead")

	refunded := message(t, "pi_m1", 2, "payment.refunded")
	b.write(t, refunded)
	b.step(t)
	require.Equal(t, 1, b.deliverJobs(t, e.ID))
	require.Equal(t, 1, b.dispatch(t, e.ID))
	require.Equal(t, 1, rcv.count(refunded.ID))
}

// TestPendingUntilRecorded: a message not sent yet is listed pending at
// its endpoint, with no attempt and no delivery row of its own; its row is
// written once, by the record of its first attempt.
func TestPendingUntilRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	e := b.endpoint(t, rcv.URL)
	m := message(t, "pi_u", 1, "payment.succeeded")
	b.write(t, m)
	b.step(t)
	var rows int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM deliveries`).Scan(&rows))
	require.Zero(t, rows, "no row before the first attempt")
	d := b.delivery(t, e.ID, m.ID)
	require.Equal(t, delivery.DeliveryPending, d.Status)
	require.Zero(t, d.Attempts)
	require.NotNil(t, d.NextAttemptAt)
	of, err := delivery.DeliveriesOfMessage(t.Context(), b.pool, m.ID)
	require.NoError(t, err)
	require.Len(t, of, 1)
	require.Equal(t, delivery.DeliveryPending, of[0].Status)

	require.Equal(t, 1, b.dispatch(t, e.ID))
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM deliveries`).Scan(&rows))
	require.Equal(t, 1, rows)
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM delivery_attempts`).Scan(&rows))
	require.Zero(t, rows, "the first attempt is kept in the delivery row")
	attempts, err := delivery.Attempts(t.Context(), b.pool, e.ID, m.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, 1, attempts[0].Attempt)
	require.Equal(t, "scheduled", attempts[0].Trigger)
	require.Equal(t, http.StatusOK, *attempts[0].ResponseStatus)
	require.Equal(t, delivery.DeliverySucceeded, b.delivery(t, e.ID, m.ID).Status)
}

// TestListDeliveriesPagesThroughWhatIsNotReadYet: an endpoint's listing,
// newest first, runs from the messages it has not read yet (pending, no
// attempt) into the deliveries it recorded, page by page, and the
// pending filter keeps only the first.
func TestListDeliveriesPagesThroughWhatIsNotReadYet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	e := b.endpoint(t, rcv.URL)
	var sent, waiting []outbox.Message
	for i := range 3 {
		sent = append(sent, message(t, fmt.Sprintf("pi_l%d", i), 1, "payment.succeeded"))
	}
	b.write(t, sent...)
	b.step(t)
	require.Equal(t, 3, b.dispatch(t, e.ID))
	for i := range 3 {
		waiting = append(waiting, message(t, fmt.Sprintf("pi_l%d", i), 2, "payment.refunded"))
	}
	b.write(t, waiting...)
	b.step(t)

	var pages [][]string
	cursor := ""
	for {
		ds, next, err := delivery.ListDeliveries(t.Context(), b.pool, e.ID, delivery.DeliveryFilter{}, cursor, 2)
		require.NoError(t, err)
		var page []string
		for _, d := range ds {
			page = append(page, d.MessageID+" "+string(d.Status))
		}
		pages = append(pages, page)
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, [][]string{
		{waiting[2].ID + " pending", waiting[1].ID + " pending"},
		{waiting[0].ID + " pending", sent[2].ID + " succeeded"},
		{sent[1].ID + " succeeded", sent[0].ID + " succeeded"},
	}, pages)

	ds, next, err := delivery.ListDeliveries(t.Context(), b.pool, e.ID, delivery.DeliveryFilter{Status: delivery.DeliveryPending}, "", 10)
	require.NoError(t, err)
	require.Empty(t, next)
	require.Len(t, ds, 3)
	for _, d := range ds {
		require.Zero(t, d.Attempts)
		require.NotNil(t, d.NextAttemptAt)
	}
	ds, _, err = delivery.ListDeliveries(t.Context(), b.pool, e.ID, delivery.DeliveryFilter{MessageID: waiting[1].ID}, "", 10)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, waiting[1].ID, ds[0].MessageID)
}
