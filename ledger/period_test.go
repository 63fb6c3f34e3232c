package ledger_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/ledger"
)

var (
	feb = mustPeriod("2026-02")
	mar = mustPeriod("2026-03")
	apr = mustPeriod("2026-04")
)

func mustPeriod(s string) ledger.Period {
	p, err := ledger.ParsePeriod(s)
	if err != nil {
		panic(err)
	}
	return p
}

// closePeriod closes p as "finance:test" in a transaction of its own.
func (b *testBundle) closePeriod(p ledger.Period) (ledger.ClosedPeriod, bool, error) {
	var (
		c       ledger.ClosedPeriod
		created bool
	)
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		c, created, err = ledger.ClosePeriodTx(b.ctx, tx, p, "finance:test", ledger.ExportSettings{}, time.Now())
		return err
	})
	return c, created, err
}

func (b *testBundle) postedAt(t *testing.T, ref string) (occurred, posted time.Time) {
	t.Helper()
	txn, err := ledger.TransactionByRef(b.ctx, b.pool, ref)
	require.NoError(t, err)
	return txn.OccurredAt, txn.PostedAt
}

func TestParsePeriod(t *testing.T) {
	t.Parallel()
	p, err := ledger.ParsePeriod("2026-03")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), p.Start)
	require.Equal(t, time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC), p.End())
	require.Equal(t, "2026-03", p.String())
	require.Equal(t, "2027-01", mustPeriod("2026-12").Next().String())
	require.Equal(t, p, ledger.PeriodOf(time.Date(2026, 3, 31, 23, 59, 59, 999999999, time.UTC)))
	for _, bad := range []string{"", "2026-3", "2026-13", "2026-00", "26-03", "2026-03-01", "2026/03", " 2026-03", "0001-01"} {
		_, err := ledger.ParsePeriod(bad)
		require.ErrorIs(t, err, ledger.ErrInvalidPeriod, bad)
	}
}

// TestCloseKeepsTheMonthAndMovesLatePostings: a closed month's trial
// balance is the balance as of its last instant, stored with its digest;
// closing twice answers the first close; a movement that occurred in the
// closed month and arrives later keeps its occurred_at and is posted at
// the first instant of the next month, so the closed balance never moves.
func TestCloseKeepsTheMonthAndMovesLatePostings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("100.00"), time.Date(2026, 2, 3, 10, 0, 0, 0, time.UTC)))
	b.mustPost(t, ledger.NewFee("fee:ch_1", "pi_1", "evt_1", "usd", d("3.20"), time.Date(2026, 2, 28, 23, 59, 59, 999999000, time.UTC)))
	b.mustPost(t, ledger.NewCapture("capture:ch_2", "pi_2", "evt_2", "eur", d("50.00"), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)))

	_, _, err := b.closePeriod(mar)
	require.ErrorIs(t, err, ledger.ErrPeriodOrder, "February holds postings and is open")
	require.ErrorContains(t, err, "close 2026-02 before 2026-03")

	closed, created, err := b.closePeriod(feb)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "finance:test", closed.ClosedBy)
	require.Len(t, closed.TrialBalance.Currencies, 1, "the eur capture is posted in March")
	require.Equal(t, "103.20", ledger.Format(closed.TrialBalance.Currencies[0].Debits, "usd"))
	require.Equal(t, ledger.TrialBalanceDigest(feb, closed.TrialBalance), closed.Digest)

	again, created, err := b.closePeriod(feb)
	require.NoError(t, err)
	require.False(t, created, "closing twice answers the first close")
	require.Equal(t, closed.ClosedAt, again.ClosedAt)
	require.Equal(t, closed.Digest, again.Digest)

	// Late: a refund that occurred in February, reported now.
	lateAt := time.Date(2026, 2, 20, 12, 0, 0, 0, time.UTC)
	b.mustPost(t, ledger.NewRefund("refund:re_1", "pi_1", "evt_3", "usd", d("40.00"), lateAt))
	occurred, posted := b.postedAt(t, "refund:re_1")
	require.Equal(t, lateAt, occurred, "the date the money moved is kept")
	require.Equal(t, mar.Start, posted, "posted at the first instant of the first open period")
	occurred, posted = b.postedAt(t, "capture:ch_1")
	require.Equal(t, occurred, posted, "a posting in an open period is posted when it occurred")

	stored, err := ledger.GetClosedPeriod(b.ctx, b.pool, feb)
	require.NoError(t, err)
	require.Equal(t, tbText(closed.TrialBalance), tbText(stored.TrialBalance))
	asOf, err := ledger.TrialBalanceAsOf(b.ctx, b.pool, feb.End().Add(-time.Microsecond))
	require.NoError(t, err)
	require.Equal(t, tbText(closed.TrialBalance), tbText(asOf), "the closed month's balance never moves")
	inMarch, err := ledger.TrialBalanceAsOf(b.ctx, b.pool, mar.Start)
	require.NoError(t, err)
	require.Equal(t, "143.20", ledger.Format(inMarch.Currencies[1].Debits, "usd"), "March absorbs the late refund")

	_, _, err = b.closePeriod(apr)
	require.ErrorIs(t, err, ledger.ErrPeriodOrder)
	require.ErrorContains(t, err, "close 2026-03 before 2026-04")
	_, _, err = b.closePeriod(mar)
	require.NoError(t, err)
	current := ledger.PeriodOf(time.Now())
	for p := apr; p.Start.Before(current.Start); p = p.Next() {
		_, _, err = b.closePeriod(p)
		require.NoError(t, err, p)
	}
	_, _, err = b.closePeriod(current)
	require.ErrorIs(t, err, ledger.ErrPeriodNotEnded, "the current month has not ended")
}

func TestCloseFirstPeriodBeforeAnyPosting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, created, err := b.closePeriod(mar)
	require.NoError(t, err, "nothing is posted before March")
	require.True(t, created)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("1.00"), time.Date(2026, 2, 3, 10, 0, 0, 0, time.UTC)))
	_, posted := b.postedAt(t, "capture:ch_1")
	require.Equal(t, apr.Start, posted, "every instant before the books' boundary is closed")
}

func TestListPeriods(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Date(2026, 5, 10, 0, 0, 0, 0, time.UTC)
	list, err := ledger.ListPeriods(b.ctx, b.pool, now)
	require.NoError(t, err)
	require.Len(t, list, 1, "an empty ledger: the current period")
	require.Equal(t, "2026-05", list[0].String())
	require.False(t, list[0].Closed)
	require.False(t, list[0].Closable, "it has not ended")

	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("1.00"), time.Date(2026, 2, 3, 10, 0, 0, 0, time.UTC)))
	_, _, err = b.closePeriod(feb)
	require.NoError(t, err)
	list, err = ledger.ListPeriods(b.ctx, b.pool, now)
	require.NoError(t, err)
	var got []string
	for _, p := range list {
		got = append(got, fmt.Sprintf("%s closed=%t closable=%t", p, p.Closed, p.Closable))
	}
	require.Equal(t, []string{
		"2026-05 closed=false closable=false",
		"2026-04 closed=false closable=false",
		"2026-03 closed=false closable=true",
		"2026-02 closed=true closable=false",
	}, got)
	require.Equal(t, "finance:test", list[3].ClosedBy)
	require.Len(t, list[3].Digest, 64)
}

// TestTrialBalanceDigest pins the documented canonical rendering.
func TestTrialBalanceDigest(t *testing.T) {
	t.Parallel()
	tb := ledger.TrialBalanceReport{Accounts: []ledger.AccountBalance{
		{Account: ledger.AccountSales, Currency: "usd", Debits: d("0"), Credits: d("100")},
		{Account: ledger.AccountProviderBalance, Currency: "usd", Debits: d("100"), Credits: d("0")},
		{Account: ledger.AccountSales, Currency: "jpy", Debits: d("0"), Credits: d("500")},
		{Account: ledger.AccountProviderBalance, Currency: "jpy", Debits: d("500"), Credits: d("0")},
	}}
	want := "period,2026-02\n" +
		"jpy,provider_balance,500,0\n" +
		"jpy,sales,0,500\n" +
		"usd,provider_balance,100.00,0.00\n" +
		"usd,sales,0.00,100.00\n"
	require.Equal(t, want, string(ledger.TrialBalanceDigestInput(feb, tb)))
	sum := sha256.Sum256([]byte(want))
	require.Equal(t, hex.EncodeToString(sum[:]), ledger.TrialBalanceDigest(feb, tb))
}

// TestDatabaseRefusesPostingInClosedPeriod bypasses package ledger: the
// owner's role, with SQL of its own, cannot post into a closed month, nor
// reopen it, not even with the replication role that switches ordinary
// triggers off.
func TestDatabaseRefusesPostingInClosedPeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("10.00"), time.Date(2026, 2, 3, 10, 0, 0, 0, time.UTC)))
	_, _, err := b.closePeriod(feb)
	require.NoError(t, err)

	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	var super bool
	require.NoError(t, conn.QueryRow(b.ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super))
	require.True(t, super, "the test runs as the owner")

	post := func(postedAt string) error {
		return pgx.BeginFunc(b.ctx, conn, func(tx pgx.Tx) error {
			var id int64
			err := tx.QueryRow(b.ctx, `
				INSERT INTO ledger_transactions (ref, kind, currency, occurred_at, posted_at, entry_count)
				VALUES ('raw:late', 'adjustment', 'usd', '2026-02-10T00:00:00Z', `+postedAt+`, 2) RETURNING id`).Scan(&id)
			if err != nil {
				return err
			}
			_, err = tx.Exec(b.ctx, `INSERT INTO ledger_entries (transaction_id, account, currency, debit, credit)
				VALUES ($1, 'bank', 'usd', 5, 0), ($1, 'sales', 'usd', 0, 5)`, id)
			return err
		})
	}
	for _, mode := range []string{"origin", "replica"} {
		_, err := conn.Exec(b.ctx, `SET session_replication_role = `+mode)
		require.NoError(t, err)
		for _, at := range []string{"'2026-02-10T00:00:00Z'", "'2026-02-28T23:59:59.999999Z'"} {
			err := post(at)
			requirePgError(t, err, "23514", "ledger_period_closed")
			require.ErrorContains(t, err, "in a closed period")
		}
		for _, stmt := range []string{
			`UPDATE ledger_books SET closed_through = '-infinity'`,
			`UPDATE ledger_books SET closed_through = '2026-01-01T00:00:00Z'`,
			`DELETE FROM ledger_books`,
			`TRUNCATE ledger_books`,
			`UPDATE ledger_periods SET digest = repeat('0', 64)`,
			`DELETE FROM ledger_periods`,
			`TRUNCATE ledger_periods CASCADE`,
		} {
			_, err := conn.Exec(b.ctx, stmt)
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "%s: %v", stmt, err)
			require.Equal(t, "23000", pgErr.Code, "%s: %s", stmt, pgErr.Message)
		}
	}
	_, err = conn.Exec(b.ctx, `RESET session_replication_role`)
	require.NoError(t, err)

	// Without posted_at, a row of SQL is posted by the rule: at the
	// boundary.
	require.NoError(t, post("DEFAULT"))
	occurred, posted := b.postedAt(t, "raw:late")
	require.Equal(t, time.Date(2026, 2, 10, 0, 0, 0, 0, time.UTC), occurred)
	require.Equal(t, mar.Start, posted)

	// A period row of SQL follows the close's rules too.
	_, err = conn.Exec(b.ctx, `INSERT INTO ledger_periods (period, starts_at, ends_at, closed_by, trial_balance, digest)
		VALUES ('2026-04', '2026-04-01T00:00:00Z', '2026-05-01T00:00:00Z', 'psql', '{}', repeat('0', 64))`)
	requirePgError(t, err, "23514", "ledger_period_order")
}

// TestCloseRacesPostings: postings in the month being closed, committed
// while the close runs, either count in its trial balance or are posted in
// the next month; none ever lands in the closed month behind its back.
func TestCloseRacesPostings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, ledger.NewCapture("capture:seed", "pi_0", "evt_0", "usd", d("1.00"), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)))

	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		posted  atomic.Int64
		started = make(chan struct{})
		once    sync.Once
	)
	for w := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				at := time.Date(2026, 2, 1+i%28, 12, 0, 0, 0, time.UTC)
				ref := fmt.Sprintf("capture:w%d_%d", w, i)
				if _, err := b.post(ledger.NewCapture(ref, "pi_"+ref, "evt", "usd", d("1.00"), at)); err != nil {
					t.Errorf("post %s: %v", ref, err)
					return
				}
				if posted.Add(1) > 20 {
					once.Do(func() { close(started) })
				}
			}
		})
	}
	<-started
	closed, _, err := b.closePeriod(feb)
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	var inFeb, moved, total int
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT count(*) FILTER (WHERE posted_at < '2026-03-01T00:00:00Z'),
		       count(*) FILTER (WHERE posted_at = '2026-03-01T00:00:00Z' AND occurred_at < posted_at),
		       count(*)
		FROM ledger_transactions`).Scan(&inFeb, &moved, &total))
	require.Equal(t, total, inFeb+moved, "every posting is in February or moved to March's first instant")
	require.Positive(t, moved, "postings after the close were moved")
	// The closed balance counts exactly the postings left in February.
	require.Equal(t, fmt.Sprintf("%d.00", inFeb), ledger.Format(closed.TrialBalance.Currencies[0].Debits, "usd"))
	asOf, err := ledger.TrialBalanceAsOf(b.ctx, b.pool, feb.End().Add(-time.Microsecond))
	require.NoError(t, err)
	require.Equal(t, tbText(closed.TrialBalance), tbText(asOf))
}

// tbText renders a trial balance for comparison: amounts by value, at
// their currency's scale.
func tbText(tb ledger.TrialBalanceReport) string {
	return string(ledger.TrialBalanceDigestInput(ledger.Period{}, tb))
}

// TestRepeatableReadPostingBehindACloseFails: a posting whose snapshot
// predates a close cannot see the boundary move; locking the books tells
// it (a serialization failure, retried), instead of letting it post into
// the closed month.
func TestRepeatableReadPostingBehindACloseFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("1.00"), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)))

	tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	// The transaction's snapshot is taken here, before the close.
	_, err = ledger.TrialBalance(b.ctx, tx)
	require.NoError(t, err)

	_, _, err = b.closePeriod(feb)
	require.NoError(t, err)

	_, err = ledger.PostTx(b.ctx, tx, ledger.NewCapture("capture:ch_2", "pi_2", "evt_2", "usd", d("1.00"), time.Date(2026, 2, 2, 0, 0, 0, 0, time.UTC)))
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "40001", pgErr.Code, pgErr.Message)
}

// TestAppRoleKeepsTheBooks: paygate_app, the role serve runs as, posts
// (locking the books), closes a month, refreshes the balance snapshot and
// exports, but cannot reopen a month or move the books' boundary.
func TestAppRoleKeepsTheBooks(t *testing.T) {
	t.Parallel()
	_, url := testdb.NewWithURL(t)
	app := testdb.AppRole(t, url)
	b := &testBundle{ctx: t.Context(), pool: app}
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("10.00"), time.Date(2026, 2, 3, 10, 0, 0, 0, time.UTC)))
	_, created, err := b.closePeriod(feb)
	require.NoError(t, err)
	require.True(t, created)
	b.mustPost(t, ledger.NewRefund("refund:re_1", "pi_1", "evt_2", "usd", d("1.00"), time.Date(2026, 2, 4, 10, 0, 0, 0, time.UTC)))
	_, posted := b.postedAt(t, "refund:re_1")
	require.Equal(t, mar.Start, posted)
	_, err = ledger.RefreshBalanceSnapshots(b.ctx, app, nil)
	require.NoError(t, err)
	closed, err := ledger.GetClosedPeriod(b.ctx, app, feb)
	require.NoError(t, err)
	_, _, err = ledger.PeriodJournalDigest(b.ctx, app, closed, ledger.JournalGeneric, 0)
	require.NoError(t, err)

	for _, stmt := range []string{
		`UPDATE ledger_books SET closed_through = '-infinity'`,
		`DELETE FROM ledger_periods`,
		`UPDATE ledger_period_exports SET bytes = 0`,
	} {
		_, err := app.Exec(b.ctx, stmt)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s: %v", stmt, err)
		require.Contains(t, []string{"23000", "42501"}, pgErr.Code, "%s: %s", stmt, pgErr.Message)
	}
}
