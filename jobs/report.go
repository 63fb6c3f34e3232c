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
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/reconcile"
)

// DownloadReportArgs asks for a provider's settlement report to be
// downloaded, kept and reconciled. It names the report by its file name
// only: the URL and the announcing event are on the report's row
// (reconcile.NoteReportTx), written in the same transaction.
type DownloadReportArgs struct {
	Provider string `json:"provider"`
	FileName string `json:"file_name"`
}

// Kind is stored in the database: never change it.
func (DownloadReportArgs) Kind() string { return "download_report" }

// ReportDownloadMaxAttempts is how often a download is tried, spread by
// River's backoff over about a day: the provider keeps its reports for
// longer, and an outage of its report server or a password being rotated
// is the usual cause.
const ReportDownloadMaxAttempts = 12

// InsertOpts puts downloads on the maintenance queue, away from the events.
func (DownloadReportArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, MaxAttempts: ReportDownloadMaxAttempts}
}

// noteReportsTx records, in the transaction applying the events that
// announced them, the settlement reports to download, and enqueues the
// download of each one not already downloading or kept: a report
// announced twice is downloaded once.
func noteReportsTx(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], notices []reconcile.ReportNotice) error {
	for _, n := range notices {
		noted, err := reconcile.NoteReportTx(ctx, tx, n)
		if err != nil {
			return err
		}
		if !noted {
			continue
		}
		if _, err := rc.InsertTx(ctx, tx, DownloadReportArgs{Provider: n.Provider, FileName: n.FileName}, nil); err != nil {
			return fmt.Errorf("enqueue download of %s: %w", n.FileName, err)
		}
	}
	return nil
}

// ReportDownloader fetches a provider's report file by its URL. Errors
// wrapping provider.ErrPermanent (a URL the configuration does not allow,
// a file over the size bound) are never retried; any other is.
type ReportDownloader interface {
	Download(ctx context.Context, url string) ([]byte, error)
}

// ReportWorkerConfig configures the download_report worker.
type ReportWorkerConfig struct {
	Pool *pgxpool.Pool
	// Downloaders are the providers' report clients by provider name; a
	// report of a provider without one is refused (not configured).
	Downloaders map[string]ReportDownloader
	// OpsEmail is told of a refused download (the announcing event turns
	// poison, with the reason).
	OpsEmail string
	Logger   *slog.Logger
}

// ReportWorker downloads a settlement report, keeps the file and its
// SHA-256 once, and enqueues the batch's reconciliation in the same
// transaction. A download the configuration refuses (a host not allowed)
// fetches nothing and is not retried: the report is recorded refused with
// the reason, and the event that announced it turns poison with the same
// reason, for ops to see, fix the configuration and replay.
type ReportWorker struct {
	river.WorkerDefaults[DownloadReportArgs]
	ReportWorkerConfig
}

// NewReportWorker returns the worker.
func NewReportWorker(cfg ReportWorkerConfig) *ReportWorker {
	return &ReportWorker{ReportWorkerConfig: cfg}
}

func (w *ReportWorker) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Logger
}

// Timeout lets a large report download at a modest speed.
func (w *ReportWorker) Timeout(*river.Job[DownloadReportArgs]) time.Duration { return 5 * time.Minute }

// Work implements river.Worker.
func (w *ReportWorker) Work(ctx context.Context, job *river.Job[DownloadReportArgs]) error {
	args := job.Args
	rc, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return err
	}
	report, err := reconcile.GetReport(ctx, w.Pool, args.Provider, args.FileName)
	if errors.Is(err, reconcile.ErrReportNotFound) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if report.Status != reconcile.ReportNotified {
		// Kept already (an attempt whose completion River lost), or given
		// up: a new notification sets it back to notified with a job of
		// its own.
		return nil
	}
	dl := w.Downloaders[args.Provider]
	if dl == nil {
		return w.refuse(ctx, rc, report, reconcile.ReportRefused,
			fmt.Errorf("no report download is configured for %s (its report user and password)", args.Provider))
	}
	body, err := dl.Download(ctx, report.URL)
	switch {
	case errors.Is(err, provider.ErrPermanent):
		return w.refuse(ctx, rc, report, reconcile.ReportRefused, err)
	case err != nil && job.Attempt >= job.MaxAttempts:
		return w.refuse(ctx, rc, report, reconcile.ReportFailed, fmt.Errorf("gave up after %d attempts: %w", job.Attempt, err))
	case err != nil:
		if nerr := reconcile.SetReportStatusTx(context.WithoutCancel(ctx), w.Pool, args.Provider, args.FileName,
			reconcile.ReportNotified, err.Error()); nerr != nil {
			w.logger().ErrorContext(ctx, "note report download error", "file", args.FileName, "error", nerr.Error())
		}
		w.logger().WarnContext(ctx, "settlement report download failed; retrying", "provider", args.Provider,
			"file", args.FileName, "attempt", job.Attempt, "error", err.Error())
		return err
	}
	return pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		kept, stored, err := reconcile.StoreReportTx(ctx, tx, args.Provider, args.FileName, body)
		if err != nil {
			return err
		}
		if !stored {
			return nil
		}
		reconcileArgs, opts := ScheduledBatchReconcile(kept.Provider, kept.Batch)
		if _, err := rc.InsertTx(ctx, tx, reconcileArgs, opts); err != nil {
			return fmt.Errorf("enqueue reconciliation of %s batch %d: %w", kept.Provider, kept.Batch, err)
		}
		w.logger().InfoContext(ctx, "settlement report kept", "provider", kept.Provider, "file", kept.FileName,
			"batch", kept.Batch, "size", kept.Size, "sha256", kept.SHA256)
		return nil
	})
}

// refuse records that a report will not be downloaded, and why, on the
// report and on the event that announced it (poison, with an alert to
// ops), in one transaction; the job ends without a retry.
func (w *ReportWorker) refuse(ctx context.Context, rc *river.Client[pgx.Tx], report reconcile.SettlementReport,
	status reconcile.ReportStatus, cause error) error {
	reason := fmt.Sprintf("settlement report %s not downloaded: %s", report.FileName, cause.Error())
	ctx = context.WithoutCancel(ctx)
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		if err := reconcile.SetReportStatusTx(ctx, tx, report.Provider, report.FileName, status, reason); err != nil {
			return err
		}
		ev, err := inbox.LockTx(ctx, tx, report.Provider, report.EventID)
		if errors.Is(err, inbox.ErrNotFound) {
			return nil // its payload's partition is gone; the report keeps the reason
		}
		if err != nil {
			return err
		}
		if ev.Status == inbox.StatusDiscarded {
			return nil // an operator's decision stands
		}
		if err := inbox.SetStatusTx(ctx, tx, ev.Provider, ev.EventID, inbox.StatusPoison, reason, false); err != nil {
			return err
		}
		_, err = EnqueuePoisonAlertTx(ctx, tx, rc, w.OpsEmail, PoisonAlert{
			Provider: ev.Provider, EventID: ev.EventID, EventType: ev.Type, Error: reason,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("record refused report %s: %w", report.FileName, err)
	}
	w.logger().WarnContext(ctx, "settlement report refused", "provider", report.Provider, "file", report.FileName,
		"status", status, "reason", reason)
	return river.JobCancel(errors.New(reason))
}
