package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The balance snapshot (ledger_balance_snapshots) holds, at each of its
// cuts, every account's debits and credits in each currency over all the
// transactions posted before the cut. The cuts are every UTC midnight (the
// daily snapshot, kept) and one more, snapshotLag behind the latest
// refresh (replaced by the next), so that the trial balance as of now reads
// the few minutes since, not the whole day. It is derived:
// RefreshBalanceSnapshots builds it off the path that posts, and
// RebuildBalanceSnapshots makes it again from the entries alone. The ledger
// itself is never updated.
//
// # Why a snapshot stays exact
//
// posted_at can lie in the past: a late webhook is posted at the date the
// money moved, as long as its period is open. So a cut can miss a
// transaction posted after the cut was built. Two rules make such a
// transaction always visible to whoever reads the cut:
//
//  1. A posting dated more than snapshotLag before the database clock when
//     it is written marks its earliest posted_at in ledger_balance_stale,
//     in the same statement (a trigger). A reader that sees the posting
//     sees its mark, and uses no cut after it.
//  2. A posting dated later than that is not marked, so the builder must
//     see every such posting that a cut it builds covers. It notes the
//     clock, t, then takes an xid x, waits until no xid up to x is running,
//     and builds cuts up to t - snapshotLag only, in a snapshot that sees
//     every transaction with an xid up to x. A posting it cannot see got
//     its xid after x (xids are handed out in order), so it was written
//     after t; unmarked, it is dated after t - snapshotLag, past every cut
//     built.
//
// The builder removes the marks it saw (they are in its snapshot, so their
// postings are in what it builds) in the transaction that writes the cuts.

// snapshotLag is how late a posting may be written (after the date it is
// posted at) without marking the snapshot stale, and so how far the newest
// cut stays behind a refresh. The trigger of migration 0022 says the same
// interval. A minute covers a provider's delivery and the applying of a
// normal load; a later posting costs a mark and a recomputation of the
// cuts after it.
const snapshotLag = time.Minute

// snapshotLockKey keeps two builders apart (an arbitrary constant of
// ours, beside the migrations' and the test template's).
const snapshotLockKey = 7_236_000_003

// snapshotChunkCuts is how many cuts one statement builds: a month of
// days at a time, so that a rebuild of a large ledger is many short
// statements rather than one over the whole ledger.
const snapshotChunkCuts = 31

// ErrSnapshotBusy: the snapshot was not refreshed, because another builder
// is at work or a transaction older than the refresh was still running
// when it gave up waiting (xids are the server's: a long write transaction
// in another database of it holds a refresh back too). The next refresh
// catches up; meanwhile trial balances read older cuts and more entries,
// never a wrong sum.
var ErrSnapshotBusy = errors.New("ledger: balance snapshot busy")

// Beginner is what the functions that run their own transactions need:
// *pgxpool.Pool and *pgx.Conn satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// SnapshotOpts tunes a refresh.
type SnapshotOpts struct {
	// Rebuild discards every cut built and builds them all again from the
	// entries.
	Rebuild bool
	// Wait bounds how long the refresh waits for transactions older than
	// itself to finish; default 10 s.
	Wait time.Duration
}

// SnapshotResult says what a refresh did.
type SnapshotResult struct {
	Built   int       // cuts written
	Through time.Time // the newest cut: everything posted before it is in the snapshot; zero for an empty ledger
}

// RefreshBalanceSnapshots brings the balance snapshot up to a minute ago:
// it drops the cuts a late posting marked (and those after them), and
// builds every midnight from the last cut still good, and the cut a minute
// ago. It fails with ErrSnapshotBusy (try later) or a database error.
func RefreshBalanceSnapshots(ctx context.Context, db Beginner, opts *SnapshotOpts) (SnapshotResult, error) {
	var o SnapshotOpts
	if opts != nil {
		o = *opts
	}
	if o.Wait <= 0 {
		o.Wait = 10 * time.Second
	}
	t, xid, err := snapshotBarrier(ctx, db)
	if err != nil {
		return SnapshotResult{}, fmt.Errorf("refresh balance snapshots: %w", err)
	}
	horizon := t.Add(-snapshotLag).Truncate(time.Microsecond)

	deadline := time.Now().Add(o.Wait)
	for {
		res, err := buildSnapshots(ctx, db, xid, horizon, o.Rebuild)
		if !errors.Is(err, errOlderRunning) {
			if err != nil {
				return SnapshotResult{}, fmt.Errorf("refresh balance snapshots: %w", err)
			}
			return res, nil
		}
		if time.Now().After(deadline) {
			return SnapshotResult{}, fmt.Errorf("refresh balance snapshots: %w: a transaction older than %s is still running", ErrSnapshotBusy, t.Format(time.RFC3339))
		}
		select {
		case <-ctx.Done():
			return SnapshotResult{}, fmt.Errorf("refresh balance snapshots: %w", ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// RebuildBalanceSnapshots is RefreshBalanceSnapshots with Rebuild: the
// snapshot made again from the entries alone.
func RebuildBalanceSnapshots(ctx context.Context, db Beginner) (SnapshotResult, error) {
	return RefreshBalanceSnapshots(ctx, db, &SnapshotOpts{Rebuild: true})
}

// snapshotBarrier notes the database clock, then takes an xid: every
// transaction that wrote before that instant has a smaller xid.
func snapshotBarrier(ctx context.Context, db Beginner) (time.Time, string, error) {
	var (
		t   time.Time
		xid string
	)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Two statements, so that the clock is read before the xid is
		// taken.
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid)
	})
	if err != nil {
		return time.Time{}, "", fmt.Errorf("note the clock: %w", err)
	}
	return t.UTC(), xid, nil
}

var errOlderRunning = errors.New("older transactions still running")

// buildSnapshots writes the cuts up to horizon, in one REPEATABLE READ
// transaction whose snapshot sees every transaction with an xid up to xid
// finished (else errOlderRunning, nothing done).
func buildSnapshots(ctx context.Context, db Beginner, xid string, horizon time.Time, rebuild bool) (SnapshotResult, error) {
	var res SnapshotResult
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return res, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op

	var ready, locked bool
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8, pg_try_advisory_xact_lock($2)`,
		xid, snapshotLockKey).Scan(&ready, &locked); err != nil {
		return res, err
	}
	if !locked {
		return res, fmt.Errorf("%w: another builder is at work", ErrSnapshotBusy)
	}
	if !ready {
		return res, errOlderRunning
	}
	// The session's statement timeout is for requests; a rebuild of a
	// large ledger is many statements of a month each.
	if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '10min'`); err != nil {
		return res, err
	}

	if rebuild {
		if _, err := tx.Exec(ctx, `DELETE FROM ledger_balance_snapshots`); err != nil {
			return res, fmt.Errorf("drop snapshots: %w", err)
		}
	}
	// In this snapshot the DELETE removes exactly the marks it sees: a mark
	// committed since stays for the next refresh.
	var staleFrom *time.Time
	if err := tx.QueryRow(ctx, `
		WITH seen AS (DELETE FROM ledger_balance_stale RETURNING at)
		SELECT min(at) FROM seen`).Scan(&staleFrom); err != nil {
		return res, fmt.Errorf("read marks: %w", err)
	}
	if staleFrom != nil {
		if _, err := tx.Exec(ctx, `DELETE FROM ledger_balance_snapshots WHERE cut > $1`, *staleFrom); err != nil {
			return res, fmt.Errorf("drop stale cuts: %w", err)
		}
	}
	var base *time.Time
	if err := tx.QueryRow(ctx, `SELECT max(cut) FROM ledger_balance_snapshots`).Scan(&base); err != nil {
		return res, fmt.Errorf("find the last good cut: %w", err)
	}

	// The cuts to build: every midnight after base up to horizon, then
	// horizon itself.
	var from time.Time
	if base != nil {
		from = base.UTC()
	} else {
		var first *time.Time
		if err := tx.QueryRow(ctx, `SELECT min(posted_at) FROM ledger_transactions`).Scan(&first); err != nil {
			return res, fmt.Errorf("find the first posting: %w", err)
		}
		if first == nil {
			return res, tx.Commit(ctx) // an empty ledger: nothing to build
		}
		from = first.UTC().Truncate(24 * time.Hour)
	}
	var cuts []time.Time
	for c := from.Truncate(24*time.Hour).AddDate(0, 0, 1); !c.After(horizon); c = c.AddDate(0, 0, 1) {
		cuts = append(cuts, c)
	}
	if horizon.After(from) && (len(cuts) == 0 || !cuts[len(cuts)-1].Equal(horizon)) {
		cuts = append(cuts, horizon)
	}
	for len(cuts) > 0 {
		chunk := cuts[:min(len(cuts), snapshotChunkCuts)]
		cuts = cuts[len(chunk):]
		if _, err := tx.Exec(ctx, buildSnapshotCuts, base, chunk); err != nil {
			return res, fmt.Errorf("build the cuts %s to %s: %w", chunk[0].Format(time.RFC3339), chunk[len(chunk)-1].Format(time.RFC3339), err)
		}
		res.Built += len(chunk)
		last := chunk[len(chunk)-1]
		base = &last
	}
	// Only midnights are kept, and the newest cut.
	if _, err := tx.Exec(ctx, `
		DELETE FROM ledger_balance_snapshots
		WHERE cut < (SELECT max(cut) FROM ledger_balance_snapshots)
		  AND cut <> date_trunc('day', cut, 'UTC')`); err != nil {
		return res, fmt.Errorf("drop superseded cuts: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return SnapshotResult{}, err
	}
	if base != nil {
		res.Through = base.UTC()
	}
	return res, nil
}

// buildSnapshotCuts writes the cuts $2 (ascending, each after $1): the
// totals at the cut $1 (none when $1 is null) plus the movements posted
// since, summed cut after cut. A movement counts in the first cut after
// it: the next midnight, or the last cut when that comes first. A pair
// (account, currency) appears from its first entry on.
const buildSnapshotCuts = `
INSERT INTO ledger_balance_snapshots (cut, account, currency, debits, credits)
WITH cuts AS (
    SELECT unnest($2::timestamptz[]) AS cut
), moves AS (
    SELECT least(date_trunc('day', t.posted_at, 'UTC') + interval '1 day', (SELECT max(cut) FROM cuts)) AS cut,
           e.account, e.currency, sum(e.debit) AS debits, sum(e.credit) AS credits
    FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
    WHERE t.posted_at >= coalesce($1::timestamptz, '-infinity')
      AND t.posted_at < (SELECT max(cut) FROM cuts)
    GROUP BY 1, 2, 3
), base AS (
    SELECT account, currency, debits, credits FROM ledger_balance_snapshots WHERE cut = $1::timestamptz
), pairs AS (
    SELECT account, currency FROM base UNION SELECT account, currency FROM moves
), running AS (
    SELECT c.cut, p.account, p.currency,
           coalesce(b.debits, 0) + sum(coalesce(m.debits, 0)) OVER w AS debits,
           coalesce(b.credits, 0) + sum(coalesce(m.credits, 0)) OVER w AS credits
    FROM cuts c CROSS JOIN pairs p
    LEFT JOIN moves m ON (m.cut, m.account, m.currency) = (c.cut, p.account, p.currency)
    LEFT JOIN base b ON (b.account, b.currency) = (p.account, p.currency)
    WINDOW w AS (PARTITION BY p.account, p.currency ORDER BY c.cut)
)
SELECT cut, account, currency, debits, credits FROM running WHERE debits > 0 OR credits > 0`
