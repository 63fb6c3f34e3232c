package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/statemachine"
)

// recordRetryDelay is how long a job waits before trying again to record
// that its event is poison, when the database refused the first time.
const recordRetryDelay = 5 * time.Second

// ErrPermanent marks a failure that no retry can fix (an impossible amount,
// an unknown currency, a ref conflict): the event becomes poison at once.
var ErrPermanent = errors.New("permanent failure")

// ProcessEventWorker applies one inbox event: its facts, its ledger
// transactions, the payment's state, its emails and the inbox status all
// commit in one transaction together with the job's completion, so a crash
// at any point either applied everything or nothing.
type ProcessEventWorker struct {
	river.WorkerDefaults[ProcessEventArgs]
	pool     *pgxpool.Pool
	logger   *slog.Logger
	opsEmail string // where dispute and poison alerts go
}

// Work implements river.Worker.
func (w *ProcessEventWorker) Work(ctx context.Context, job *river.Job[ProcessEventArgs]) error {
	err := w.apply(ctx, job)
	if err == nil {
		return nil
	}
	if errors.Is(err, inbox.ErrNotFound) {
		// A job whose event is not in the inbox cannot come from our own
		// ingest path (they commit together); nothing to retry.
		return river.JobCancel(err)
	}
	permanent := errors.Is(err, ErrPermanent)
	exhausted := job.Attempt >= job.MaxAttempts
	status := inbox.StatusReceived
	if permanent || exhausted {
		status = inbox.StatusPoison
	}
	if markErr := w.recordFailure(ctx, job.Args, status, err); markErr != nil {
		w.logger.ErrorContext(ctx, "record event failure", "event_id", job.Args.EventID, "error", markErr)
		if status == inbox.StatusPoison {
			// Ending the job now (cancelled, or discarded when out of
			// attempts) would leave the event "received" with no job
			// left to work it: lost to ops. Come back once the database
			// answers again; a snooze spends no attempt.
			return river.JobSnooze(recordRetryDelay)
		}
		// A transient failure retries anyway; the inbox catches up then.
	}
	w.logger.WarnContext(ctx, "event not applied", "provider", job.Args.Provider, "event_id", job.Args.EventID,
		"attempt", job.Attempt, "status", status, "error", err.Error())
	if permanent {
		return river.JobCancel(err)
	}
	return err
}

func (w *ProcessEventWorker) apply(ctx context.Context, job *river.Job[ProcessEventArgs]) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		ev, err := inbox.LockTx(ctx, tx, job.Args.Provider, job.Args.EventID)
		if err != nil {
			return err
		}
		if ev.Status == inbox.StatusDiscarded {
			// An operator set the event aside after this job was queued;
			// only a replay brings it back.
			_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
			return err
		}
		status := inbox.StatusProcessed
		effects, err := StripeEffects(ev.Payload)
		switch {
		case errors.Is(err, errIgnored):
			status = inbox.StatusIgnored
		case err != nil:
			return err
		default:
			if err := w.applyEffectsTx(ctx, tx, ev, effects); err != nil {
				return err
			}
		}
		if err := inbox.SetStatusTx(ctx, tx, ev.Provider, ev.EventID, status, "", true); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete job: %w", err)
		}
		return nil
	})
}

// applyEffectsTx posts an event's money movements and folds its facts into
// the payment, under the payment's lock. Locks are always taken in the same
// order (the inbox row, then the payment), so concurrent workers never
// deadlock.
func (w *ProcessEventWorker) applyEffectsTx(ctx context.Context, tx pgx.Tx, ev inbox.Event, fx Effects) error {
	var (
		payment  ledger.Payment
		previous statemachine.State
		facts    []statemachine.Fact
	)
	if fx.PaymentID != "" {
		var err error
		if payment, facts, err = ledger.LockPaymentWithFactsTx(ctx, tx, ev.Provider, fx.PaymentID); err != nil {
			return err
		}
		if len(facts) > 0 {
			previous = payment.State
		}
		for _, f := range fx.Facts {
			if err := statemachine.CheckCurrency(facts, f); err != nil {
				return fmt.Errorf("%w: %w", ErrPermanent, err)
			}
		}
	}
	for _, t := range fx.Postings {
		if _, err := ledger.PostTx(ctx, tx, t); err != nil {
			if isPermanentLedgerError(err) {
				return fmt.Errorf("%w: %w", ErrPermanent, err)
			}
			return err
		}
	}
	if fx.PaymentID == "" {
		return nil
	}
	added, err := ledger.AddFactsTx(ctx, tx, fx.PaymentID, fx.Facts)
	if err != nil {
		return err
	}
	facts = append(facts, added...)
	payment.Summary = statemachine.Fold(facts)
	emailLearnt := fx.ReceiptEmailKnown && (!payment.ReceiptEmailKnown || (payment.ReceiptEmail == "" && fx.ReceiptEmail != ""))
	if emailLearnt {
		payment.ReceiptEmail, payment.ReceiptEmailKnown = fx.ReceiptEmail, true
	}
	if previous != "" {
		if err := statemachine.CheckTransition(previous, payment.State, lastKind(fx.Facts)); err != nil {
			return fmt.Errorf("%w: %w", ErrPermanent, err)
		}
	}
	if err := ledger.SavePaymentTx(ctx, tx, payment, previous, ev.EventID); err != nil {
		return err
	}
	if len(added) == 0 && !emailLearnt {
		return nil // nothing new: every email this payment calls for is already enqueued
	}
	return w.enqueueEmailsTx(ctx, tx, ev, payment, added, facts)
}

// enqueueEmailsTx writes the email intents the payment's facts call for,
// in the same transaction as the facts. Customer emails are derived from
// the whole fact set once the payment's address is known (or known to be
// absent, then recorded as skipped), so a refund reported before the charge
// that names the address still gets its confirmation. The outbox is unique
// per (kind, object): however often and in whatever order the reports
// arrive, each intent is enqueued once.
func (w *ProcessEventWorker) enqueueEmailsTx(ctx context.Context, tx pgx.Tx, ev inbox.Event, p ledger.Payment,
	added, all []statemachine.Fact) error {
	var emails []Email
	if p.ReceiptEmailKnown {
		if p.AmountCaptured.IsPositive() {
			emails = append(emails, Email{Kind: EmailPaymentReceipt, ObjectID: p.ID, PaymentID: p.ID,
				Recipient: p.ReceiptEmail, Amount: ledger.Format(p.AmountCaptured, p.Currency), Currency: p.Currency})
		}
		failed := map[string]bool{}
		for _, f := range all {
			if f.Kind == statemachine.FactRefundFailed {
				failed[f.ObjectID] = true
			}
		}
		for _, f := range all {
			if f.Kind == statemachine.FactRefundSucceeded && !failed[f.ObjectID] {
				emails = append(emails, Email{Kind: EmailRefundConfirmation, ObjectID: f.ObjectID, PaymentID: p.ID,
					Recipient: p.ReceiptEmail, Amount: ledger.Format(f.Amount, f.Currency), Currency: f.Currency})
			}
		}
	}
	for _, f := range added {
		switch {
		case f.Kind == statemachine.FactDisputeOpened:
			alert := Email{Kind: EmailDisputeAlert, ObjectID: f.ObjectID, PaymentID: p.ID, Recipient: w.opsEmail,
				Provider: ev.Provider, EventID: ev.EventID, EventType: ev.Type}
			if p.Currency != "" {
				alert.Amount, alert.Currency = ledger.Format(p.Amount, p.Currency), p.Currency
			}
			emails = append(emails, alert)
		}
	}
	for _, e := range emails {
		if _, err := EnqueueEmailTx(ctx, tx, nil, e); err != nil {
			return fmt.Errorf("enqueue %s for %s: %w", e.Kind, e.ObjectID, err)
		}
	}
	return nil
}

func lastKind(facts []statemachine.Fact) statemachine.FactKind {
	if len(facts) == 0 {
		return ""
	}
	return facts[len(facts)-1].Kind
}

// isPermanentLedgerError reports a transaction the ledger can never accept:
// retrying cannot change the outcome.
func isPermanentLedgerError(err error) bool {
	for _, target := range []error{
		ledger.ErrRefConflict, ledger.ErrUnbalanced, ledger.ErrUnknownCurrency, ledger.ErrNegativeAmount,
		ledger.ErrInvalidAmount, ledger.ErrInvalidTransaction, ledger.ErrInvalidKind,
		ledger.ErrInvalidAccount, ledger.ErrInvalidEntries,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// recordFailure counts the attempt and keeps its error on the inbox row, in a
// transaction of its own since the processing one rolled back.
func (w *ProcessEventWorker) recordFailure(ctx context.Context, args ProcessEventArgs, status inbox.Status, cause error) error {
	ctx = context.WithoutCancel(ctx)
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		ev, err := inbox.LockTx(ctx, tx, args.Provider, args.EventID)
		if err != nil {
			return err
		}
		if ev.Status == inbox.StatusDiscarded {
			status = inbox.StatusDiscarded // an operator's decision stands
		}
		if err := inbox.SetStatusTx(ctx, tx, args.Provider, args.EventID, status, cause.Error(), true); err != nil {
			return err
		}
		if status != inbox.StatusPoison {
			return nil
		}
		_, err = EnqueuePoisonAlertTx(ctx, tx, nil, w.opsEmail, PoisonAlert{
			Provider: ev.Provider, EventID: ev.EventID, EventType: ev.Type, Error: cause.Error(),
		})
		return err
	})
}
