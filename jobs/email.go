package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	netmail "net/mail"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/inbox"
)

// EmailKind is what an email is for. Kinds are stored in the database.
type EmailKind string

const (
	// EmailPaymentReceipt goes to the customer when a payment first reaches
	// succeeded; ObjectID is the payment id.
	EmailPaymentReceipt EmailKind = "payment_receipt"
	// EmailRefundConfirmation goes to the customer once per refund that
	// succeeded; ObjectID is the refund id.
	EmailRefundConfirmation EmailKind = "refund_confirmation"
	// EmailDisputeAlert goes to ops (PAYGATE_OPS_EMAIL) once per dispute;
	// ObjectID is the dispute id.
	EmailDisputeAlert EmailKind = "dispute_alert"
	// EmailPoisonAlert goes to ops once per event that became poison;
	// ObjectID is "<provider>/<event_id>" (see EnqueuePoisonAlertTx).
	EmailPoisonAlert EmailKind = "poison_alert"
	// EmailRefundFailedAlert goes to ops once per refund request that
	// failed (refused, reported failed, or past the key window); ObjectID
	// is the request id (rr_…).
	EmailRefundFailedAlert EmailKind = "refund_failed_alert"
	// EmailReconciliationAlert goes to finance (PAYGATE_FINANCE_EMAIL, else
	// PAYGATE_OPS_EMAIL) once per reconciliation run that failed or
	// completed with exceptions; ObjectID is the run's id.
	EmailReconciliationAlert EmailKind = "reconciliation_alert"
	// EmailEndpointDisabled goes to ops once per time an endpoint is
	// disabled for failing (410, or failing for
	// PAYGATE_DELIVERY_DISABLE_AFTER); ObjectID is
	// "<endpoint id>/<Unix seconds of the disabling>".
	EmailEndpointDisabled EmailKind = "endpoint_disabled"
	// EmailNATSUnavailable goes to ops once per outage of publishing to
	// NATS JetStream, when it has failed for 15 minutes without a success;
	// ObjectID is "nats/<Unix seconds of the first failure>" and Reason
	// the last error.
	EmailNATSUnavailable EmailKind = "nats_unavailable"
	// EmailDoubleCharge goes to ops once per detection of a double
	// charge: two or more payments of one order reference net captured;
	// ObjectID is "<reference>#<detection>" (a reference resolved by a
	// refund and paid twice again is a second detection).
	EmailDoubleCharge EmailKind = "double_charge"
	// EmailMissedEvents goes to ops once per sweep of a provider's events
	// list that found events paygate lacked (their webhooks never came);
	// ObjectID is "<provider>/<window from>-<window to>" (Unix seconds)
	// and Missed what it found.
	EmailMissedEvents EmailKind = "missed_events"
	// EmailSweepFailing goes to ops once per outage of the sweep, when the
	// provider's events list has failed for an hour without a success;
	// ObjectID is "<provider>/<Unix seconds of the first failure>" and
	// Reason the last error.
	EmailSweepFailing EmailKind = "sweep_failing"
)

// EmailKinds lists every kind.
var EmailKinds = []EmailKind{EmailPaymentReceipt, EmailRefundConfirmation, EmailDisputeAlert, EmailPoisonAlert,
	EmailRefundFailedAlert, EmailReconciliationAlert, EmailEndpointDisabled, EmailNATSUnavailable, EmailDoubleCharge,
	EmailMissedEvents, EmailSweepFailing}

// EmailStatus is where an outbox row stands.
type EmailStatus string

const (
	EmailPending EmailStatus = "pending" // a send_email or send_emails job is on its way
	EmailSent    EmailStatus = "sent"    // the SMTP server accepted it
	EmailSkipped EmailStatus = "skipped" // no recipient, or no SMTP server configured; Error says which
	EmailFailed  EmailStatus = "failed"  // rejected permanently (5xx) or out of attempts; Error says why
)

var (
	// ErrInvalidEmail is returned by EnqueueEmailTx for an Email that is
	// not well formed (unknown kind, no object id, a non-decimal amount).
	ErrInvalidEmail = errors.New("invalid email")
	// ErrEmailNotFound is returned when no outbox row has the given key.
	ErrEmailNotFound = errors.New("email not found")
)

// Email is one email intent: at most one email is ever enqueued per (Kind,
// ObjectID), however many times and in whatever order the events that call
// for it arrive.
type Email struct {
	Kind EmailKind
	// ObjectID identifies the intent within its kind: the payment id, the
	// refund id, the dispute id, or "<provider>/<event_id>".
	ObjectID string
	// PaymentID is the payment the email concerns (listed by
	// EmailsForPayment); empty for poison alerts.
	PaymentID string
	// Recipient is the address to send to. Empty (the charge has neither a
	// receipt_email nor a billing email; PAYGATE_OPS_EMAIL unset) or not an
	// address: the intent is recorded as skipped with the reason, and no
	// job is enqueued.
	Recipient string
	// Amount is a decimal string in major units at the currency's scale,
	// as the API shows amounts ("360.00", "1000" for JPY, "1.234" for
	// KWD). Never a float. Optional for poison alerts.
	Amount string
	// Currency is the lowercase ISO code, as Stripe sends it.
	Currency string
	// Reason is free text for ops alerts: the dispute's reason, the poison
	// event's last error.
	Reason string
	// Provider, EventID and EventType name the event behind the email
	// (shown in ops alerts).
	Provider  string
	EventID   string
	EventType string
	// Date, Batch and RunStatus are a reconciliation alert's run: its day
	// (YYYY-MM-DD) or its provider's settlement batch, and how it ended.
	Date      string
	Batch     string
	RunStatus string
	// EndpointID is a disabled endpoint's id.
	EndpointID string
	// Reference is the merchant's order reference of the payment, when
	// known: customers and ops know an order by it.
	Reference string
	// Payments are a double charge's payments, as they stood when it was
	// detected.
	Payments []EmailPayment
	// Missed is what a sweep found: a missed_events email's findings.
	Missed *MissedEvents
}

// MissedEvents is what one sweep of a provider's events list found: the
// events paygate lacked, ingested by the sweep.
type MissedEvents struct {
	// Count is how many events the sweep ingested; First and Last the
	// oldest and the newest of them by creation.
	Count int        `json:"count"`
	First EmailEvent `json:"first"`
	Last  EmailEvent `json:"last"`
	// From and To are the window swept: events created in [From, To).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// Known is how many of the window's events paygate had already.
	Known int `json:"known"`
	// Trigger is what ran the sweep: "schedule" or "cli".
	Trigger string `json:"trigger"`
}

// EmailEvent names one provider event in an email.
type EmailEvent struct {
	ID      string    `json:"id"`
	Type    string    `json:"type"`
	Created time.Time `json:"created"`
}

// EmailPayment is one payment an email lists; amounts as Amount is.
type EmailPayment struct {
	ID             string `json:"id"`
	Provider       string `json:"provider"`
	Status         string `json:"status"`
	Currency       string `json:"currency"`
	AmountCaptured string `json:"amount_captured"`
	AmountRefunded string `json:"amount_refunded"`
}

// emailData is Email's payload as stored in email_outbox.data.
type emailData struct {
	PaymentID string         `json:"payment_id,omitempty"`
	Amount    string         `json:"amount,omitempty"`
	Currency  string         `json:"currency,omitempty"`
	Reason    string         `json:"reason,omitempty"`
	Provider  string         `json:"provider,omitempty"`
	EventID   string         `json:"event_id,omitempty"`
	EventType string         `json:"event_type,omitempty"`
	Date      string         `json:"date,omitempty"`
	Batch     string         `json:"batch,omitempty"`
	RunStatus string         `json:"run_status,omitempty"`
	Endpoint  string         `json:"endpoint_id,omitempty"`
	Reference string         `json:"reference,omitempty"`
	Payments  []EmailPayment `json:"payments,omitempty"`
	Missed    *MissedEvents  `json:"missed,omitempty"`
}

var (
	decimalRe  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
	currencyRe = regexp.MustCompile(`^[a-z]{3}$`)
)

const maxReasonLen = 2000

func (e Email) validate() error {
	known := false
	for _, k := range EmailKinds {
		known = known || e.Kind == k
	}
	switch {
	case !known:
		return fmt.Errorf("%w: kind %q", ErrInvalidEmail, e.Kind)
	case strings.TrimSpace(e.ObjectID) == "":
		return fmt.Errorf("%w: %s without an object id", ErrInvalidEmail, e.Kind)
	case e.Amount != "" && !decimalRe.MatchString(e.Amount):
		return fmt.Errorf("%w: amount %q is not a decimal string", ErrInvalidEmail, e.Amount)
	case e.Currency != "" && !currencyRe.MatchString(e.Currency):
		return fmt.Errorf("%w: currency %q is not a lowercase ISO code", ErrInvalidEmail, e.Currency)
	case (e.Amount == "") != (e.Currency == ""):
		return fmt.Errorf("%w: an amount goes with its currency", ErrInvalidEmail)
	case e.Kind != EmailPoisonAlert && e.Kind != EmailReconciliationAlert && e.Kind != EmailEndpointDisabled &&
		e.Kind != EmailNATSUnavailable && e.Kind != EmailDoubleCharge && e.Kind != EmailMissedEvents &&
		e.Kind != EmailSweepFailing && e.Amount == "":
		return fmt.Errorf("%w: %s without an amount", ErrInvalidEmail, e.Kind)
	case (e.Kind == EmailMissedEvents) != (e.Missed != nil):
		return fmt.Errorf("%w: %s goes with a sweep's findings, and only it", ErrInvalidEmail, EmailMissedEvents)
	}
	return nil
}

// EmailMessageID is the Message-ID (without angle brackets) of every
// attempt to send the email for (kind, objectID), e.g.
// "payment_receipt.pi_123@paygate": derived from the outbox key, never
// random, so that a resend after a crash is recognisable downstream.
// Characters outside RFC 5322's atext are escaped as "=XX", keeping the
// mapping one-to-one.
func EmailMessageID(kind EmailKind, objectID string) string {
	var b strings.Builder
	b.WriteString(string(kind))
	b.WriteByte('.')
	for i := 0; i < len(objectID); i++ {
		c := objectID[i]
		if isAtext(c) && c != '=' && c != '.' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	b.WriteString("@paygate")
	return b.String()
}

func isAtext(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0
}

// EnqueueEmailTx records the email intent e in the caller's transaction tx
// and, only when the intent is new, inserts its send_email job with rc in
// the same transaction: both commit or roll back with the state change that
// called for them.
//
// The outbox row is inserted ON CONFLICT (kind, object_id) DO NOTHING, so a
// duplicated or reordered event, or two workers racing, enqueue one email
// at most: created reports whether this call recorded the intent. An
// intent without a usable recipient is recorded as skipped, with the
// reason, and gets no job (created is still true): never silently lost.
// The one exception to DO NOTHING: an intent skipped for want of a
// recipient takes the recipient a later call gives it and gets its job
// (created true again), so an address Stripe reports after the charge
// still sends the email, once, as it would had it come first.
//
// rc inserts the job: nil inside a River worker (the client working ctx's
// job, river.ClientFromContext), else a Client's River field.
//
// It fails with ErrInvalidEmail.
func EnqueueEmailTx(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], e Email) (created bool, err error) {
	c, err := EnqueueEmailsTx(ctx, tx, rc, []Email{e})
	if err != nil {
		return false, err
	}
	return c[0], nil
}

// EnqueueEmailsTx is EnqueueEmailTx for every email of emails, with one
// outbox statement and one job insert however many there are: created[i]
// reports whether this call recorded emails[i]'s intent. The new pending
// emails of one call share a send_emails job (SendEmailsWorker; several
// past MaxEmailsPerJob), since each River job row costs three writes; a
// lone one gets its send_email job, as from EnqueueEmailTx. When emails
// repeats a (Kind, ObjectID), its first copy with a usable recipient (else
// its first copy) is the one recorded and the others are reported not
// created. Nothing is recorded when any email is
// invalid. No emails: nil, and no database work.
//
// Rows are inserted in (kind, object_id) order, so two transactions
// recording overlapping sets take the unique key's locks in the same order
// and never deadlock: the later one waits for the earlier one's commit and
// then finds its copies recorded.
//
// It fails with ErrInvalidEmail, naming the email.
func EnqueueEmailsTx(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], emails []Email) (created []bool, err error) {
	if len(emails) == 0 {
		return nil, nil
	}
	type key struct {
		kind     EmailKind
		objectID string
	}
	var (
		n          = len(emails)
		kinds      = make([]string, 0, n)
		objectIDs  = make([]string, 0, n)
		paymentIDs = make([]string, 0, n)
		recipients = make([]string, 0, n)
		datas      = make([]string, 0, n)
		statuses   = make([]string, 0, n)
		skipped    = make([]string, 0, n)
		messageIDs = make([]string, 0, n)
		first      = make(map[key]int, n)
	)
	// A batch may hold an intent twice, asked for before and after its
	// address was learnt: the copy that can be sent is the one to record.
	for i, e := range emails {
		e.ObjectID = strings.TrimSpace(e.ObjectID)
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("email %s %q: %w", e.Kind, e.ObjectID, err)
		}
		k := key{e.Kind, e.ObjectID}
		if j, seen := first[k]; !seen || (!sendable(emails[j].Recipient) && sendable(e.Recipient)) {
			first[k] = i
		}
	}
	for i, e := range emails {
		e.ObjectID = strings.TrimSpace(e.ObjectID)
		if first[key{e.Kind, e.ObjectID}] != i {
			continue
		}
		if len(e.Reason) > maxReasonLen {
			e.Reason = e.Reason[:maxReasonLen] + "…"
		}
		data, err := json.Marshal(emailData{
			PaymentID: e.PaymentID, Amount: e.Amount, Currency: e.Currency, Reason: e.Reason,
			Provider: e.Provider, EventID: e.EventID, EventType: e.EventType, Date: e.Date, Batch: e.Batch, RunStatus: e.RunStatus,
			Endpoint: e.EndpointID, Reference: e.Reference, Payments: e.Payments, Missed: e.Missed,
		})
		if err != nil {
			return nil, fmt.Errorf("encode email %s %s: %w", e.Kind, e.ObjectID, err)
		}
		status, recipient, skipReason := EmailPending, "", ""
		if strings.TrimSpace(e.Recipient) == "" {
			status, skipReason = EmailSkipped, noRecipientReason(e.Kind)
		} else if a, perr := netmail.ParseAddress(e.Recipient); perr != nil {
			status, skipReason = EmailSkipped, "recipient is not an email address"
		} else {
			recipient = a.Address
		}
		kinds = append(kinds, string(e.Kind))
		objectIDs = append(objectIDs, e.ObjectID)
		paymentIDs = append(paymentIDs, e.PaymentID)
		recipients = append(recipients, recipient)
		datas = append(datas, string(data))
		statuses = append(statuses, string(status))
		skipped = append(skipped, skipReason)
		messageIDs = append(messageIDs, EmailMessageID(e.Kind, e.ObjectID))
	}
	what := fmt.Sprintf("%d emails", len(kinds))
	if len(kinds) == 1 {
		what = fmt.Sprintf("email %s %s", kinds[0], objectIDs[0])
	}

	rows, err := tx.Query(ctx, `
		INSERT INTO email_outbox (kind, object_id, payment_id, recipient, data, status, last_error, message_id)
		SELECT kind, object_id, nullif(payment_id, ''), nullif(recipient, ''), data::jsonb, status,
			nullif(last_error, ''), message_id
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
			AS e (kind, object_id, payment_id, recipient, data, status, last_error, message_id)
		ORDER BY kind, object_id
		ON CONFLICT ON CONSTRAINT email_outbox_kind_object_id_key DO UPDATE
			SET recipient = EXCLUDED.recipient, data = EXCLUDED.data, status = EXCLUDED.status, last_error = NULL
			WHERE email_outbox.status = 'skipped' AND email_outbox.recipient IS NULL
			  AND EXCLUDED.status = 'pending'
		RETURNING id, kind, object_id, status`,
		kinds, objectIDs, paymentIDs, recipients, datas, statuses, skipped, messageIDs)
	if err != nil {
		return nil, fmt.Errorf("record %s: %w", what, err)
	}
	defer rows.Close()
	created = make([]bool, len(emails))
	var sends []int64
	for rows.Next() {
		var (
			id     int64
			k      key
			status EmailStatus
		)
		if err := rows.Scan(&id, &k.kind, &k.objectID, &status); err != nil {
			return nil, fmt.Errorf("record %s: %w", what, err)
		}
		created[first[k]] = true
		if status == EmailPending {
			sends = append(sends, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("record %s: %w", what, err)
	}
	// Intents recorded before already have their email on its way (or
	// done); skipped ones get no job.
	if len(sends) == 0 {
		return created, nil
	}
	if rc == nil {
		if rc, err = river.ClientFromContextSafely[pgx.Tx](ctx); err != nil {
			return nil, fmt.Errorf("enqueue sending of %s: no River client given and none in the context: %w", what, err)
		}
	}
	if _, err := rc.InsertManyFastTx(ctx, tx, emailJobs(sends)); err != nil {
		return nil, fmt.Errorf("enqueue sending of %s: %w", what, err)
	}
	return created, nil
}

// sendable reports whether recipient is an address an email can go to.
func sendable(recipient string) bool {
	_, err := netmail.ParseAddress(recipient)
	return strings.TrimSpace(recipient) != "" && err == nil
}

func noRecipientReason(kind EmailKind) string {
	switch kind {
	case EmailDisputeAlert, EmailPoisonAlert, EmailRefundFailedAlert, EmailNATSUnavailable, EmailMissedEvents, EmailSweepFailing:
		return "no recipient: PAYGATE_OPS_EMAIL is not set"
	case EmailReconciliationAlert:
		return "no recipient: neither PAYGATE_FINANCE_EMAIL nor PAYGATE_OPS_EMAIL is set"
	default:
		return "no recipient: the charge has no receipt_email or billing email"
	}
}

// PoisonAlert describes an event that became poison.
type PoisonAlert struct {
	Provider  string // e.g. "stripe"
	EventID   string
	EventType string
	Error     string // the event's last error
}

// EnqueuePoisonAlertTx records and enqueues, in tx, the alert to opsEmail
// (PAYGATE_OPS_EMAIL; empty: recorded as skipped) that an event became
// poison. It is EnqueueEmailTx for kind poison_alert with object id
// "<provider>/<event_id>": one alert per event ever, so an event that is
// replayed and turns poison again does not alert twice.
//
// It fails with ErrInvalidEmail.
func EnqueuePoisonAlertTx(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], opsEmail string, a PoisonAlert) (created bool, err error) {
	if a.Provider == "" || a.EventID == "" {
		return false, fmt.Errorf("%w: poison alert without provider and event id", ErrInvalidEmail)
	}
	return EnqueueEmailTx(ctx, tx, rc, Email{
		Kind:      EmailPoisonAlert,
		ObjectID:  a.Provider + "/" + a.EventID,
		Recipient: opsEmail,
		Reason:    a.Error,
		Provider:  a.Provider,
		EventID:   a.EventID,
		EventType: a.EventType,
	})
}

// EmailRecord is an email intent and where it stands, as the payment API
// lists it.
type EmailRecord struct {
	Kind      EmailKind   `json:"kind"`
	ObjectID  string      `json:"object_id"`
	Status    EmailStatus `json:"status"`
	Recipient string      `json:"recipient,omitempty"`
	// Error is why it was skipped or failed, or the last transient error
	// while still pending.
	Error     string     `json:"error,omitempty"`
	Attempts  int        `json:"attempts"`
	MessageID string     `json:"message_id"`
	CreatedAt time.Time  `json:"created_at"`
	SentAt    *time.Time `json:"sent_at"`
}

const emailRecordColumns = `kind, object_id, status, coalesce(recipient, ''), coalesce(last_error, ''),
	attempts, message_id, created_at, sent_at`

func scanEmailRecord(row pgx.Row) (EmailRecord, error) {
	var r EmailRecord
	err := row.Scan(&r.Kind, &r.ObjectID, &r.Status, &r.Recipient, &r.Error, &r.Attempts, &r.MessageID, &r.CreatedAt, &r.SentAt)
	return r, err
}

// EmailsForPayment returns the payment's emails (receipt, refund
// confirmations, dispute alerts), oldest first; an empty, non-nil slice
// when there are none.
func EmailsForPayment(ctx context.Context, q inbox.Querier, paymentID string) ([]EmailRecord, error) {
	rows, err := q.Query(ctx, `SELECT `+emailRecordColumns+` FROM email_outbox
		WHERE payment_id = $1 ORDER BY created_at, id`, paymentID)
	if err != nil {
		return nil, fmt.Errorf("list emails of payment %s: %w", paymentID, err)
	}
	defer rows.Close()
	out := []EmailRecord{}
	for rows.Next() {
		r, err := scanEmailRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("list emails of payment %s: %w", paymentID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list emails of payment %s: %w", paymentID, err)
	}
	return out, nil
}

// GetEmail returns the intent (kind, objectID).
//
// It fails with ErrEmailNotFound.
func GetEmail(ctx context.Context, q inbox.Querier, kind EmailKind, objectID string) (EmailRecord, error) {
	r, err := scanEmailRecord(q.QueryRow(ctx, `SELECT `+emailRecordColumns+` FROM email_outbox
		WHERE kind = $1 AND object_id = $2`, kind, objectID))
	if errors.Is(err, pgx.ErrNoRows) {
		return EmailRecord{}, ErrEmailNotFound
	}
	if err != nil {
		return EmailRecord{}, fmt.Errorf("get email %s %s: %w", kind, objectID, err)
	}
	return r, nil
}
