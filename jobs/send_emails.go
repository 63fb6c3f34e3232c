package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/mail"
)

// MaxEmailsPerJob bounds a send_emails job: more new emails in one call of
// EnqueueEmailsTx are split over several jobs, so that one job's run (and
// its timeout) stays bounded.
const MaxEmailsPerJob = 256

const (
	// maxSendEmailsTimeout caps a send_emails job's timeout, which also
	// delays the rescue of a job whose process died. A batch still sending
	// when it runs out hands its untried emails off rather than drop them.
	maxSendEmailsTimeout = 5 * time.Minute
	// markSentEvery is how often a running batch writes the outcomes it has
	// (sent, failed): a crash resends at most this much, with the same
	// Message-IDs, when the job runs again.
	markSentEvery = time.Second
	// handOffDelay is River's first retry after one failed attempt
	// (attempt⁴ seconds): an email handed off is tried again as a
	// send_email job of its own would have been.
	handOffDelay = time.Second
	// finishTimeout bounds the transaction that completes a batch, run
	// even when the job's own time is up.
	finishTimeout = 30 * time.Second
)

// SendEmailsArgs asks for several outbox rows to be sent by one job: one
// job row, written three times by River, instead of one per email. Like
// SendEmailArgs it carries only the rows' ids, never personal data.
type SendEmailsArgs struct {
	OutboxIDs []int64 `json:"outbox_ids"`
}

// Kind is stored in the database: never change it.
func (SendEmailsArgs) Kind() string { return "send_emails" }

// InsertOpts puts the batch on the email queue, like a single email.
func (SendEmailsArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueEmail, MaxAttempts: EmailMaxAttempts}
}

// emailJobs are the jobs that send the outbox rows ids: a lone email keeps
// its send_email job; more share send_emails jobs of at most
// MaxEmailsPerJob rows, split evenly.
func emailJobs(ids []int64) []river.InsertManyParams {
	if len(ids) == 1 {
		return []river.InsertManyParams{{Args: SendEmailArgs{OutboxID: ids[0]}}}
	}
	ids = slices.Sorted(slices.Values(ids))
	jobs := (len(ids) + MaxEmailsPerJob - 1) / MaxEmailsPerJob
	size := (len(ids) + jobs - 1) / jobs
	out := make([]river.InsertManyParams, 0, jobs)
	for chunk := range slices.Chunk(ids, size) {
		out = append(out, river.InsertManyParams{Args: SendEmailsArgs{OutboxIDs: chunk}})
	}
	return out
}

// handOffJob is the send_email job an email of a batch gets when it could
// not be sent at once: from then on it is retried, with backoff and up to
// EmailMaxAttempts, as any single email is. Unique by its outbox id, so a
// batch that runs again hands an email off once at most.
func handOffJob(id int64, now time.Time) river.InsertManyParams {
	return river.InsertManyParams{Args: SendEmailArgs{OutboxID: id}, InsertOpts: &river.InsertOpts{
		Queue: QueueEmail, MaxAttempts: EmailMaxAttempts, ScheduledAt: now.Add(handOffDelay),
		UniqueOpts: river.UniqueOpts{ByArgs: true},
	}}
}

// SendEmailsWorker sends a batch of email_outbox rows, one after another,
// with SendEmailWorker's sender, and keeps each email's guarantees (see
// SendEmailWorker): a row that is not pending is never sent again; every
// attempt carries the row's Message-ID; SMTP stays at-least-once.
//
// Outcomes, per email: accepted → sent, written within markSentEvery of
// the acceptance or with the job's completion, whichever comes first (a
// crash in between resends it, under the same Message-ID); a permanent
// rejection or a message that cannot be built → failed with the reason,
// the others carry on; a transient failure → the attempt and its error are
// kept on the row and the email is handed off to a send_email job of its
// own (handOffJob), inserted in the transaction that completes the batch.
// When the server gives no answer at all (or closes the session with 421),
// or the job runs out of time, the batch's remaining emails are handed off
// untried, with the reason on the row, rather than wait for the same
// failure one by one. No SMTP configured → every row skipped.
//
// A row that is pending with an attempt or an error was handed off by an
// earlier run of the same job: its own job has it, so a second run does
// not send it but only hands it off again, which the hand-off's
// uniqueness makes a no-op (or a new job, if an operator cancelled the
// first one).
type SendEmailsWorker struct {
	river.WorkerDefaults[SendEmailsArgs]
	email *SendEmailWorker // the sender, sender address, timeout and logger
}

// NewSendEmailsWorker returns the batch worker, sending with email's SMTP
// sender, sender address, per-email timeout and logger.
func NewSendEmailsWorker(email *SendEmailWorker) *SendEmailsWorker {
	return &SendEmailsWorker{email: email}
}

// Timeout leaves each email of the batch a full SMTP conversation, up to
// maxSendEmailsTimeout.
func (w *SendEmailsWorker) Timeout(job *river.Job[SendEmailsArgs]) time.Duration {
	perEmail := w.email.timeout
	return min(2*perEmail+15*time.Second+time.Duration(len(job.Args.OutboxIDs))*perEmail, maxSendEmailsTimeout)
}

// emailOutcome is what a batch writes to one outbox row.
type emailOutcome struct {
	row    outboxRow
	status EmailStatus // sent, failed or skipped; pending: handed off
	tried  bool        // an SMTP attempt was made: counted on the row
	reason string      // the row's last_error; empty when sent
}

// Work implements river.Worker.
func (w *SendEmailsWorker) Work(ctx context.Context, job *river.Job[SendEmailsArgs]) error {
	rows, missing, err := w.load(ctx, job.Args.OutboxIDs)
	if err != nil {
		return err
	}
	log := w.email.logger.With("job_id", job.ID, "attempt", job.Attempt)
	var (
		done      []emailOutcome // sent, failed, skipped
		marked    int            // done[:marked] is written
		handOff   []emailOutcome // to their own jobs, written with the completion
		handedOff []int64        // by an earlier run of this job
		settled   int            // not pending when loaded
		stopped   string         // why the rest of the batch is not tried
		lastMark  = time.Now()
	)
	stop := func(reason string) {
		stopped = reason
		log.WarnContext(ctx, "email batch stopped: its other emails go to jobs of their own untried", "reason", reason)
	}
	for _, row := range rows {
		if stopped == "" && ctx.Err() != nil {
			stop("its batch ran out of time")
		}
		switch {
		case row.Status != EmailPending:
			settled++ // sent, skipped or failed: a second run changes nothing
			continue
		case row.handedOff:
			handedOff = append(handedOff, row.ID)
			continue
		case w.email.sender == nil:
			done = append(done, emailOutcome{row: row, status: EmailSkipped, reason: noSMTPReason})
			continue
		case stopped != "":
			handOff = append(handOff, emailOutcome{row: row, status: EmailPending, reason: "not tried: " + stopped})
			continue
		}
		permanent, err := w.email.deliver(ctx, row)
		switch {
		case err == nil:
			done = append(done, emailOutcome{row: row, status: EmailSent, tried: true})
		case permanent:
			done = append(done, emailOutcome{row: row, status: EmailFailed, tried: true, reason: err.Error()})
			emailLog(log, row).ErrorContext(ctx, "email failed permanently", "error", err.Error())
		default:
			handOff = append(handOff, emailOutcome{row: row, status: EmailPending, tried: true, reason: err.Error()})
			emailLog(log, row).WarnContext(ctx, "email not sent, will retry in a job of its own", "error", err.Error())
			switch {
			case ctx.Err() != nil:
				stop("its batch ran out of time")
			case smtpServerDown(err):
				stop("the SMTP server failed an earlier email of its batch: " + err.Error())
			}
		}
		if len(done) > marked && time.Since(lastMark) >= markSentEvery && ctx.Err() == nil {
			// Written as the batch goes, so that a crash resends little;
			// a failed write is retried with the job's completion.
			if err := markEmailOutcomes(ctx, w.email.pool, done[marked:]); err != nil {
				log.WarnContext(ctx, "record email outcomes", "error", err.Error())
			} else {
				countEmailOutcomes(done[marked:])
				marked = len(done)
			}
			lastMark = time.Now()
		}
	}

	// Completing the batch must not depend on its time being left: the
	// emails it handed off would otherwise wait for the whole job to run
	// again.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := w.finishTx(fctx, job, slices.Concat(done[marked:], handOff), handedOff); err != nil {
		// The job runs again: rows written stay as they are, the rest is
		// tried again under the same Message-IDs.
		return err
	}
	countEmailOutcomes(done[marked:])
	countEmailOutcomes(handOff)

	counts := map[EmailStatus]int{}
	for _, o := range done {
		counts[o.status]++
	}
	if counts[EmailSkipped] > 0 {
		log.WarnContext(ctx, "emails skipped: PAYGATE_SMTP_URL is empty", "skipped", counts[EmailSkipped])
	}
	log.InfoContext(ctx, "email batch done", "emails", len(job.Args.OutboxIDs), "sent", counts[EmailSent],
		"failed", counts[EmailFailed], "skipped", counts[EmailSkipped], "handed_off", len(handOff),
		"handed_off_before", len(handedOff), "settled_before", settled, "missing", missing)
	return nil
}

// emailLog names one email of a batch in log lines: its key and a
// redacted recipient, never the address nor the body.
func emailLog(log *slog.Logger, row outboxRow) *slog.Logger {
	return log.With("kind", row.Kind, "object_id", row.ObjectID, "outbox_id", row.ID, "to", mail.Redact(row.Recipient))
}

const noSMTPReason = "not sent: no SMTP server configured (PAYGATE_SMTP_URL is empty)"

// smtpServerDown reports a failure that says nothing about the email
// itself: no answer from the server (refused, timed out, TLS) or a 421
// closing the session. The batch's next email would fare no better.
func smtpServerDown(err error) bool {
	var me *mail.Error
	return errors.As(err, &me) && (me.Code == 0 || me.Code == 421)
}

// load reads the batch's rows in one query, by id; missing counts ids
// without a row (rows and jobs commit together, so none should be).
func (w *SendEmailsWorker) load(ctx context.Context, ids []int64) (rows []outboxRow, missing int, err error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	res, err := w.email.pool.Query(ctx, `SELECT `+outboxRowColumns+`,
			status = 'pending' AND (attempts > 0 OR last_error IS NOT NULL)
		FROM email_outbox WHERE id = ANY($1) ORDER BY id`, ids)
	if err != nil {
		return nil, 0, fmt.Errorf("load %d email outbox rows: %w", len(ids), err)
	}
	defer res.Close()
	for res.Next() {
		var handedOff bool
		r, err := scanOutboxRow(res, &handedOff)
		if err != nil {
			return nil, 0, fmt.Errorf("load %d email outbox rows: %w", len(ids), err)
		}
		r.handedOff = handedOff
		rows = append(rows, r)
	}
	if err := res.Err(); err != nil {
		return nil, 0, fmt.Errorf("load %d email outbox rows: %w", len(ids), err)
	}
	return rows, len(ids) - len(rows), nil
}

// finishTx writes outcomes, inserts the hand-off jobs of the emails
// handed off now (pending outcomes) and before (handedOff), and completes
// the job, in one transaction: a crash leaves all as it was, and the job
// runs again.
func (w *SendEmailsWorker) finishTx(ctx context.Context, job *river.Job[SendEmailsArgs], outcomes []emailOutcome, handedOff []int64) error {
	slices.SortFunc(outcomes, func(a, b emailOutcome) int { return cmp.Compare(a.row.ID, b.row.ID) })
	now := time.Now()
	var handOffs []river.InsertManyParams
	for _, o := range outcomes {
		if o.status == EmailPending {
			handOffs = append(handOffs, handOffJob(o.row.ID, now))
		}
	}
	for _, id := range handedOff {
		handOffs = append(handOffs, handOffJob(id, now))
	}
	var rc *river.Client[pgx.Tx]
	if len(handOffs) > 0 {
		var err error
		if rc, err = river.ClientFromContextSafely[pgx.Tx](ctx); err != nil {
			return fmt.Errorf("hand off %d emails: no River client in the context: %w", len(handOffs), err)
		}
	}
	return pgx.BeginFunc(ctx, w.email.pool, func(tx pgx.Tx) error {
		if err := markEmailOutcomes(ctx, tx, outcomes); err != nil {
			return err
		}
		if len(handOffs) > 0 {
			if _, err := rc.InsertManyTx(ctx, tx, handOffs); err != nil {
				return fmt.Errorf("hand off %d emails: %w", len(handOffs), err)
			}
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete send_emails job: %w", err)
		}
		return nil
	})
}

// markEmailOutcomes writes outcomes in one statement, to rows still
// pending only: a row that a send_email job settled meanwhile keeps what
// that job wrote.
func markEmailOutcomes(ctx context.Context, q inbox.Querier, outcomes []emailOutcome) error {
	if len(outcomes) == 0 {
		return nil
	}
	ids := make([]int64, len(outcomes))
	statuses := make([]string, len(outcomes))
	tried := make([]bool, len(outcomes))
	reasons := make([]string, len(outcomes))
	for i, o := range outcomes {
		ids[i], statuses[i], tried[i], reasons[i] = o.row.ID, string(o.status), o.tried, o.reason
	}
	_, err := q.Exec(ctx, `
		UPDATE email_outbox o SET
			status     = u.status,
			attempts   = o.attempts + CASE WHEN u.tried THEN 1 ELSE 0 END,
			sent_at    = CASE WHEN u.status = 'sent' THEN now() END,
			last_error = nullif(u.reason, '')
		FROM unnest($1::bigint[], $2::text[], $3::bool[], $4::text[]) AS u (id, status, tried, reason)
		WHERE o.id = u.id AND o.status = 'pending'`, ids, statuses, tried, reasons)
	if err != nil {
		return fmt.Errorf("record %d email outcomes: %w", len(outcomes), err)
	}
	return nil
}

// countEmailOutcomes adds written outcomes to paygate_emails_total, as
// send_email counts them: a handed-off email that was tried is a retry.
func countEmailOutcomes(outcomes []emailOutcome) {
	for _, o := range outcomes {
		switch {
		case o.status != EmailPending:
			emailsTotal.WithLabelValues(string(o.row.Kind), string(o.status)).Inc()
		case o.tried:
			emailsTotal.WithLabelValues(string(o.row.Kind), "retry").Inc()
		}
	}
}
