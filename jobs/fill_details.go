package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/statemachine"
)

// The payments stored before paygate kept the merchant's words about them
// (migration 0032) have none: this fill reads each one's stored events
// again, maps them with the mappers the applier uses, and merges what they
// report into the payment's details. statemachine.Details.Merge is
// commutative and idempotent, so the fill and the applier commute: an
// event applied while the fill runs, before or after the fill reaches its
// payment, ends in the same details. So the fill needs no pause of
// anything: it reads without locks, then locks only the payments whose
// details change, in id order as the applier does, for one short
// transaction per batch.
const (
	// fillDetailsBatch is how many payments one transaction fills.
	fillDetailsBatch = 200
	// fillDetailsSlice is how long one job fills before it lets the
	// maintenance queue's other jobs have their turn (it is snoozed and
	// goes on from where it stopped).
	fillDetailsSlice = 2 * time.Minute
	// fillDetailsRestFactor makes the fill rest this many times as long
	// as its last batch took before the next one, so that it takes at
	// most a twentieth of one connection's time and of a core while ingest
	// and applying share the machine with it: ingest at its most keeps
	// within a few percent of its rate alone (TestFillDetailsKeepsIngestRate;
	// at a tenth it lost about a tenth on two cores).
	fillDetailsRestFactor = 19
	// fillDetailsPressureRest is the least rest while webhooks wait on
	// their commits in numbers (Config.IngestPressure).
	fillDetailsPressureRest = time.Second
	// fillDetailsLockTimeout bounds the wait for a payment another
	// transaction holds: the batch fails, and is done again later,
	// rather than queue behind (and hold up) applying.
	fillDetailsLockTimeout = 2 * time.Second
	// fillDetailsLogEvery is how often progress is logged.
	fillDetailsLogEvery = 5 * time.Second
	// fillDetailsEvery is how often a fill is asked for; once done, a run
	// reads one row.
	fillDetailsEvery = 10 * time.Minute
)

// FillDetailsArgs asks for the payments stored before paygate kept their
// reference, customer, description and metadata to get them from their
// stored events.
type FillDetailsArgs struct{}

// Kind is stored in the database: never change it.
func (FillDetailsArgs) Kind() string { return "fill_payment_details" }

// InsertOpts puts the fill on the maintenance queue, one live job at a
// time whichever instance asks: one fill at a time across instances.
func (FillDetailsArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMaintenance, UniqueOpts: river.UniqueOpts{ByState: liveJobStates}}
}

// FillDetailsWorker runs the fill, fillDetailsSlice at a time.
type FillDetailsWorker struct {
	river.WorkerDefaults[FillDetailsArgs]
	filler *detailsFiller
}

// Timeout lets a slice end, with its last batch, well before River would
// call the job stuck.
func (w *FillDetailsWorker) Timeout(*river.Job[FillDetailsArgs]) time.Duration {
	return fillDetailsSlice + time.Minute
}

// Work implements river.Worker: it fills for a slice and, unless the fill
// is done, snoozes the job (which spends no attempt) to go on. A slice cut
// short by a shutdown is snoozed too: what it filled is kept, and the fill
// goes on from there.
func (w *FillDetailsWorker) Work(ctx context.Context, _ *river.Job[FillDetailsArgs]) error {
	done, err := w.filler.fill(ctx, nil, time.Now().Add(fillDetailsSlice))
	switch {
	case err != nil && ctx.Err() != nil:
		return river.JobSnooze(time.Second)
	case err != nil:
		return err
	case !done:
		return river.JobSnooze(time.Second)
	}
	return nil
}

// fillDetailsPeriodic asks for the fill when a leader starts its scheduler
// (so right after an upgrade) and every fillDetailsEvery, so that a fill
// whose job failed for good goes on.
func fillDetailsPeriodic() *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(fillDetailsEvery),
		func() (river.JobArgs, *river.InsertOpts) { return FillDetailsArgs{}, nil },
		&river.PeriodicJobOpts{ID: "fill_payment_details", RunOnStart: true})
}

// FillPaymentDetails runs the fill of payments' details to its end now, as
// the periodic fill_payment_details job does (resting between batches),
// or until ctx ends; a fill already done returns at once.
func (c *Client) FillPaymentDetails(ctx context.Context) error {
	for {
		done, err := c.filler.fill(ctx, c.River, time.Now().Add(fillDetailsSlice))
		if err != nil || done {
			return err
		}
	}
}

// detailsFiller fills payments' details, a batch a transaction.
type detailsFiller struct {
	pool     *pgxpool.Pool
	mappers  Mappers
	opsEmail string
	logger   *slog.Logger
	pressure func() bool
	// batch, restFactor and lockTimeout are fillDetailsBatch,
	// fillDetailsRestFactor and fillDetailsLockTimeout but in tests.
	batch       int
	restFactor  float64
	lockTimeout time.Duration
}

func newDetailsFiller(pool *pgxpool.Pool, config Config) *detailsFiller {
	return &detailsFiller{pool: pool, mappers: NewMappers(config.StripeReferenceKey), opsEmail: config.Email.OpsEmail,
		logger: config.Logger, pressure: config.IngestPressure,
		batch: fillDetailsBatch, restFactor: fillDetailsRestFactor, lockTimeout: fillDetailsLockTimeout}
}

// fillStep is what one batch did.
type fillStep struct {
	to       string // the last payment read
	read     int    // payments read
	filled   int    // payments whose details changed
	missing  int    // events whose payload is no longer stored
	detected int    // double charges it opened
	done     bool
}

// fill runs batches until the fill is done (true) or until has passed.
// rc inserts the email jobs: nil inside a River worker.
func (f *detailsFiller) fill(ctx context.Context, rc *river.Client[pgx.Tx], until time.Time) (done bool, err error) {
	state, err := ledger.GetDetailsFill(ctx, f.pool)
	if err != nil || state.Done {
		return state.Done, err
	}
	f.logger.InfoContext(ctx, "filling payments' details from their stored events",
		"after_id", state.AfterID, "filled", state.Filled)
	var (
		began    = time.Now()
		logged   = began
		total    fillStep
		busy     time.Duration // in batches, rests aside
		progress = func(msg string) {
			f.logger.InfoContext(ctx, msg, "after_id", state.AfterID, "filled", state.Filled,
				"payments_read", total.read, "payments_filled", total.filled, "events_without_payload", total.missing,
				"double_charges_detected", total.detected, "seconds", time.Since(began).Seconds(),
				"busy_seconds", busy.Seconds())
		}
	)
	for {
		batchBegan := time.Now()
		step, err := f.step(ctx, rc, state.AfterID)
		if errors.Is(err, ledger.ErrDetailsFillMoved) {
			// Another fill committed a batch meanwhile: go on from where
			// it is.
			if state, err = ledger.GetDetailsFill(ctx, f.pool); err != nil || state.Done {
				return state.Done, err
			}
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				f.logger.WarnContext(ctx, "filling payments' details stopped", "after_id", state.AfterID, "error", err.Error())
			}
			return false, err
		}
		busy += time.Since(batchBegan)
		state.AfterID, state.Filled = step.to, state.Filled+int64(step.filled)
		total.read += step.read
		total.filled += step.filled
		total.missing += step.missing
		total.detected += step.detected
		if step.done {
			progress("payments' details filled")
			return true, nil
		}
		if now := time.Now(); now.Sub(logged) >= fillDetailsLogEvery {
			logged = now
			progress("filling payments' details")
		}
		if time.Now().After(until) {
			progress("filling payments' details, to go on shortly")
			return false, nil
		}
		rest := time.Duration(float64(time.Since(batchBegan)) * f.restFactor)
		if f.pressure != nil && f.pressure() {
			rest = max(rest, fillDetailsPressureRest)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(rest):
		}
	}
}

// step fills the payments after after, up to f.batch of them. The events
// are read and mapped first, with no lock held; then one transaction locks
// the payments they report details of, merges, writes those whose details
// change, detects the double charges the references filled make, and
// records the step in the fill's row: all of it commits, or none.
func (f *detailsFiller) step(ctx context.Context, rc *river.Client[pgx.Tx], after string) (fillStep, error) {
	payments, err := ledger.PaymentEventsAfter(ctx, f.pool, after, f.batch)
	if err != nil {
		return fillStep{}, err
	}
	s := fillStep{to: after, read: len(payments), done: len(payments) < f.batch}
	var keys []inbox.Key
	for _, p := range payments {
		s.to = p.ID
		for _, id := range p.EventIDs {
			keys = append(keys, inbox.Key{Provider: p.Provider, EventID: id})
		}
	}
	events, err := inbox.GetMany(ctx, f.pool, keys)
	if err != nil {
		return fillStep{}, err
	}
	reported := map[string]statemachine.Details{}
	for _, p := range payments {
		for _, id := range p.EventIDs {
			ev, ok := events[inbox.Key{Provider: p.Provider, EventID: id}]
			if !ok {
				s.missing++ // dropped by the payload retention
				continue
			}
			// An event the mapper ignores or refuses was applied without
			// details, so it has none to give now either.
			fx, err := f.mappers.effectsOf(ev)
			if err != nil || fx.PaymentID != p.ID || fx.Details.IsZero() {
				continue
			}
			reported[p.ID] = reported[p.ID].Merge(fx.Details)
		}
	}

	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", f.lockTimeout.Milliseconds())); err != nil {
			return fmt.Errorf("set lock timeout: %w", err)
		}
		locked, err := ledger.LockPaymentsTx(ctx, tx, slices.Collect(maps.Keys(reported)))
		if err != nil {
			return err
		}
		var (
			changed []ledger.Payment
			charged []string
		)
		for _, id := range slices.Sorted(maps.Keys(reported)) {
			before, ok := locked[id]
			if !ok {
				continue
			}
			p := before
			p.Details = before.Details.Merge(reported[id])
			if sameDetails(before.Details, p.Details) {
				continue
			}
			changed = append(changed, p)
			// A reference learnt for a payment already net captured may
			// make a double charge of an order paid twice before the
			// upgrade.
			charged = append(charged, chargedReferences(before, p)...)
		}
		if err := ledger.SaveDetailsTx(ctx, tx, changed); err != nil {
			return err
		}
		opened, err := ledger.DetectDoubleChargesTx(ctx, tx, charged)
		if err != nil {
			return err
		}
		emails := make([]Email, 0, len(opened))
		for _, d := range opened {
			emails = append(emails, doubleChargeAlert(d, f.opsEmail))
		}
		if _, err := EnqueueEmailsTx(ctx, tx, rc, emails); err != nil {
			return err
		}
		s.filled, s.detected = len(changed), len(opened)
		return ledger.AdvanceDetailsFillTx(ctx, tx, after, s.to, s.filled, s.done)
	})
	if err != nil {
		if errors.Is(err, ledger.ErrDetailsFillMoved) {
			return fillStep{}, err
		}
		return fillStep{}, fmt.Errorf("fill details of payments after %q: %w", after, err)
	}
	return s, nil
}

// sameDetails reports whether a and b hold the same values from the same
// events.
func sameDetails(a, b statemachine.Details) bool {
	return a.Equal(b) && a.Stamps.Equal(b.Stamps)
}
