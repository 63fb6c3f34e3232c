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

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/outbox"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/refund"
)

// SubmitRefundArgs asks for a refund request to be sent to its provider.
// It carries only the request's id: the amount, the payment and the key are
// read from the committed request.
type SubmitRefundArgs struct {
	RequestID string `json:"request_id"`
}

// Kind is stored in the database: never change it.
func (SubmitRefundArgs) Kind() string { return "submit_refund" }

// InsertOpts: one job per request, however often its insert is retried.
func (SubmitRefundArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// InsertSubmitRefundTx enqueues the submit_refund job of a request in tx,
// the transaction that recorded the request.
func (c *Client) InsertSubmitRefundTx(ctx context.Context, tx pgx.Tx, requestID string) error {
	if _, err := c.River.InsertTx(ctx, tx, SubmitRefundArgs{RequestID: requestID}, nil); err != nil {
		return fmt.Errorf("enqueue submit_refund %s: %w", requestID, err)
	}
	return nil
}

// SubmitRefundWorker is the refund saga's provider step. It reads the
// committed request and calls the provider's Refunder with the key derived
// from it, so that any number of attempts, from any process, make one
// refund; then it records the provider's refund id (submitted). A definite
// refusal is compensated (failed, the reservation released, an ops alert
// and an audit entry, in one transaction); an indeterminate failure is
// retried with the same key, until the provider's key window would run
// out, when the request fails instead of risking a second refund.
type SubmitRefundWorker struct {
	river.WorkerDefaults[SubmitRefundArgs]
	pool      *pgxpool.Pool
	refunders map[string]provider.Refunder
	opsEmail  string
	logger    *slog.Logger
	now       func() time.Time
	// callTimeout bounds one provider call (Config.RefundCallTimeout).
	callTimeout time.Duration
}

// Timeout implements river.Worker: the call's own bound plus the commit.
// River rescues a job of a dead process only after this has passed.
func (w *SubmitRefundWorker) Timeout(*river.Job[SubmitRefundArgs]) time.Duration {
	return w.callTimeout + 10*time.Second
}

// Work implements river.Worker.
func (w *SubmitRefundWorker) Work(ctx context.Context, job *river.Job[SubmitRefundArgs]) error {
	req, err := refund.Get(ctx, w.pool, job.Args.RequestID)
	if errors.Is(err, refund.ErrRequestNotFound) {
		return river.JobCancel(err) // cannot come from our own insert path: they commit together
	}
	if err != nil {
		return err
	}
	if !req.State.Open() || req.ProviderRefundID != "" {
		return nil // settled, or the provider already named its refund
	}
	if w.now().After(refund.SubmitDeadline(req.CreatedAt)) {
		return w.fail(ctx, req, fmt.Sprintf("not submitted within the provider's %s key window: "+
			"a new attempt could refund twice; check the provider for a refund with metadata %s=%s before asking again",
			refund.KeyWindow, provider.RefundReferenceKey, req.ID))
	}
	refunder, ok := w.refunders[req.Provider]
	if !ok {
		return w.fail(ctx, req, "no refund client is configured for provider "+req.Provider)
	}
	callCtx, cancel := context.WithTimeout(ctx, w.callTimeout)
	res, err := refunder.Refund(callCtx, provider.RefundRequest{
		PaymentID: req.PaymentID, Amount: req.Amount, Currency: req.Currency, Reason: req.Reason,
		IdempotencyKey: req.ProviderKey(), Reference: req.ID,
	})
	cancel()
	switch {
	case errors.Is(err, provider.ErrRefundRefused):
		return w.fail(ctx, req, err.Error())
	case err != nil && job.Attempt >= job.MaxAttempts:
		// No attempt is left to learn the outcome: fail, and say the
		// refund may exist. Its report, if it does, settles the request.
		return w.fail(ctx, req, "the provider could not be reached after "+fmt.Sprint(job.Attempt)+
			" attempts; the refund may or may not exist: "+err.Error())
	case err != nil:
		// Indeterminate: the same key on the next attempt gets the
		// provider's first answer, or makes the refund once.
		w.logger.WarnContext(ctx, "refund submission indeterminate; retrying with the same key",
			"refund_request", req.ID, "attempt", job.Attempt, "error", err.Error())
		return err
	}
	ctx = context.WithoutCancel(ctx) // the provider has the refund: record it even if the job's time is up
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		_, err := refund.MarkSubmittedTx(ctx, tx, req.ID, res.ProviderRefundID)
		return err
	})
}

// fail compensates a request that will not be refunded: failed with reason,
// and, in the same transaction, the ops alert and the audit entry.
func (w *SubmitRefundWorker) fail(ctx context.Context, req refund.Request, reason string) error {
	ctx = context.WithoutCancel(ctx)
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		failed, changed, err := refund.FailTx(ctx, tx, req.ID, reason)
		if err != nil || !changed {
			return err
		}
		msg, err := outbox.RefundRequestMessage(failed)
		if err != nil {
			return err
		}
		if err := outbox.WriteTx(ctx, tx, []outbox.Message{msg}); err != nil {
			return err
		}
		rc, err := river.ClientFromContextSafely[pgx.Tx](ctx)
		if err != nil {
			return err
		}
		alerts, err := compensateTx(ctx, tx, w.opsEmail, []refund.Request{failed}, "paygate")
		if err != nil {
			return err
		}
		_, err = EnqueueEmailsTx(ctx, tx, rc, alerts)
		return err
	})
	if err != nil {
		return fmt.Errorf("fail refund request %s: %w", req.ID, err)
	}
	w.logger.WarnContext(ctx, "refund request failed", "refund_request", req.ID, "payment_id", req.PaymentID)
	return nil
}

// compensateTx records, in tx, the audit entry of every request that just
// failed (actor: who failed it) and returns their ops alerts, for the
// caller to enqueue with its other emails.
func compensateTx(ctx context.Context, tx pgx.Tx, opsEmail string, failed []refund.Request, actor string) ([]Email, error) {
	var alerts []Email
	for _, r := range failed {
		op := inbox.Operation{Actor: actor, Reason: r.FailureReason}
		if err := inbox.AppendAuditTx(ctx, tx, inbox.ActionRefundFailed, op, inbox.Key{Provider: r.Provider, EventID: r.ID}); err != nil {
			return nil, err
		}
		alerts = append(alerts, Email{
			Kind: EmailRefundFailedAlert, ObjectID: r.ID, PaymentID: r.PaymentID, Recipient: opsEmail,
			Amount: ledger.Format(r.Amount, r.Currency), Currency: r.Currency, Reason: r.FailureReason,
			Provider: r.Provider,
		})
	}
	return alerts, nil
}
