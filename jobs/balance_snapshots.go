package jobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/ledger"
)

// BalanceSnapshotsArgs asks for the ledger's balance snapshot to be brought
// up to a minute ago (ledger.RefreshBalanceSnapshots): the trial balance as
// of any instant then reads at most a day of entries, and as of now the
// minutes since the refresh.
type BalanceSnapshotsArgs struct{}

// Kind is stored in the database: never change it.
func (BalanceSnapshotsArgs) Kind() string { return "balance_snapshots" }

// InsertOpts runs the refresh on the maintenance queue, at most once per
// interval however many leaders come and go.
func (BalanceSnapshotsArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, UniqueOpts: river.UniqueOpts{ByPeriod: balanceSnapshotsEvery}}
}

// balanceSnapshotsEvery is how often the snapshot is refreshed: a
// midnight's cut is built within this of midnight, and cuts a late posting
// marked are built again as soon. A refresh sums what was posted since
// the previous one (two short transactions when nothing was).
const balanceSnapshotsEvery = 10 * time.Minute

// BalanceSnapshotsWorker refreshes the balance snapshot. It never touches
// the path that applies events: it reads the ledger and writes only the
// snapshot's own table.
type BalanceSnapshotsWorker struct {
	river.WorkerDefaults[BalanceSnapshotsArgs]
	Pool   *pgxpool.Pool
	Logger *slog.Logger
}

// Timeout lets a first build over a large ledger (a year of days, a month
// of entries per statement) finish.
func (w *BalanceSnapshotsWorker) Timeout(*river.Job[BalanceSnapshotsArgs]) time.Duration {
	return 30 * time.Minute
}

// Work implements river.Worker. A refresh that finds another at work, or a
// transaction older than itself still running, leaves the days to the next
// one.
func (w *BalanceSnapshotsWorker) Work(ctx context.Context, job *river.Job[BalanceSnapshotsArgs]) error {
	res, err := ledger.RefreshBalanceSnapshots(ctx, w.Pool, nil)
	if errors.Is(err, ledger.ErrSnapshotBusy) {
		w.Logger.InfoContext(ctx, "balance snapshot left to the next refresh", "reason", err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	if res.Built > 0 {
		w.Logger.InfoContext(ctx, "balance snapshot refreshed", "days_built", res.Built, "through", res.Through.Format(time.DateOnly))
	}
	return nil
}

// balanceSnapshotsPeriodic refreshes the snapshot every
// balanceSnapshotsEvery, and once when a new leader starts its scheduler.
func balanceSnapshotsPeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(balanceSnapshotsEvery),
		func() (river.JobArgs, *river.InsertOpts) { return BalanceSnapshotsArgs{}, nil },
		&river.PeriodicJobOpts{ID: "balance_snapshots", RunOnStart: true})
}
