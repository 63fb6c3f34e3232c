package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	netmail "net/mail"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/paygate/paygate/mail"
)

// DefaultEmailFrom is the sender address when PAYGATE_EMAIL_FROM is unset.
const DefaultEmailFrom = "paygate@localhost"

// EmailMaxAttempts is how many times one email is tried. River's backoff
// (attempt⁴ seconds) spreads twelve tries over about seventeen hours: an
// SMTP outage of an afternoon delays receipts, it does not lose them.
const EmailMaxAttempts = 12

// EmailConfig configures email delivery.
type EmailConfig struct {
	// SMTPURL is PAYGATE_SMTP_URL (smtp://host:port, smtps://user:pass@host:port).
	// Empty: no email leaves; each is recorded as skipped, with a log line.
	SMTPURL string
	// From is PAYGATE_EMAIL_FROM; default DefaultEmailFrom.
	From string
	// OpsEmail is PAYGATE_OPS_EMAIL, where dispute and poison alerts go.
	// Empty: alerts are recorded as skipped. The send_email worker does not
	// use it: whoever enqueues an alert passes it as the recipient.
	OpsEmail string
	// FinanceEmail is PAYGATE_FINANCE_EMAIL, where reconciliation alerts
	// go; empty: OpsEmail. Like OpsEmail, it is the enqueuer's to pass.
	FinanceEmail string
	// Timeout bounds connecting to the SMTP server and each command;
	// default mail.DefaultTimeout.
	Timeout time.Duration
}

// SendEmailArgs asks for one outbox row to be sent. It carries only the
// row's id: the recipient and amounts stay in email_outbox, so job rows
// (and River's UI) hold no personal data.
type SendEmailArgs struct {
	OutboxID int64 `json:"outbox_id"`
}

// Kind is stored in the database: never change it.
func (SendEmailArgs) Kind() string { return "send_email" }

// InsertOpts puts emails on their own queue, so that a slow SMTP server
// never holds back the ledger.
func (SendEmailArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueEmail, MaxAttempts: EmailMaxAttempts}
}

// SendEmailWorker sends one email_outbox row over SMTP and marks it sent
// in the same transaction that completes its job.
//
// What "once" means here: the outbox makes the intent unique (one row per
// kind and object, decided by the database, and one job to send it: its
// own, or a send_emails batch's, see SendEmailsWorker), but SMTP itself
// is at-least-once. If the process dies, or the commit fails, after the
// SMTP server accepted the message and before the row is marked sent, the
// job runs again and the message is sent again. Every attempt carries the
// same Message-ID (EmailMessageID, derived from the outbox key), so a
// resend is recognisable downstream as the same message. A sent row is
// never sent again.
//
// Outcomes: accepted → sent; a permanent 5xx rejection or a message that
// cannot be built → failed, job cancelled, an error log line (kind, object
// id, a redacted recipient: never the full address nor the body) and
// paygate_emails_total{status="failed"}; anything else (connection refused,
// timeout, 4xx) → the error is kept on the row and River retries with
// backoff, and after EmailMaxAttempts the row is failed. No SMTP configured
// → skipped, with a warning.
type SendEmailWorker struct {
	river.WorkerDefaults[SendEmailArgs]
	pool    *pgxpool.Pool
	sender  *mail.Sender // nil: no SMTP server configured
	from    string
	timeout time.Duration
	logger  *slog.Logger
}

// NewSendEmailWorker builds the worker from config.
//
// It fails with mail.ErrInvalidURL, or when From or OpsEmail is not an
// address.
func NewSendEmailWorker(pool *pgxpool.Pool, config EmailConfig, logger *slog.Logger) (*SendEmailWorker, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if config.From == "" {
		config.From = DefaultEmailFrom
	}
	if config.Timeout <= 0 {
		config.Timeout = mail.DefaultTimeout
	}
	if _, err := netmail.ParseAddress(config.From); err != nil {
		return nil, fmt.Errorf("PAYGATE_EMAIL_FROM %q is not an email address: %w", config.From, err)
	}
	if config.OpsEmail != "" {
		if _, err := netmail.ParseAddress(config.OpsEmail); err != nil {
			return nil, fmt.Errorf("PAYGATE_OPS_EMAIL is not an email address: %w", err)
		}
	}
	w := &SendEmailWorker{pool: pool, from: config.From, timeout: config.Timeout, logger: logger}
	if config.SMTPURL != "" {
		s, err := mail.New(mail.Config{URL: config.SMTPURL, Timeout: config.Timeout})
		if err != nil {
			return nil, fmt.Errorf("PAYGATE_SMTP_URL: %w", err)
		}
		w.sender = s
	}
	return w, nil
}

// Timeout leaves room for a full SMTP conversation at the configured
// timeout, whatever the client's default job timeout.
func (w *SendEmailWorker) Timeout(*river.Job[SendEmailArgs]) time.Duration {
	return 2*w.timeout + 15*time.Second
}

type outboxRow struct {
	ID        int64
	Kind      EmailKind
	ObjectID  string
	Recipient string
	Data      emailData
	Status    EmailStatus
	MessageID string
	// handedOff: pending, but an earlier run of its send_emails job handed
	// it off to a send_email job of its own (see SendEmailsWorker).
	handedOff bool
}

// Work implements river.Worker.
func (w *SendEmailWorker) Work(ctx context.Context, job *river.Job[SendEmailArgs]) error {
	row, err := w.load(ctx, job.Args.OutboxID)
	if errors.Is(err, ErrEmailNotFound) {
		// Rows and jobs commit together; a job without its row cannot come
		// from EnqueueEmailTx and no retry will make the row appear.
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	log := w.logger.With("kind", row.Kind, "object_id", row.ObjectID, "outbox_id", row.ID, "attempt", job.Attempt)
	if row.Status != EmailPending {
		return nil // already sent, skipped or failed: a second run of the job changes nothing
	}

	if w.sender == nil {
		if err := w.finishTx(ctx, job, row.ID, EmailSkipped, noSMTPReason); err != nil {
			return err
		}
		emailsTotal.WithLabelValues(string(row.Kind), string(EmailSkipped)).Inc()
		log.WarnContext(ctx, "email skipped: PAYGATE_SMTP_URL is empty")
		return nil
	}

	permanent, err := w.deliver(ctx, row)
	switch {
	case err == nil:
		if err := w.finishTx(ctx, job, row.ID, EmailSent, ""); err != nil {
			// The server has the message; the retry sends it again with
			// the same Message-ID (see the type's comment).
			return err
		}
		emailsTotal.WithLabelValues(string(row.Kind), string(EmailSent)).Inc()
		log.InfoContext(ctx, "email sent", "to", mail.Redact(row.Recipient), "message_id", row.MessageID)
		return nil
	case permanent:
		return w.fail(ctx, log, row, err)
	}

	exhausted := job.Attempt >= job.MaxAttempts
	status := EmailPending
	if exhausted {
		status = EmailFailed
	}
	if recErr := w.record(ctx, row.ID, status, err.Error()); recErr != nil {
		log.ErrorContext(ctx, "record email attempt", "error", recErr.Error())
	}
	if exhausted {
		emailsTotal.WithLabelValues(string(row.Kind), string(EmailFailed)).Inc()
		log.ErrorContext(ctx, "email failed: out of attempts", "to", mail.Redact(row.Recipient), "error", err.Error())
	} else {
		emailsTotal.WithLabelValues(string(row.Kind), "retry").Inc()
		log.WarnContext(ctx, "email not sent, will retry", "to", mail.Redact(row.Recipient), "error", err.Error())
	}
	return fmt.Errorf("send %s %s: %w", row.Kind, row.ObjectID, err)
}

// deliver renders row's email and hands it to the SMTP server, under the
// row's Message-ID. A nil error means the server accepted it; permanent
// reports a failure no retry can mend (a 5xx rejection, a message that
// cannot be built or rendered).
func (w *SendEmailWorker) deliver(ctx context.Context, row outboxRow) (permanent bool, err error) {
	msg, err := renderEmail(row.Kind, row.ObjectID, row.MessageID, row.Data)
	if err != nil {
		return true, err
	}
	err = w.sender.Send(ctx, mail.Message{
		From: w.from, To: row.Recipient, Subject: msg.Subject, Text: msg.Text, HTML: msg.HTML,
		MessageID: row.MessageID,
	})
	return errors.Is(err, mail.ErrRejected) || errors.Is(err, mail.ErrInvalidMessage), err
}

// fail records a permanent failure and cancels the job: retrying cannot
// help, and ops must see it.
func (w *SendEmailWorker) fail(ctx context.Context, log *slog.Logger, row outboxRow, cause error) error {
	if err := w.record(ctx, row.ID, EmailFailed, cause.Error()); err != nil {
		return fmt.Errorf("record failed email %s %s: %w", row.Kind, row.ObjectID, err)
	}
	emailsTotal.WithLabelValues(string(row.Kind), string(EmailFailed)).Inc()
	log.ErrorContext(ctx, "email failed permanently", "to", mail.Redact(row.Recipient), "error", cause.Error())
	return river.JobCancel(fmt.Errorf("send %s %s: %w", row.Kind, row.ObjectID, cause))
}

const outboxRowColumns = `id, kind, object_id, coalesce(recipient, ''), data, status, message_id`

// scanOutboxRow scans outboxRowColumns, then extra.
func scanOutboxRow(row pgx.Row, extra ...any) (outboxRow, error) {
	var r outboxRow
	var data []byte
	if err := row.Scan(append([]any{&r.ID, &r.Kind, &r.ObjectID, &r.Recipient, &data, &r.Status, &r.MessageID}, extra...)...); err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r.Data); err != nil {
		return r, fmt.Errorf("decode data: %w", err)
	}
	return r, nil
}

func (w *SendEmailWorker) load(ctx context.Context, id int64) (outboxRow, error) {
	r, err := scanOutboxRow(w.pool.QueryRow(ctx, `SELECT `+outboxRowColumns+` FROM email_outbox WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("email outbox row %d: %w", id, ErrEmailNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("load email outbox row %d: %w", id, err)
	}
	return r, nil
}

// finishTx marks the row sent or skipped and completes the job in one
// transaction: a crash leaves both as they were, and the job runs again.
func (w *SendEmailWorker) finishTx(ctx context.Context, job *river.Job[SendEmailArgs], id int64, status EmailStatus, reason string) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			UPDATE email_outbox SET
				status     = $2,
				attempts   = attempts + CASE WHEN $2 = 'sent' THEN 1 ELSE 0 END,
				sent_at    = CASE WHEN $2 = 'sent' THEN now() END,
				last_error = nullif($3, '')
			WHERE id = $1 AND status = 'pending'`, id, status, reason); err != nil {
			return fmt.Errorf("mark email %d %s: %w", id, status, err)
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete send_email job: %w", err)
		}
		return nil
	})
}

// record counts a failed attempt and keeps its error, in a transaction of
// its own; status is pending (retrying) or failed.
func (w *SendEmailWorker) record(ctx context.Context, id int64, status EmailStatus, lastError string) error {
	ctx = context.WithoutCancel(ctx)
	_, err := w.pool.Exec(ctx, `
		UPDATE email_outbox SET status = $2, attempts = attempts + 1, last_error = $3
		WHERE id = $1 AND status = 'pending'`, id, status, lastError)
	if err != nil {
		return fmt.Errorf("record email %d attempt: %w", id, err)
	}
	return nil
}
