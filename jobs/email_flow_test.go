package jobs_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/mailpit"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/jobs"
)

func emailWorld(t *testing.T) (*worldtest.World, *mailpit.Server) {
	t.Helper()
	mp := mailpit.Start(t)
	w := worldtest.New(t, &worldtest.Opts{Config: func(c *jobs.Config) {
		c.Email = jobs.EmailConfig{SMTPURL: mp.SMTPURL(), From: "paygate@example.com", OpsEmail: "ops@example.com"}
	}})
	return w, mp
}

// settleEmails waits until no email job is left to work.
func settleEmails(t *testing.T, w *worldtest.World) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for w.Count(t, `SELECT count(*) FROM river_job WHERE queue = $1 AND state IN ('available', 'running', 'retryable', 'scheduled')`, jobs.QueueEmail) > 0 {
		require.False(t, time.Now().After(deadline), "emails never settled")
		time.Sleep(20 * time.Millisecond)
	}
}

func subjectsByRecipient(t *testing.T, mp *mailpit.Server) []string {
	t.Helper()
	var out []string
	for _, m := range mp.Messages(t) {
		for _, to := range m.To {
			out = append(out, to.Address+" "+m.MessageID)
		}
	}
	sort.Strings(out)
	return out
}

// TestEachEmailOnceWhateverTheDelivery: every event delivered three times,
// shuffled, gives one receipt, one confirmation per refund and one dispute
// alert.
func TestEachEmailOnceWhateverTheDelivery(t *testing.T) {
	t.Parallel()
	w, mp := emailWorld(t)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd", Email: "buyer@example.com"})
	r1 := sim.Refund(p, 1000)
	r2 := sim.Refund(p, 2000)
	d := sim.Dispute(p, 0)
	events := sim.Events()
	var delivery []stripesim.Event
	for i := 2; i >= 0; i-- {
		for j := len(events) - 1; j >= 0; j-- {
			delivery = append(delivery, events[(j+i)%len(events)])
		}
	}
	w.Apply(t, delivery...)
	settleEmails(t, w)

	require.Equal(t, sortedWithin([]string{
		"buyer@example.com " + jobs.EmailMessageID(jobs.EmailPaymentReceipt, p.ID),
		"buyer@example.com " + jobs.EmailMessageID(jobs.EmailRefundConfirmation, r1.ID),
		"buyer@example.com " + jobs.EmailMessageID(jobs.EmailRefundConfirmation, r2.ID),
		"ops@example.com " + jobs.EmailMessageID(jobs.EmailDisputeAlert, d.ID),
	}), subjectsByRecipient(t, mp))

	emails, err := jobs.EmailsForPayment(context.Background(), w.Pool, p.ID)
	require.NoError(t, err)
	require.Len(t, emails, 4)
	for _, e := range emails {
		require.Equal(t, jobs.EmailSent, e.Status)
	}
}

func sortedWithin(s []string) []string { sort.Strings(s); return s }

// TestReorderedRefundAndSuccessSendOneOfEach: the refund's reports first,
// then the success's: one receipt, one refund confirmation.
func TestReorderedRefundAndSuccessSendOneOfEach(t *testing.T) {
	t.Parallel()
	w, mp := emailWorld(t)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 5000, Currency: "eur", Email: "late@example.com"})
	success := sim.Events()
	r := sim.Refund(p, 5000)
	refund := sim.Events()[len(success):]
	w.Apply(t, refund...)
	w.Apply(t, success...)
	w.Apply(t, refund...)
	settleEmails(t, w)

	kinds := map[jobs.EmailKind]int{}
	emails, err := jobs.EmailsForPayment(context.Background(), w.Pool, p.ID)
	require.NoError(t, err)
	for _, e := range emails {
		kinds[e.Kind]++
	}
	require.Equal(t, map[jobs.EmailKind]int{jobs.EmailPaymentReceipt: 1, jobs.EmailRefundConfirmation: 1}, kinds)
	ids := map[string]bool{}
	for _, m := range mp.Messages(t) {
		ids[m.MessageID] = true
	}
	require.Len(t, ids, 2)
	require.True(t, ids[jobs.EmailMessageID(jobs.EmailRefundConfirmation, r.ID)])
}

// TestRolledBackProcessingSendsNoEmail: when the processing transaction
// fails after the email intent was written, the intent goes with it; the
// retry that succeeds sends exactly one.
func TestRolledBackProcessingSendsNoEmail(t *testing.T) {
	t.Parallel()
	w, mp := emailWorld(t)
	_, err := w.Pool.Exec(context.Background(), `
		CREATE FUNCTION fail_inbox() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.status = 'processed' THEN RAISE EXCEPTION 'simulated failure at commit time'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER fail_inbox BEFORE UPDATE ON inbox_events FOR EACH ROW EXECUTE FUNCTION fail_inbox();`)
	require.NoError(t, err)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 1000, Currency: "usd", Email: "rollback@example.com"})
	w.Ingest(t, sim.Events()...)

	// Wait for at least one failed attempt of every event.
	deadline := time.Now().Add(30 * time.Second)
	for w.Count(t, `SELECT count(*) FROM inbox_events WHERE attempts = 0`) > 0 {
		require.False(t, time.Now().After(deadline))
		time.Sleep(20 * time.Millisecond)
	}
	require.Zero(t, w.Count(t, `SELECT count(*) FROM email_outbox`), "a rolled-back transaction leaves no email intent")
	require.Zero(t, w.Count(t, `SELECT count(*) FROM river_job WHERE kind = 'send_email'`))
	require.Empty(t, mp.Messages(t))

	_, err = w.Pool.Exec(context.Background(), `DROP TRIGGER fail_inbox ON inbox_events`)
	require.NoError(t, err)
	_, err = w.Pool.Exec(context.Background(), `UPDATE river_job SET scheduled_at = now() WHERE state = 'retryable'`)
	require.NoError(t, err)
	w.Settle(t)
	settleEmails(t, w)
	msgs := mp.Messages(t)
	require.Len(t, msgs, 1)
	require.Equal(t, jobs.EmailMessageID(jobs.EmailPaymentReceipt, p.ID), msgs[0].MessageID)
}

// TestPoisonRaisesOneOpsAlert: an event that becomes poison alerts ops
// once, however often it is delivered.
func TestPoisonRaisesOneOpsAlert(t *testing.T) {
	t.Parallel()
	w, mp := emailWorld(t)
	sim := stripesim.New(stripesim.Config{})
	bad := sim.Emit("charge.succeeded", map[string]any{
		"id": "ch_badcur", "object": "charge", "amount": 100, "amount_captured": 100, "captured": true, "currency": "zzz",
	})
	w.Apply(t, bad, bad, bad)
	settleEmails(t, w)
	require.Equal(t, "poison", w.Status(t, bad.ID))
	msgs := mp.Messages(t)
	require.Len(t, msgs, 1)
	require.Equal(t, "ops@example.com", msgs[0].To[0].Address)
	require.Equal(t, jobs.EmailMessageID(jobs.EmailPoisonAlert, "stripe/"+bad.ID), msgs[0].MessageID)
}

// TestReceiptWithoutAddressIsSkipped: a charge that names no receipt or
// billing email records its receipt as skipped, never silently dropped.
func TestReceiptWithoutAddressIsSkipped(t *testing.T) {
	t.Parallel()
	w, mp := emailWorld(t)
	sim := stripesim.New(stripesim.Config{})
	p := sim.Pay(stripesim.PayOpts{Amount: 1000, Currency: "usd"})
	w.Apply(t, sim.Events()...)
	settleEmails(t, w)
	emails, err := jobs.EmailsForPayment(context.Background(), w.Pool, p.ID)
	require.NoError(t, err)
	require.Len(t, emails, 1)
	require.Equal(t, jobs.EmailPaymentReceipt, emails[0].Kind)
	require.Equal(t, jobs.EmailSkipped, emails[0].Status)
	require.Empty(t, mp.Messages(t))
}
