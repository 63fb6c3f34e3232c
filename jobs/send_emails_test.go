package jobs_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/mailpit"
	"github.com/paygate/paygate/jobs"
)

// enqueueAll records emails in one call of EnqueueEmailsTx, in a
// transaction of its own, and returns their outbox ids in order.
func (b *emailBundle) enqueueAll(t *testing.T, emails ...jobs.Email) []int64 {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := jobs.EnqueueEmailsTx(ctx, tx, b.client.River, emails)
		return err
	}))
	ids := make([]int64, len(emails))
	for i, e := range emails {
		ids[i] = b.outboxID(t, e.Kind, e.ObjectID)
	}
	return ids
}

// kindStates lists the states of the jobs of kind, by job id.
func (b *emailBundle) kindStates(t *testing.T, kind string) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT state::text FROM river_job WHERE kind = $1 ORDER BY id`, kind)
	require.NoError(t, err)
	states, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return states
}

func (b *emailBundle) waitKindStates(t *testing.T, kind string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for fmt.Sprint(b.kindStates(t, kind)) != fmt.Sprint(want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s jobs %v, want %v\nlogs:\n%s", kind, b.kindStates(t, kind), want, b.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sendEmailJobsOf counts the send_email jobs of outbox row id.
func (b *emailBundle) sendEmailJobsOf(t *testing.T, id int64) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE kind = 'send_email' AND (args->>'outbox_id')::bigint = $1`, id).Scan(&n))
	return n
}

func messageIDsOf(t *testing.T, mp *mailpit.Server) []string {
	t.Helper()
	var out []string
	for _, m := range mp.Messages(t) {
		out = append(out, m.To[0].Address+" "+m.MessageID)
	}
	sort.Strings(out)
	return out
}

func receipts(prefix string, n int) []jobs.Email {
	out := make([]jobs.Email, n)
	for i := range out {
		id := fmt.Sprintf("%s_%d", prefix, i)
		out[i] = receipt(id, id+"@example.com")
	}
	return out
}

// TestSendEmailsBatch: the emails of one call go out with one send_emails
// job, each delivered once, each row sent after one attempt, with one
// Info line for the batch; the job run again sends nothing.
func TestSendEmailsBatch(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	b := setupEmail(t, mp.SMTPURL())
	ctx := context.Background()
	emails := receipts("pi_batch", 5)
	ids := b.enqueueAll(t, emails...)
	require.Empty(t, b.jobStates(t), "no send_email job")
	require.Equal(t, []string{"available"}, b.kindStates(t, "send_emails"))

	b.start(t)
	var want []string
	for _, e := range emails {
		r := b.waitStatus(t, e.Kind, e.ObjectID, jobs.EmailSent)
		require.Equal(t, 1, r.Attempts)
		require.NotNil(t, r.SentAt)
		require.Empty(t, r.Error)
		want = append(want, e.Recipient+" "+jobs.EmailMessageID(e.Kind, e.ObjectID))
	}
	b.waitKindStates(t, "send_emails", "completed")
	sort.Strings(want)
	require.Equal(t, want, messageIDsOf(t, mp))

	logs := b.logs.String()
	require.Equal(t, 1, strings.Count(logs, `msg="email batch done"`), logs)
	require.Contains(t, logs, "sent=5")
	require.NotContains(t, logs, `msg="email sent"`, "one line per batch, not per email")
	require.NotContains(t, logs, "pi_batch_0@example.com")
	require.GreaterOrEqual(t, emailsCounted(t, "payment_receipt", "sent"), 5.0)

	// A second run of the same batch (a rescued job, a manual retry)
	// finds every row sent.
	_, err := b.client.River.Insert(ctx, jobs.SendEmailsArgs{OutboxIDs: ids}, nil)
	require.NoError(t, err)
	b.waitKindStates(t, "send_emails", "completed", "completed")
	require.Equal(t, want, messageIDsOf(t, mp))
	for _, e := range emails {
		r, err := jobs.GetEmail(ctx, b.pool, e.Kind, e.ObjectID)
		require.NoError(t, err)
		require.Equal(t, 1, r.Attempts)
	}
	require.Empty(t, b.jobStates(t))
}

// TestSendEmailsPermanentRejection: the SMTP server refuses one recipient
// for good; that row is failed with the reason, the others are sent, and
// nothing is handed off.
func TestSendEmailsPermanentRejection(t *testing.T) {
	t.Parallel()
	mp := mailpit.StartWithOpts(t, &mailpit.Opts{Args: []string{"--smtp-allowed-recipients", "^ok"}})
	b := setupEmail(t, mp.SMTPURL())
	emails := []jobs.Email{
		receipt("pi_ok1", "ok1@example.com"),
		receipt("pi_refused", "jenny.rosen@example.com"),
		receipt("pi_ok2", "ok2@example.com"),
	}
	ids := b.enqueueAll(t, emails...)
	b.start(t)

	r := b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_refused", jobs.EmailFailed)
	require.Equal(t, 1, r.Attempts)
	require.Contains(t, r.Error, "550")
	require.Nil(t, r.SentAt)
	b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_ok1", jobs.EmailSent)
	b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_ok2", jobs.EmailSent)
	b.waitKindStates(t, "send_emails", "completed")
	require.Equal(t, []string{
		"ok1@example.com " + jobs.EmailMessageID(jobs.EmailPaymentReceipt, "pi_ok1"),
		"ok2@example.com " + jobs.EmailMessageID(jobs.EmailPaymentReceipt, "pi_ok2"),
	}, messageIDsOf(t, mp))
	require.Zero(t, b.sendEmailJobsOf(t, ids[1]), "a permanent rejection is not retried")

	logs := b.logs.String()
	require.Contains(t, logs, "level=ERROR")
	require.Contains(t, logs, "email failed permanently")
	require.Contains(t, logs, "j…@example.com")
	require.NotContains(t, logs, "jenny.rosen")
	require.GreaterOrEqual(t, emailsCounted(t, "payment_receipt", "failed"), 1.0)
}

// TestSendEmailsTransientFailureHandedOffOnce: the SMTP server answers 451
// to one recipient; the others are sent, and that one is handed to a
// send_email job of its own with the attempt and error on its row. The
// batch run again hands it off no second time, sends nothing twice, and
// the email is delivered once the server takes it.
func TestSendEmailsTransientFailureHandedOffOnce(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	grey := startGreylister(t, mp.SMTPAddr(), "later@example.com")
	b := setupEmail(t, grey.url())
	ctx := context.Background()
	emails := []jobs.Email{
		receipt("pi_now1", "now1@example.com"),
		receipt("pi_later", "later@example.com"),
		receipt("pi_now2", "now2@example.com"),
	}
	ids := b.enqueueAll(t, emails...)
	b.start(t)

	b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_now1", jobs.EmailSent)
	b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_now2", jobs.EmailSent)
	b.waitKindStates(t, "send_emails", "completed")
	r, err := jobs.GetEmail(ctx, b.pool, jobs.EmailPaymentReceipt, "pi_later")
	require.NoError(t, err)
	require.Equal(t, jobs.EmailPending, r.Status)
	require.GreaterOrEqual(t, r.Attempts, 1)
	require.Contains(t, r.Error, "451")
	require.Equal(t, 1, b.sendEmailJobsOf(t, ids[1]))
	require.Zero(t, b.sendEmailJobsOf(t, ids[0])+b.sendEmailJobsOf(t, ids[2]))
	var maxAttempts int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT max_attempts FROM river_job WHERE kind = 'send_email'`).Scan(&maxAttempts))
	require.Equal(t, jobs.EmailMaxAttempts, maxAttempts)
	require.Contains(t, b.logs.String(), "will retry")

	_, err = b.client.River.Insert(ctx, jobs.SendEmailsArgs{OutboxIDs: ids}, nil)
	require.NoError(t, err)
	b.waitKindStates(t, "send_emails", "completed", "completed")
	require.Equal(t, 1, b.sendEmailJobsOf(t, ids[1]), "handed off once, however often the batch runs")
	require.Len(t, mp.Messages(t), 2)
	require.Contains(t, b.logs.String(), "sent=0 failed=0 skipped=0 handed_off=0 handed_off_before=1 settled_before=2",
		"the second run leaves the handed-off email to its own job")

	grey.allow()
	_, err = b.pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() WHERE kind = 'send_email' AND state IN ('retryable', 'scheduled')`)
	require.NoError(t, err)
	r = b.waitStatus(t, jobs.EmailPaymentReceipt, "pi_later", jobs.EmailSent)
	require.GreaterOrEqual(t, r.Attempts, 2)
	require.Empty(t, r.Error)
	b.waitJobStates(t, "completed")
	var want []string
	for _, e := range emails {
		want = append(want, e.Recipient+" "+jobs.EmailMessageID(e.Kind, e.ObjectID))
	}
	sort.Strings(want)
	require.Equal(t, want, messageIDsOf(t, mp))
}

// TestSendEmailsSMTPDownHandsOffTheRest: nothing listens on the SMTP port;
// the batch tries its first email only, hands every email off to a
// send_email job of its own (the others untried, with the reason), and
// once the server is up each is delivered once.
func TestSendEmailsSMTPDownHandsOffTheRest(t *testing.T) {
	t.Parallel()
	port := freeport.MustPort(t)
	b := setupEmail(t, fmt.Sprintf("smtp://127.0.0.1:%d", port))
	ctx := context.Background()
	emails := receipts("pi_down", 3)
	ids := b.enqueueAll(t, emails...)
	b.start(t)

	b.waitKindStates(t, "send_emails", "completed")
	for i, e := range emails {
		r, err := jobs.GetEmail(ctx, b.pool, e.Kind, e.ObjectID)
		require.NoError(t, err)
		require.Equal(t, jobs.EmailPending, r.Status)
		require.Equal(t, 1, b.sendEmailJobsOf(t, ids[i]), e.ObjectID)
		if i == 0 {
			require.Contains(t, r.Error, "refused")
			continue
		}
		require.Contains(t, r.Error, "not tried: the SMTP server failed an earlier email of its batch")
	}

	mp := mailpit.StartWithOpts(t, &mailpit.Opts{SMTPPort: port})
	_, err := b.pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() WHERE kind = 'send_email' AND state IN ('retryable', 'scheduled')`)
	require.NoError(t, err)
	var want []string
	for _, e := range emails {
		b.waitStatus(t, e.Kind, e.ObjectID, jobs.EmailSent)
		want = append(want, e.Recipient+" "+jobs.EmailMessageID(e.Kind, e.ObjectID))
	}
	sort.Strings(want)
	require.Equal(t, want, messageIDsOf(t, mp))
}

// TestSendEmailsWithoutSMTPAreSkipped: no PAYGATE_SMTP_URL: every row of
// the batch is skipped with the reason, with one warning for the batch.
func TestSendEmailsWithoutSMTPAreSkipped(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	emails := receipts("pi_nosmtp", 3)
	b.enqueueAll(t, emails...)
	b.start(t)
	for _, e := range emails {
		r := b.waitStatus(t, e.Kind, e.ObjectID, jobs.EmailSkipped)
		require.Contains(t, r.Error, "PAYGATE_SMTP_URL")
		require.Zero(t, r.Attempts)
	}
	b.waitKindStates(t, "send_emails", "completed")
	logs := b.logs.String()
	require.Equal(t, 1, strings.Count(logs, "emails skipped: PAYGATE_SMTP_URL is empty"), logs)
	require.Contains(t, logs, "skipped=3")
}

// TestSendEmailsResendAfterCrashKeepsMessageIDs: the write that marks the
// batch's emails sent fails once after the server accepted them (as a
// crash there would); the job runs again and sends them again, under the
// same Message-IDs, and every row ends sent.
func TestSendEmailsResendAfterCrashKeepsMessageIDs(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	b := setupEmail(t, mp.SMTPURL())
	failFirstSent(t, b.pool)
	emails := receipts("pi_crash", 2)
	b.enqueueAll(t, emails...)
	b.start(t)

	for _, e := range emails {
		r := b.waitStatus(t, e.Kind, e.ObjectID, jobs.EmailSent)
		require.Equal(t, 1, r.Attempts)
	}
	b.waitKindStates(t, "send_emails", "completed")
	msgs := mp.WaitForMessages(t, 4)
	count := map[string]int{}
	for _, m := range msgs {
		count[m.MessageID]++
	}
	require.Equal(t, map[string]int{
		jobs.EmailMessageID(jobs.EmailPaymentReceipt, "pi_crash_0"): 2,
		jobs.EmailMessageID(jobs.EmailPaymentReceipt, "pi_crash_1"): 2,
	}, count, "SMTP is at-least-once: the crash window resends, under the same Message-ID")
}

// TestSendEmailsMarksSentAsItGoes: with a slow SMTP server, the emails a
// batch sent first are marked sent while it still sends the others, so a
// crash resends only the last second's.
func TestSendEmailsMarksSentAsItGoes(t *testing.T) {
	t.Parallel()
	mp := mailpit.Start(t)
	slow := startSlowGreylister(t, mp.SMTPAddr(), "", 100*time.Millisecond)
	b := setupEmail(t, slow.url())
	ctx := context.Background()
	emails := receipts("pi_slow", 20)
	b.enqueueAll(t, emails...)
	b.start(t)

	first := emails[0]
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := jobs.GetEmail(ctx, b.pool, first.Kind, first.ObjectID)
		require.NoError(t, err)
		states := b.kindStates(t, "send_emails")
		if r.Status == jobs.EmailSent {
			require.Equal(t, []string{"running"}, states, "the first email is marked sent before the batch ends")
			break
		}
		require.True(t, time.Now().Before(deadline), "first email never sent\nlogs:\n%s", b.logs)
		time.Sleep(10 * time.Millisecond)
	}
	for _, e := range emails {
		r := b.waitStatus(t, e.Kind, e.ObjectID, jobs.EmailSent)
		require.Equal(t, 1, r.Attempts)
	}
	b.waitKindStates(t, "send_emails", "completed")
	require.Len(t, mp.Messages(t), len(emails))
}

// TestEnqueueEmailsTxSplitsLargeBatches: more than MaxEmailsPerJob new
// emails in one call go to several send_emails jobs of even size, each
// row in exactly one.
func TestEnqueueEmailsTxSplitsLargeBatches(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	ctx := context.Background()
	n := 2*jobs.MaxEmailsPerJob + 1
	b.enqueueAll(t, receipts("pi_many", n)...)

	rows, err := b.pool.Query(ctx, `SELECT jsonb_array_length(args->'outbox_ids') FROM river_job WHERE kind = 'send_emails' ORDER BY id`)
	require.NoError(t, err)
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{n / 3, n / 3, n / 3}, sizes)
	require.Empty(t, b.jobStates(t))
	perRow := b.jobsPerOutboxRow(t)
	require.Len(t, perRow, n)
	for id, c := range perRow {
		require.Equal(t, 1, c, "outbox row %d", id)
	}
}

// TestSendEmailsTimeout: a batch's timeout grows with its emails, up to a
// bound.
func TestSendEmailsTimeout(t *testing.T) {
	t.Parallel()
	single, err := jobs.NewSendEmailWorker(nil, jobs.EmailConfig{Timeout: 5 * time.Second}, nil)
	require.NoError(t, err)
	w := jobs.NewSendEmailsWorker(single)
	timeout := func(n int) time.Duration {
		return w.Timeout(&river.Job[jobs.SendEmailsArgs]{Args: jobs.SendEmailsArgs{OutboxIDs: make([]int64, n)}})
	}
	require.Equal(t, single.Timeout(nil), timeout(0))
	require.Equal(t, single.Timeout(nil)+3*5*time.Second, timeout(3))
	require.Equal(t, 5*time.Minute, timeout(jobs.MaxEmailsPerJob))
}

// greylister stands between paygate and an SMTP server and answers 451 to
// RCPT TO for one address, as a greylisting server does; every other
// command and reply passes through as it is. With a delay, it greets each
// connection that much later, as a slow server does.
type greylister struct {
	ln       net.Listener
	upstream string
	delay    time.Duration
	mu       sync.Mutex
	grey     string // "" once allowed
}

func startGreylister(t *testing.T, upstream, grey string) *greylister {
	t.Helper()
	return startSlowGreylister(t, upstream, grey, 0)
}

func startSlowGreylister(t *testing.T, upstream, grey string, delay time.Duration) *greylister {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	g := &greylister{ln: ln, upstream: upstream, grey: grey, delay: delay}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go g.serve(conn)
		}
	}()
	return g
}

func (g *greylister) url() string { return "smtp://" + g.ln.Addr().String() }

func (g *greylister) allow() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.grey = ""
}

func (g *greylister) refuses(line string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grey != "" && strings.HasPrefix(strings.ToUpper(line), "RCPT TO:") &&
		strings.Contains(strings.ToLower(line), "<"+g.grey+">")
}

func (g *greylister) serve(client net.Conn) {
	defer client.Close()
	time.Sleep(g.delay)
	server, err := net.Dial("tcp", g.upstream)
	if err != nil {
		return
	}
	defer server.Close()
	var toClient sync.Mutex // replies from the server and our own
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				toClient.Lock()
				_, werr := client.Write(buf[:n])
				toClient.Unlock()
				if werr != nil {
					return
				}
			}
			if err != nil {
				client.Close()
				return
			}
		}
	}()
	r := bufio.NewReader(client)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err != io.EOF || line == "" {
				return
			}
		}
		if g.refuses(line) {
			toClient.Lock()
			_, err = io.WriteString(client, "451 4.7.1 Greylisted, please try again later\r\n")
			toClient.Unlock()
			if err != nil {
				return
			}
			continue
		}
		if _, err := io.WriteString(server, line); err != nil {
			return
		}
	}
}
