package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/mailpit"
	"github.com/paygate/paygate/internal/outbuf"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/jobs"
)

type emailBundle struct {
	pool   *pgxpool.Pool
	client *jobs.Client
	logs   *outbuf.Buffer
}

// setupEmail returns a fresh database and a River client whose send_email
// worker talks to smtpURL ("" means no SMTP configured). The client is not
// started: call start once the scenario's transactions are in place.
func setupEmail(t *testing.T, smtpURL string) *emailBundle {
	t.Helper()
	return setupEmailWith(t, smtpURL, nil)
}

// setupEmailWith also registers extra workers, given the bundle's pool.
func setupEmailWith(t *testing.T, smtpURL string, register func(*pgxpool.Pool, *river.Workers)) *emailBundle {
	t.Helper()
	b := &emailBundle{pool: testdb.New(t), logs: &outbuf.Buffer{}}
	client, err := jobs.NewClient(b.pool, jobs.Config{
		Register: func(ws *river.Workers) []*river.PeriodicJob {
			if register != nil {
				register(b.pool, ws)
			}
			return nil
		},
		Logger:            slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Email:             jobs.EmailConfig{SMTPURL: smtpURL, From: "Paygate <receipts@paygate.example>", Timeout: 5 * time.Second},
	})
	require.NoError(t, err)
	b.client = client
	return b
}

func (b *emailBundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.client.River.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.client.River.Stop(ctx)
	})
}

// enqueue records e in a transaction of its own and commits it.
func (b *emailBundle) enqueue(t *testing.T, e jobs.Email) bool {
	t.Helper()
	var created bool
	err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		var err error
		created, err = jobs.EnqueueEmailTx(context.Background(), tx, b.client.River, e)
		return err
	})
	require.NoError(t, err)
	return created
}

func (b *emailBundle) waitStatus(t *testing.T, kind jobs.EmailKind, objectID string, want jobs.EmailStatus) jobs.EmailRecord {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := jobs.GetEmail(context.Background(), b.pool, kind, objectID)
		if !errors.Is(err, jobs.ErrEmailNotFound) { // not yet recorded: keep waiting
			require.NoError(t, err)
		}
		if err == nil && r.Status == want {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("email %s %s: status %s after 20s, want %s (error %q)\nlogs:\n%s", kind, objectID, r.Status, want, r.Error, b.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// jobStates lists the send_email jobs' states.
func (b *emailBundle) jobStates(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT state::text FROM river_job WHERE kind = 'send_email' ORDER BY id`)
	require.NoError(t, err)
	states, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return states
}

func (b *emailBundle) waitJobStates(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := b.jobStates(t)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("send_email jobs %v, want %v\nlogs:\n%s", got, want, b.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *emailBundle) outboxCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM email_outbox`).Scan(&n))
	return n
}

func receipt(paymentID, to string) jobs.Email {
	return jobs.Email{
		Kind: jobs.EmailPaymentReceipt, ObjectID: paymentID, PaymentID: paymentID,
		Recipient: to, Amount: "360.00", Currency: "usd",
	}
}

// TestEmailIntentEnqueuedThreeTimesSendsOne: the same intent from three
// transactions (a duplicated event, a replay, a reordered twin) is one row,
// one job, one email.
func TestEmailIntentEnqueuedThreeTimesSendsOne(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	b := setupEmail(t, mp.SMTPURL())

	require.True(t, b.enqueue(t, receipt("pi_1", "jenny@example.com")))
	require.False(t, b.enqueue(t, receipt("pi_1", "jenny@example.com")))
	require.False(t, b.enqueue(t, receipt("pi_1", "other@example.com")), "the first recording of an intent wins")
	require.Equal(t, 1, b.outboxCount(t))
	require.Equal(t, []string{"available"}, b.jobStates(t))

	b.start(t)
	r := b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_1", jobs.EmailSent)
	b.waitJobStates(t, "completed")
	require.NotNil(t, r.SentAt)
	require.Equal(t, 1, r.Attempts)
	require.Equal(t, "jenny@example.com", r.Recipient)

	msgs := mp.WaitForMessages(t, 1)
	require.Len(t, msgs, 1)
	require.Equal(t, "jenny@example.com", msgs[0].To[0].Address)
	require.Equal(t, "receipts@paygate.example", msgs[0].From.Address)
	require.Contains(t, b.logs.String(), "email sent")
	require.GreaterOrEqual(t, emailsCounted(t, "payment_receipt", "sent"), 1.0)
	require.NotContains(t, b.logs.String(), "jenny@example.com", "logs carry a redacted address only")
}

// TestEmailIntentRacingTransactions: concurrent transactions recording the
// same intent make one row and one job; the database decides.
func TestEmailIntentRacingTransactions(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	const n = 8
	created := make(chan bool, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
				c, err := jobs.EnqueueEmailTx(context.Background(), tx, b.client.River, receipt("pi_race", "a@example.com"))
				created <- c
				return err
			})
			require.NoError(t, err)
		}()
	}
	close(start)
	wg.Wait()
	close(created)
	wins := 0
	for c := range created {
		if c {
			wins++
		}
	}
	require.Equal(t, 1, wins)
	require.Equal(t, 1, b.outboxCount(t))
	require.Len(t, b.jobStates(t), 1)
}

// TestEmailRolledBackTransactionSendsNothing: the processing transaction
// rolls back, so its email never existed; a later committed intent is
// delivered alone.
func TestEmailRolledBackTransactionSendsNothing(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	b := setupEmail(t, mp.SMTPURL())
	ctx := context.Background()

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	created, err := jobs.EnqueueEmailTx(ctx, tx, b.client.River, receipt("pi_rolled_back", "a@example.com"))
	require.NoError(t, err)
	require.True(t, created)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, b.outboxCount(t))
	require.Empty(t, b.jobStates(t))

	require.True(t, b.enqueue(t, receipt("pi_committed", "b@example.com")))
	b.start(t)
	b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_committed", jobs.EmailSent)
	b.waitJobStates(t, "completed")
	msgs := mp.Messages(t)
	require.Len(t, msgs, 1)
	require.Equal(t, "b@example.com", msgs[0].To[0].Address)
	_, err = jobs.GetEmail(ctx, b.pool, jobs.EmailPaymentReceipt, "pi_rolled_back")
	require.ErrorIs(t, err, jobs.ErrEmailNotFound)
}

// TestEmailSMTPDownThenUp: nothing listens on the SMTP port at the first
// attempt; the error is kept on the row, River retries with backoff, and
// once mailpit is up on that port the email is delivered once.
func TestEmailSMTPDownThenUp(t *testing.T) {
	t.Parallel()
	port := freeport.MustPort(t)
	b := setupEmail(t, fmt.Sprintf("smtp://127.0.0.1:%d", port))
	require.True(t, b.enqueue(t, receipt("pi_down", "a@example.com")))
	b.start(t)

	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := jobs.GetEmail(context.Background(), b.pool, jobs.EmailPaymentReceipt, "pi_down")
		require.NoError(t, err)
		if r.Attempts >= 1 {
			require.Equal(t, jobs.EmailPending, r.Status, "a refused connection is transient")
			require.Contains(t, r.Error, "refused")
			break
		}
		require.True(t, time.Now().Before(deadline), "no failed attempt recorded")
		time.Sleep(10 * time.Millisecond)
	}

	mp := mailpit.StartWithOpts(t, &mailpit.Opts{SMTPPort: port})
	r := b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_down", jobs.EmailSent)
	b.waitJobStates(t, "completed")
	require.GreaterOrEqual(t, r.Attempts, 2)
	require.Empty(t, r.Error, "a sent email keeps no stale error")
	require.Len(t, mp.Messages(t), 1)
	require.Contains(t, b.logs.String(), "will retry")
}

// TestEmailTemporaryRejectionRetries: a 451 is retried, not failed.
func TestEmailTemporaryRejectionRetries(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	mp.SetChaos(t, mailpit.Chaos{Recipient: mailpit.Trigger{ErrorCode: 451, Probability: 100}})
	b := setupEmail(t, mp.SMTPURL())
	require.True(t, b.enqueue(t, receipt("pi_451", "a@example.com")))
	b.start(t)

	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := jobs.GetEmail(context.Background(), b.pool, jobs.EmailPaymentReceipt, "pi_451")
		require.NoError(t, err)
		if r.Attempts >= 1 {
			require.Equal(t, jobs.EmailPending, r.Status)
			require.Contains(t, r.Error, "451")
			break
		}
		require.True(t, time.Now().Before(deadline), "no failed attempt recorded")
		time.Sleep(10 * time.Millisecond)
	}
	mp.SetChaos(t, mailpit.Chaos{})
	b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_451", jobs.EmailSent)
	require.Len(t, mp.Messages(t), 1)
}

// TestEmailPermanentRejection: a 550 fails the row at once, cancels the
// job, and logs an error without the full address or the body.
func TestEmailPermanentRejection(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	mp.SetChaos(t, mailpit.Chaos{Recipient: mailpit.Trigger{ErrorCode: 550, Probability: 100}})
	b := setupEmail(t, mp.SMTPURL())
	require.True(t, b.enqueue(t, receipt("pi_550", "jenny.rosen@example.com")))
	b.start(t)

	r := b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_550", jobs.EmailFailed)
	b.waitJobStates(t, "cancelled")
	require.Equal(t, 1, r.Attempts)
	require.Contains(t, r.Error, "550")
	require.Nil(t, r.SentAt)
	require.Empty(t, mp.Messages(t))

	logs := b.logs.String()
	require.Contains(t, logs, "level=ERROR")
	require.Contains(t, logs, "email failed permanently")
	require.Contains(t, logs, "j…@example.com")
	require.NotContains(t, logs, "jenny.rosen")
	require.NotContains(t, logs, "360.00", "no body in the logs")
	require.GreaterOrEqual(t, emailsCounted(t, "payment_receipt", "failed"), 1.0)
}

// emailsCounted reads paygate_emails_total{kind,status} (shared by every
// test in the binary: assert lower bounds only).
func emailsCounted(t *testing.T, kind, status string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(jobs.EmailCollector()))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "paygate_emails_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["status"] == status {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestEmailNoRecipientIsSkipped: nothing to send to is recorded, with the
// reason, and gets no job.
func TestEmailNoRecipientIsSkipped(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	ctx := context.Background()
	require.True(t, b.enqueue(t, receipt("pi_none", "")))
	require.True(t, b.enqueue(t, receipt("pi_bad", "not an address")))
	require.False(t, b.enqueue(t, receipt("pi_none", "")), "the intent is recorded; a later copy without an address changes nothing")
	var created bool
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		created, err = jobs.EnqueuePoisonAlertTx(ctx, tx, b.client.River, "", jobs.PoisonAlert{Provider: "stripe", EventID: "evt_1", Error: "x"})
		return err
	}))
	require.True(t, created)

	for _, c := range []struct {
		kind   jobs.EmailKind
		id     string
		reason string
	}{
		{jobs.EmailPaymentReceipt, "pi_none", "no receipt_email or billing email"},
		{jobs.EmailPaymentReceipt, "pi_bad", "not an email address"},
		{jobs.EmailPoisonAlert, "stripe/evt_1", "PAYGATE_OPS_EMAIL is not set"},
	} {
		r, err := jobs.GetEmail(ctx, b.pool, c.kind, c.id)
		require.NoError(t, err)
		require.Equal(t, jobs.EmailSkipped, r.Status, c.id)
		require.Contains(t, r.Error, c.reason, c.id)
		require.Empty(t, r.Recipient)
	}
	require.Empty(t, b.jobStates(t))

	// An address learnt after the intent was skipped sends it after all,
	// once.
	require.True(t, b.enqueue(t, receipt("pi_late", "")))
	require.True(t, b.enqueue(t, receipt("pi_late", "late@example.com")), "an address learnt later sends the email after all")
	require.False(t, b.enqueue(t, receipt("pi_late", "other@example.com")), "once on its way, a later copy changes nothing")
	r, err := jobs.GetEmail(ctx, b.pool, jobs.EmailPaymentReceipt, "pi_late")
	require.NoError(t, err)
	require.Equal(t, jobs.EmailPending, r.Status)
	require.Equal(t, "late@example.com", r.Recipient)
	require.Empty(t, r.Error)
	require.Len(t, b.jobStates(t), 1)
}

// TestEmailWithoutSMTPIsSkipped: no PAYGATE_SMTP_URL: recorded as skipped
// with a log line when the job runs, never silently lost.
func TestEmailWithoutSMTPIsSkipped(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	require.True(t, b.enqueue(t, receipt("pi_nosmtp", "a@example.com")))
	b.start(t)
	r := b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_nosmtp", jobs.EmailSkipped)
	b.waitJobStates(t, "completed")
	require.Contains(t, r.Error, "PAYGATE_SMTP_URL")
	require.Contains(t, b.logs.String(), "email skipped")
}

// TestEmailRendering: each kind's subject and bodies, with amounts shown
// per currency, and a Message-ID derived from the outbox key.
func TestEmailRendering(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	b := setupEmail(t, mp.SMTPURL())
	emails := []jobs.Email{
		{Kind: jobs.EmailPaymentReceipt, ObjectID: "pi_usd", PaymentID: "pi_usd", Recipient: "a@example.com", Amount: "360.00", Currency: "usd"},
		{Kind: jobs.EmailPaymentReceipt, ObjectID: "pi_jpy", PaymentID: "pi_jpy", Recipient: "a@example.com", Amount: "1000", Currency: "jpy"},
		{Kind: jobs.EmailRefundConfirmation, ObjectID: "re_kwd", PaymentID: "pi_kwd", Recipient: "a@example.com", Amount: "1.234", Currency: "kwd"},
		{Kind: jobs.EmailDisputeAlert, ObjectID: "du_1", PaymentID: "pi_usd", Recipient: "ops@example.com", Amount: "360.00", Currency: "usd",
			Reason: "fraudulent <script>", Provider: "stripe", EventID: "evt_d", EventType: "charge.dispute.created"},
		{Kind: jobs.EmailPoisonAlert, ObjectID: "stripe/evt_p", Recipient: "ops@example.com",
			Reason: "currency differs from the charge", Provider: "stripe", EventID: "evt_p", EventType: "charge.refunded"},
		{Kind: jobs.EmailReconciliationAlert, ObjectID: "41", Recipient: "finance@example.com",
			Reason: "provider API: <timeout>", Date: "2025-03-14", RunStatus: "failed"},
		{Kind: jobs.EmailReconciliationAlert, ObjectID: "42", Recipient: "finance@example.com",
			Reason: "amount_mismatch: 1, missing_in_ledger: 2", Date: "2025-03-14", RunStatus: "completed"},
		{Kind: jobs.EmailReconciliationAlert, ObjectID: "43", Recipient: "finance@example.com",
			Reason: "amount_mismatch: 1", Provider: "adyen", Batch: "12", RunStatus: "completed"},
		{Kind: jobs.EmailMissedEvents, ObjectID: "stripe/1741939200-1741942800", Recipient: "ops@example.com", Provider: "stripe",
			Missed: &jobs.MissedEvents{Count: 3, Known: 97, Trigger: "schedule",
				First: jobs.EmailEvent{ID: "evt_first", Type: "payment_intent.succeeded", Created: time.Date(2025, 3, 14, 8, 1, 2, 0, time.UTC)},
				Last:  jobs.EmailEvent{ID: "evt_last", Type: "charge.refunded", Created: time.Date(2025, 3, 14, 8, 50, 0, 0, time.UTC)},
				From:  time.Date(2025, 3, 14, 8, 0, 0, 0, time.UTC), To: time.Date(2025, 3, 14, 9, 0, 0, 0, time.UTC)}},
		{Kind: jobs.EmailSweepFailing, ObjectID: "stripe/1741939200", Recipient: "ops@example.com", Provider: "stripe",
			Reason: "failing since 2025-03-14T08:00:00Z: provider API: list events: <502>"},
	}
	for _, e := range emails {
		require.True(t, b.enqueue(t, e))
	}
	b.start(t)
	for _, e := range emails {
		b.waitStatus(t, e.Kind, e.ObjectID, jobs.EmailSent)
	}
	byID := map[string]mailpit.Detail{}
	for _, m := range mp.WaitForMessages(t, len(emails)) {
		byID[m.MessageID] = mp.Get(t, m.ID)
	}
	require.Len(t, byID, len(emails))

	for _, c := range []struct {
		messageID, subject string
		text, html         []string
	}{
		{"payment_receipt.pi_usd@paygate", "Receipt for your payment of $360.00",
			[]string{"Amount paid:  $360.00", "pi_usd", "Reference payment_receipt.pi_usd@paygate"}, []string{"<strong>$360.00</strong>"}},
		{"payment_receipt.pi_jpy@paygate", "Receipt for your payment of ¥1000", []string{"¥1000"}, []string{"¥1000"}},
		{"refund_confirmation.re_kwd@paygate", "Your refund of KWD 1.234",
			[]string{"Amount refunded:  KWD 1.234", "re_kwd", "pi_kwd"}, []string{"KWD 1.234"}},
		{"dispute_alert.du_1@paygate", "[paygate] Dispute du_1 on payment pi_usd: $360.00",
			[]string{"Reason:    fraudulent <script>", "stripe evt_d (charge.dispute.created)"}, []string{"fraudulent &lt;script&gt;"}},
		{"poison_alert.stripe/evt_p@paygate", "[paygate] Event evt_p is poison (charge.refunded)",
			[]string{"Error:     currency differs from the charge", "POST /v1/ops/events/stripe/evt_p/replay"}, []string{"evt_p"}},
		{"reconciliation_alert.41@paygate", "[paygate] Reconciliation of 2025-03-14 failed (run 41)",
			[]string{"Error:     provider API: <timeout>", "GET  /v1/reconciliation/runs/41", `{"date": "2025-03-14"}`},
			[]string{"provider API: &lt;timeout&gt;"}},
		{"reconciliation_alert.42@paygate", "[paygate] Reconciliation of 2025-03-14 has exceptions (run 42)",
			[]string{"Items:     amount_mismatch: 1, missing_in_ledger: 2", "/v1/reconciliation/runs/42/items.csv"},
			[]string{"amount_mismatch: 1, missing_in_ledger: 2"}},
		{"reconciliation_alert.43@paygate", "[paygate] Reconciliation of adyen settlement batch 12 has exceptions (run 43)",
			[]string{"Batch:     adyen 12", `POST /v1/reconciliation/runs {"provider": "adyen", "batch": 12}`},
			[]string{"adyen 12"}},
		{"missed_events.stripe/1741939200-1741942800@paygate", "[paygate] 3 stripe events never arrived by webhook",
			[]string{"Found:    3 missed, 97 already in paygate", "Window:   events created 2025-03-14 08:00:00 UTC to 2025-03-14 09:00:00 UTC",
				"First:    evt_first (payment_intent.succeeded), created 2025-03-14 08:01:02 UTC",
				"Last:     evt_last (charge.refunded), created 2025-03-14 08:50:00 UTC",
				"PAYGATE_STRIPE_WEBHOOK_SECRETS", "disabled at stripe"},
			[]string{"<code>evt_first</code>", "Likely cause"}},
		{"sweep_failing.stripe/1741939200@paygate", "[paygate] The sweep of stripe's events list has failed for an hour",
			[]string{"Last error: failing since 2025-03-14T08:00:00Z: provider API: list events: <502>"},
			[]string{"provider API: list events: &lt;502&gt;"}},
	} {
		d, ok := byID[c.messageID]
		require.True(t, ok, "no message with Message-ID %s", c.messageID)
		require.Equal(t, c.subject, d.Subject)
		require.Equal(t, []string{"<" + c.messageID + ">"}, d.Headers["Message-Id"])
		for _, s := range c.text {
			require.Contains(t, d.Text, s, c.messageID)
		}
		for _, s := range c.html {
			require.Contains(t, d.HTML, s, c.messageID)
		}
		require.NotContains(t, d.HTML, "<script>", "html/template escapes")
	}
}

// TestEmailResendAfterCrashKeepsMessageID: the commit that marks the row
// sent fails once after the SMTP server accepted the message (as a crash
// there would), so the job retries and sends again: at-least-once, with
// the same Message-ID, which a downstream that de-duplicates by it (mailpit
// with --ignore-duplicate-ids here) recognises.
func TestEmailResendAfterCrashKeepsMessageID(t *testing.T) {
	t.Parallel()
	for _, dedupe := range []bool{false, true} {
		t.Run(fmt.Sprintf("downstream dedupe %v", dedupe), func(t *testing.T) {
			t.Parallel()
			var args []string
			if dedupe {
				args = []string{"--ignore-duplicate-ids"}
			}
			mp := mailpit.StartWithOpts(t, &mailpit.Opts{Args: args})
			b := setupEmail(t, mp.SMTPURL())
			failFirstSent(t, b.pool)

			require.True(t, b.enqueue(t, receipt("pi_crash", "a@example.com")))
			b.start(t)
			r := b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_crash", jobs.EmailSent)
			b.waitJobStates(t, "completed")
			require.Equal(t, "payment_receipt.pi_crash@paygate", r.MessageID)

			if dedupe {
				msgs := mp.Messages(t)
				require.Len(t, msgs, 1, "a downstream that knows the Message-ID keeps one")
				return
			}
			msgs := mp.WaitForMessages(t, 2)
			require.Len(t, msgs, 2, "SMTP is at-least-once: the crash window sends twice")
			for _, m := range msgs {
				require.Equal(t, r.MessageID, m.MessageID)
				require.Equal(t, msgs[0].Subject, m.Subject)
			}
		})
	}
}

// TestEmailSentRowIsNotSentAgain: a second job for a row already sent (a
// rescued job, a manual re-run) completes without sending.
func TestEmailSentRowIsNotSentAgain(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	b := setupEmail(t, mp.SMTPURL())
	ctx := context.Background()
	require.True(t, b.enqueue(t, receipt("pi_again", "a@example.com")))
	b.start(t)
	b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_again", jobs.EmailSent)
	b.waitJobStates(t, "completed")

	var id int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM email_outbox WHERE object_id = 'pi_again'`).Scan(&id))
	_, err := b.client.River.Insert(ctx, jobs.SendEmailArgs{OutboxID: id}, nil)
	require.NoError(t, err)
	b.waitJobStates(t, "completed", "completed")
	require.Len(t, mp.Messages(t), 1)
}

func TestEnqueueEmailTxRejectsMalformed(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	ok := receipt("pi_1", "a@example.com")
	for name, mutate := range map[string]func(*jobs.Email){
		"unknown kind":        func(e *jobs.Email) { e.Kind = "newsletter" },
		"no object id":        func(e *jobs.Email) { e.ObjectID = " " },
		"float amount":        func(e *jobs.Email) { e.Amount = "3.6e2" },
		"negative amount":     func(e *jobs.Email) { e.Amount = "-1.00" },
		"amount, no currency": func(e *jobs.Email) { e.Currency = "" },
		"uppercase currency":  func(e *jobs.Email) { e.Currency = "USD" },
		"receipt, no amount":  func(e *jobs.Email) { e.Amount, e.Currency = "", "" },
		"missed events, no findings": func(e *jobs.Email) {
			*e = jobs.Email{Kind: jobs.EmailMissedEvents, ObjectID: "stripe/1-2", Recipient: "ops@example.com"}
		},
		"findings, not missed events": func(e *jobs.Email) { e.Missed = &jobs.MissedEvents{Count: 1} },
	} {
		e := ok
		mutate(&e)
		err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
			_, err := jobs.EnqueueEmailTx(context.Background(), tx, b.client.River, e)
			return err
		})
		require.ErrorIs(t, err, jobs.ErrInvalidEmail, name)
	}
	require.Zero(t, b.outboxCount(t))
}

func TestEmailsForPayment(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	ctx := context.Background()
	require.True(t, b.enqueue(t, receipt("pi_1", "a@example.com")))
	require.True(t, b.enqueue(t, jobs.Email{Kind: jobs.EmailRefundConfirmation, ObjectID: "re_1", PaymentID: "pi_1",
		Recipient: "a@example.com", Amount: "10.00", Currency: "usd"}))
	require.True(t, b.enqueue(t, jobs.Email{Kind: jobs.EmailDisputeAlert, ObjectID: "du_1", PaymentID: "pi_1",
		Amount: "360.00", Currency: "usd"}))
	require.True(t, b.enqueue(t, receipt("pi_2", "b@example.com")))

	got, err := jobs.EmailsForPayment(ctx, b.pool, "pi_1")
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, []jobs.EmailKind{jobs.EmailPaymentReceipt, jobs.EmailRefundConfirmation, jobs.EmailDisputeAlert},
		[]jobs.EmailKind{got[0].Kind, got[1].Kind, got[2].Kind})
	require.Equal(t, "re_1", got[1].ObjectID)
	require.Equal(t, jobs.EmailPending, got[0].Status)
	require.Equal(t, jobs.EmailSkipped, got[2].Status)

	raw, err := json.Marshal(got[0])
	require.NoError(t, err)
	var shape map[string]any
	require.NoError(t, json.Unmarshal(raw, &shape))
	for _, k := range []string{"kind", "object_id", "status", "recipient", "created_at", "sent_at", "attempts", "message_id"} {
		require.Contains(t, shape, k)
	}
	require.Nil(t, shape["sent_at"])

	none, err := jobs.EmailsForPayment(ctx, b.pool, "pi_none")
	require.NoError(t, err)
	require.NotNil(t, none)
	raw, _ = json.Marshal(none)
	require.Equal(t, "[]", string(raw))
}

func TestEmailMessageID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "payment_receipt.pi_123@paygate", jobs.EmailMessageID(jobs.EmailPaymentReceipt, "pi_123"))
	require.Equal(t, "poison_alert.stripe/evt_1@paygate", jobs.EmailMessageID(jobs.EmailPoisonAlert, "stripe/evt_1"))
	require.Equal(t, "payment_receipt.a=2Eb=3Dc=20=3E@paygate", jobs.EmailMessageID(jobs.EmailPaymentReceipt, "a.b=c >"))
	// One-to-one: ids that differ give Message-IDs that differ.
	seen := map[string]string{}
	for _, id := range []string{"a.b", "a=2Eb", "a b", "a=20b", "a..b", "ab", "a/b", "a:b", "a=3Ab"} {
		m := jobs.EmailMessageID(jobs.EmailPaymentReceipt, id)
		require.NotContains(t, m, " ")
		require.False(t, strings.Contains(m, ".."), m)
		prev, dup := seen[m]
		require.False(t, dup, "%q and %q share %s", prev, id, m)
		seen[m] = id
	}
}

func TestFormatAmount(t *testing.T) {
	t.Parallel()
	for _, c := range [][3]string{
		{"360.00", "usd", "$360.00"},
		{"1000", "jpy", "¥1000"},
		{"1.234", "kwd", "KWD 1.234"},
		{"12.50", "eur", "€12.50"},
		{"0.99", "gbp", "£0.99"},
		{"100.00", "cad", "CAD 100.00"},
	} {
		require.Equal(t, c[2], jobs.FormatAmount(c[0], c[1]))
	}
}

// emailingArgs stands for process_event in TestEnqueueEmailTxInsideAWorker.
type emailingArgs struct {
	PaymentID string `json:"payment_id"`
}

func (emailingArgs) Kind() string { return "test_emailing" }

// emailingWorker records a receipt the way process_event does: in its own
// transaction, with the River client taken from the worker's context.
type emailingWorker struct {
	river.WorkerDefaults[emailingArgs]
	pool *pgxpool.Pool
}

func (w *emailingWorker) Work(ctx context.Context, job *river.Job[emailingArgs]) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		_, err := jobs.EnqueueEmailTx(ctx, tx, nil, receipt(job.Args.PaymentID, "a@example.com"))
		return err
	})
}

func TestEnqueueEmailTxInsideAWorker(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	b := setupEmailWith(t, mp.SMTPURL(), func(pool *pgxpool.Pool, ws *river.Workers) {
		river.AddWorker(ws, &emailingWorker{pool: pool})
	})
	ctx := context.Background()

	// Outside a worker there is no client to fall back on.
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := jobs.EnqueueEmailTx(ctx, tx, nil, receipt("pi_norc", "a@example.com"))
		return err
	})
	require.ErrorContains(t, err, "no River client")
	require.Zero(t, b.outboxCount(t))

	for range 3 {
		_, err := b.client.River.Insert(ctx, emailingArgs{PaymentID: "pi_worker"}, nil)
		require.NoError(t, err)
	}
	b.start(t)
	b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_worker", jobs.EmailSent)
	b.waitJobStates(t, "completed")
	require.Len(t, mp.Messages(t), 1)
}

// TestEmailOutOfAttemptsFails: transient errors until the last attempt
// leave the row failed (with the error), not pending forever.
func TestEmailOutOfAttemptsFails(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, fmt.Sprintf("smtp://127.0.0.1:%d", freeport.MustPort(t)))
	require.True(t, b.enqueue(t, receipt("pi_exhausted", "a@example.com")))
	var maxAttempts int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT max_attempts FROM river_job WHERE kind = 'send_email'`).Scan(&maxAttempts))
	require.Equal(t, jobs.EmailMaxAttempts, maxAttempts)
	_, err := b.pool.Exec(context.Background(), `UPDATE river_job SET max_attempts = 2 WHERE kind = 'send_email'`)
	require.NoError(t, err)
	b.start(t)

	r := b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_exhausted", jobs.EmailFailed)
	b.waitJobStates(t, "discarded")
	require.Equal(t, 2, r.Attempts)
	require.Contains(t, r.Error, "refused")
	require.Contains(t, b.logs.String(), "email failed: out of attempts")
}

// failFirstSent makes the first write that marks an email sent fail, as a
// crash between the SMTP server's acceptance and the commit would; every
// later one passes (nextval is not transactional).
func failFirstSent(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		CREATE SEQUENCE crash_once;
		CREATE FUNCTION crash_once() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.status = 'sent' AND nextval('crash_once') = 1 THEN
				RAISE EXCEPTION 'simulated crash between SMTP acceptance and commit';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER crash_once BEFORE UPDATE ON email_outbox FOR EACH ROW EXECUTE FUNCTION crash_once();`)
	require.NoError(t, err)
}
