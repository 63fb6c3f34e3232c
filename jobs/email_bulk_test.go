package jobs_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/jobs"
)

// emailJobs lists the jobs that send emails, send_email and send_emails,
// as "<kind> <outbox ids> <queue> <max attempts> <priority> <state>", by
// job id.
func (b *emailBundle) emailJobs(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT format('%s %s %s %s %s %s', kind, coalesce(args->>'outbox_id', args->>'outbox_ids'), queue, max_attempts, priority, state)
		FROM river_job WHERE kind IN ('send_email', 'send_emails') ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// jobsPerOutboxRow counts, per outbox row, the send_email and send_emails
// jobs that name it.
func (b *emailBundle) jobsPerOutboxRow(t *testing.T) map[int64]int {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `
		SELECT o.id, count(j.id) FROM email_outbox o
		LEFT JOIN (
			SELECT id, (args->>'outbox_id')::bigint AS outbox_id FROM river_job WHERE kind = 'send_email'
			UNION ALL
			SELECT id, jsonb_array_elements_text(args->'outbox_ids')::bigint FROM river_job WHERE kind = 'send_emails'
		) j ON j.outbox_id = o.id
		GROUP BY o.id`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]int{}
	for rows.Next() {
		var id int64
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func (b *emailBundle) outboxID(t *testing.T, kind jobs.EmailKind, objectID string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT id FROM email_outbox WHERE kind = $1 AND object_id = $2`, kind, objectID).Scan(&id))
	return id
}

// TestEnqueueEmailsTx: one call records each new intent once (pending,
// or skipped with its reason and no job), leaves intents recorded before
// alone, records only the first of two copies, and sends its new pending
// intents with one send_emails job, on the queue and with the attempts
// of EnqueueEmailTx's send_email job.
func TestEnqueueEmailsTx(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	ctx := context.Background()
	require.True(t, b.enqueue(t, receipt("pi_old", "old@example.com")))

	dispute := jobs.Email{Kind: jobs.EmailDisputeAlert, ObjectID: "dp_1", PaymentID: "pi_9",
		Recipient: "Ops <ops@example.com>", Amount: "12.50", Currency: "eur", Reason: "fraudulent"}
	emails := []jobs.Email{
		receipt("pi_1", "a@example.com"),
		receipt("pi_2", ""),
		receipt("pi_3", "not an address"),
		receipt("pi_old", "new@example.com"),
		receipt("pi_1", "other@example.com"),
		dispute,
		receipt("  pi_4 ", "d@example.com"),
	}
	var created []bool
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		created, err = jobs.EnqueueEmailsTx(ctx, tx, b.client.River, emails)
		return err
	}))
	require.Equal(t, []bool{true, true, true, false, false, true, true}, created)
	require.Equal(t, 6, b.outboxCount(t))

	for _, c := range []struct {
		kind      jobs.EmailKind
		objectID  string
		status    jobs.EmailStatus
		recipient string
		error     string
	}{
		{jobs.EmailPaymentReceipt, "pi_old", jobs.EmailPending, "old@example.com", ""},
		{jobs.EmailPaymentReceipt, "pi_1", jobs.EmailPending, "a@example.com", ""},
		{jobs.EmailPaymentReceipt, "pi_2", jobs.EmailSkipped, "", "no recipient: the charge has no receipt_email or billing email"},
		{jobs.EmailPaymentReceipt, "pi_3", jobs.EmailSkipped, "", "recipient is not an email address"},
		{jobs.EmailDisputeAlert, "dp_1", jobs.EmailPending, "ops@example.com", ""},
		{jobs.EmailPaymentReceipt, "pi_4", jobs.EmailPending, "d@example.com", ""},
	} {
		r, err := jobs.GetEmail(ctx, b.pool, c.kind, c.objectID)
		require.NoError(t, err, c.objectID)
		require.Equal(t, c.status, r.Status, c.objectID)
		require.Equal(t, c.recipient, r.Recipient, c.objectID)
		require.Equal(t, c.error, r.Error, c.objectID)
		require.Equal(t, jobs.EmailMessageID(c.kind, c.objectID), r.MessageID, c.objectID)
	}
	var data, paymentID string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT data::text, payment_id FROM email_outbox WHERE object_id = 'dp_1'`).
		Scan(&data, &paymentID))
	require.JSONEq(t, `{"payment_id":"pi_9","amount":"12.50","currency":"eur","reason":"fraudulent"}`, data)
	require.Equal(t, "pi_9", paymentID)

	// The lone intent (pi_old) has its send_email job; the call's three
	// pending intents share one send_emails job, pointing at their rows.
	ids := []int64{
		b.outboxID(t, jobs.EmailPaymentReceipt, "pi_1"),
		b.outboxID(t, jobs.EmailDisputeAlert, "dp_1"),
		b.outboxID(t, jobs.EmailPaymentReceipt, "pi_4"),
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	require.Equal(t, []string{
		fmt.Sprintf("send_email %d %s %d 1 available", b.outboxID(t, jobs.EmailPaymentReceipt, "pi_old"), jobs.QueueEmail, jobs.EmailMaxAttempts),
		fmt.Sprintf("send_emails [%d, %d, %d] %s %d 1 available", ids[0], ids[1], ids[2], jobs.QueueEmail, jobs.EmailMaxAttempts),
	}, b.emailJobs(t))
}

// TestEnqueueEmailsTxEdges: no emails is no work; one invalid email fails
// the call, naming it, before anything is recorded; without a River client
// only a call with nothing to send succeeds.
func TestEnqueueEmailsTxEdges(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	ctx := context.Background()

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	created, err := jobs.EnqueueEmailsTx(ctx, tx, b.client.River, nil)
	require.NoError(t, err)
	require.Nil(t, created)

	bad := receipt("pi_bad", "a@example.com")
	bad.Amount = "3.6e2"
	_, err = jobs.EnqueueEmailsTx(ctx, tx, b.client.River, []jobs.Email{receipt("pi_1", "a@example.com"), bad})
	require.ErrorIs(t, err, jobs.ErrInvalidEmail)
	require.ErrorContains(t, err, "pi_bad")

	_, err = jobs.EnqueueEmailsTx(ctx, tx, nil, []jobs.Email{receipt("pi_2", ""), receipt("pi_1", "a@example.com")})
	require.ErrorContains(t, err, "no River client")
	require.NoError(t, tx.Rollback(ctx))

	tx, err = b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	created, err = jobs.EnqueueEmailsTx(ctx, tx, nil, []jobs.Email{receipt("pi_2", ""), receipt("pi_3", "nope")})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, created)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 2, b.outboxCount(t))
	require.Empty(t, b.jobStates(t))
}

// TestEnqueueEmailsTxOverlappingSetsDoNotDeadlock: transactions recording
// the same intents in opposite orders at once all commit, each intent is
// recorded by exactly one of them, and is named by exactly one job.
func TestEnqueueEmailsTxOverlappingSetsDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setupEmail(t, "")
	ctx := context.Background()
	const intents, txs = 40, 8
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fresh = map[string]int{}
		start = make(chan struct{})
	)
	for w := range txs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var emails []jobs.Email
			for i := range intents {
				j := i
				if w%2 == 1 {
					j = intents - 1 - i
				}
				emails = append(emails, receipt(fmt.Sprintf("pi_%02d", j), "a@example.com"))
			}
			<-start
			tx, err := b.pool.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer tx.Rollback(ctx)
			created, err := jobs.EnqueueEmailsTx(ctx, tx, b.client.River, emails)
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(5 * time.Millisecond) // hold the locks while others queue
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for i, c := range created {
				if c {
					fresh[emails[i].ObjectID]++
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Len(t, fresh, intents)
	for id, n := range fresh {
		require.Equal(t, 1, n, id)
	}
	require.Equal(t, intents, b.outboxCount(t))
	perRow := b.jobsPerOutboxRow(t)
	require.Len(t, perRow, intents)
	for id, n := range perRow {
		require.Equal(t, 1, n, "outbox row %d", id)
	}
}
