package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/ledger"
)

type testBundle struct {
	ctx  context.Context
	pool *pgxpool.Pool
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{ctx: t.Context(), pool: testdb.New(t)}
}

// post posts txn in a transaction of its own and commits it, as the worker
// does.
func (b *testBundle) post(txn ledger.Transaction) (created bool, err error) {
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		created, err = ledger.PostTx(b.ctx, tx, txn)
		return err
	})
	return created, err
}

func (b *testBundle) mustPost(t *testing.T, txn ledger.Transaction) {
	t.Helper()
	created, err := b.post(txn)
	require.NoError(t, err, txn.Ref)
	require.True(t, created, txn.Ref)
}

func (b *testBundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

func TestPostTxIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first := ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("360.00"), t0)
	created, err := b.post(first)
	require.NoError(t, err)
	require.True(t, created)

	// The same movement reported by another event, later, with the amount
	// at another scale: a duplicate, not a conflict.
	again := ledger.NewCapture("capture:ch_1", "pi_1", "evt_2", "usd", d("360"), t0.Add(time.Hour))
	created, err = b.post(again)
	require.NoError(t, err)
	require.False(t, created)

	// And twice inside one database transaction.
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		txn := ledger.NewRefund("refund:re_1", "pi_1", "evt_3", "usd", d("10.00"), t0)
		created, err := ledger.PostTx(b.ctx, tx, txn)
		require.NoError(t, err)
		require.True(t, created)
		created, err = ledger.PostTx(b.ctx, tx, txn)
		require.NoError(t, err)
		require.False(t, created)
		return nil
	})
	require.NoError(t, err)

	require.Equal(t, 2, b.count(t, "ledger_transactions"))
	require.Equal(t, 4, b.count(t, "ledger_entries"))

	stored, err := ledger.TransactionByRef(b.ctx, b.pool, "capture:ch_1")
	require.NoError(t, err)
	require.Equal(t, "evt_1", stored.EventID, "the first report is kept")
	require.True(t, stored.OccurredAt.Equal(t0))
	require.Equal(t, time.UTC, stored.OccurredAt.Location())
	require.Equal(t, ledger.KindCapture, stored.Kind)
	require.Equal(t, "pi_1", stored.PaymentID)
	require.Len(t, stored.Entries, 2)
	require.Equal(t, ledger.AccountProviderBalance, stored.Entries[0].Account)
	require.Equal(t, "360.00", ledger.Format(stored.Entries[0].Debit, "usd"))
	require.Equal(t, "0.00", ledger.Format(stored.Entries[0].Credit, "usd"))
	require.Equal(t, ledger.AccountSales, stored.Entries[1].Account)
	require.Equal(t, "360.00", ledger.Format(stored.Entries[1].Credit, "usd"))

	// Stored at the currency's scale, for people reading the table directly.
	var raw string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT debit::text FROM ledger_entries WHERE account = 'provider_balance' AND debit > 300`).Scan(&raw))
	require.Equal(t, "360.00", raw)
}

func TestPostTxRefConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const ref = "capture:ch_1"
	b.mustPost(t, ledger.NewCapture(ref, "pi_1", "evt_1", "usd", d("360.00"), t0))

	for _, tc := range []struct {
		differs string // how the detail names it
		txn     ledger.Transaction
	}{
		{"entries", ledger.NewCapture(ref, "pi_1", "evt_2", "usd", d("360.01"), t0)},
		{"kind", ledger.NewDisputeReinstatement(ref, "pi_1", "evt_2", "usd", d("360.00"), t0)},
		{"currency", ledger.NewCapture(ref, "pi_1", "evt_2", "eur", d("360.00"), t0)},
		{"payment", ledger.NewCapture(ref, "pi_2", "evt_2", "usd", d("360.00"), t0)},
		{"entries", ledger.Transaction{Ref: ref, Kind: ledger.KindCapture, Currency: "usd", OccurredAt: t0, PaymentID: "pi_1", Entries: []ledger.Entry{
			ledger.Debit(ledger.AccountProviderBalance, d("180.00")), ledger.Credit(ledger.AccountSales, d("180.00")),
		}}},
	} {
		created, err := b.post(tc.txn)
		require.False(t, created, tc.differs)
		require.ErrorIs(t, err, ledger.ErrRefConflict, tc.differs)
		var conflict *ledger.RefConflictError
		require.ErrorAs(t, err, &conflict, tc.differs)
		require.Equal(t, ref, conflict.Ref)
		require.Contains(t, conflict.Detail, tc.differs+":")
	}

	stored, err := ledger.TransactionByRef(b.ctx, b.pool, ref)
	require.NoError(t, err)
	require.Equal(t, "360.00", ledger.Format(stored.Amount(), "usd"), "the stored transaction is untouched")
	require.Equal(t, 1, b.count(t, "ledger_transactions"))
}

func TestPostTxValidatesBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range invalidTransactions() {
		created, err := b.post(tc.txn)
		require.False(t, created, tc.name)
		for _, want := range tc.want {
			require.ErrorIs(t, err, want, tc.name)
		}
	}
	require.Zero(t, b.count(t, "ledger_transactions"))
	require.Zero(t, b.count(t, "ledger_entries"))

	b.mustPost(t, ledger.Transaction{
		Ref: "adjustment:1", Kind: ledger.KindAdjustment, Currency: "usd", OccurredAt: t0,
		Entries: []ledger.Entry{
			ledger.Debit(ledger.AccountBank, d("95.00")),
			ledger.Debit(ledger.AccountFees, d("5.00")),
			ledger.Credit(ledger.AccountPayoutsInTransit, d("100.00")),
		},
	})
}

func TestPostTxConcurrentSameRef(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 20
	start := make(chan struct{})
	var wg sync.WaitGroup
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			txn := ledger.NewCapture("capture:ch_race", "pi_race", fmt.Sprintf("evt_%d", i), "jpy", d("5000"), t0.Add(time.Duration(i)*time.Second))
			created[i], errs[i] = b.post(txn)
		})
	}
	close(start)
	wg.Wait()

	winners := 0
	for i := range n {
		require.NoError(t, errs[i], "goroutine %d", i)
		if created[i] {
			winners++
		}
	}
	require.Equal(t, 1, winners)
	require.Equal(t, 1, b.count(t, "ledger_transactions"))
	require.Equal(t, 2, b.count(t, "ledger_entries"))
}

// Racing copies with different content: the one that commits first wins;
// the others learn of the conflict instead of being silently dropped.
func TestPostTxConcurrentConflict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 10
	start := make(chan struct{})
	var wg sync.WaitGroup
	created := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			amount := d("10.00")
			if i%2 == 1 {
				amount = d("20.00")
			}
			created[i], errs[i] = b.post(ledger.NewRefund("refund:re_race", "pi_1", "evt", "usd", amount, t0))
		})
	}
	close(start)
	wg.Wait()

	stored, err := ledger.TransactionByRef(b.ctx, b.pool, "refund:re_race")
	require.NoError(t, err)
	winners := 0
	for i := range n {
		mine := d("10.00")
		if i%2 == 1 {
			mine = d("20.00")
		}
		switch {
		case created[i]:
			winners++
			require.NoError(t, errs[i])
		case mine.Equal(stored.Amount()):
			require.NoError(t, errs[i], "goroutine %d posted the winner's content", i)
		default:
			require.ErrorIs(t, errs[i], ledger.ErrRefConflict, "goroutine %d", i)
		}
	}
	require.Equal(t, 1, winners)
}

func TestReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Posted out of order, as events arrive.
	b.mustPost(t, ledger.NewRefund("refund:re_1", "pi_1", "evt_3", "usd", d("40.00"), t0.Add(2*time.Hour)))
	b.mustPost(t, ledger.NewFee("fee:ch_1", "pi_1", "evt_1", "usd", d("3.20"), t0)) // same instant as the capture: ref breaks the tie
	b.mustPost(t, ledger.NewCapture("capture:ch_1", "pi_1", "evt_1", "usd", d("100.00"), t0))
	b.mustPost(t, ledger.NewCapture("capture:ch_2", "pi_2", "evt_4", "usd", d("7.00"), t0.Add(30*time.Minute)))
	b.mustPost(t, ledger.NewPayout("payout:po_1", "evt_5", "usd", d("50.00"), t0.Add(time.Hour)))

	refs := func(ts []ledger.Transaction) []string {
		out := []string{}
		for _, x := range ts {
			out = append(out, x.Ref)
		}
		return out
	}

	ts, err := ledger.TransactionsForPayment(b.ctx, b.pool, "pi_1")
	require.NoError(t, err)
	require.Equal(t, []string{"capture:ch_1", "fee:ch_1", "refund:re_1"}, refs(ts))
	require.Equal(t, ledger.KindRefund, ts[2].Kind)
	require.Equal(t, "40.00", ledger.Format(ts[2].Amount(), "usd"))

	ts, err = ledger.TransactionsForPayment(b.ctx, b.pool, "pi_none")
	require.NoError(t, err)
	require.NotNil(t, ts, "an empty list, so JSON says []")
	require.Empty(t, ts)

	// [from, to): the refund exactly at `to` belongs to the next window.
	ts, err = ledger.TransactionsBetween(b.ctx, b.pool, t0, t0.Add(2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{"capture:ch_1", "fee:ch_1", "capture:ch_2", "payout:po_1"}, refs(ts))
	ts, err = ledger.TransactionsBetween(b.ctx, b.pool, t0.Add(time.Nanosecond*1000), t0.Add(3*time.Hour))
	require.NoError(t, err)
	require.Equal(t, []string{"capture:ch_2", "payout:po_1", "refund:re_1"}, refs(ts))

	payout, err := ledger.TransactionByRef(b.ctx, b.pool, "payout:po_1")
	require.NoError(t, err)
	require.Empty(t, payout.PaymentID)
	var nullPayment bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT payment_id IS NULL FROM ledger_transactions WHERE ref = 'payout:po_1'`).Scan(&nullPayment))
	require.True(t, nullPayment, "no payment is NULL, not ''")

	_, err = ledger.TransactionByRef(b.ctx, b.pool, "capture:nope")
	require.ErrorIs(t, err, ledger.ErrNotFound)

	// Reads also work inside the caller's transaction.
	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := ledger.PostTx(b.ctx, tx, ledger.NewCapture("capture:ch_3", "pi_3", "evt_6", "usd", d("1.00"), t0))
		require.NoError(t, err)
		ts, err := ledger.TransactionsForPayment(b.ctx, tx, "pi_3")
		require.NoError(t, err)
		require.Len(t, ts, 1)
		return errors.New("roll back")
	})
	require.Error(t, err)
	_, err = ledger.TransactionByRef(b.ctx, b.pool, "capture:ch_3")
	require.ErrorIs(t, err, ledger.ErrNotFound)
}

func TestLargeAmountsAreExactInTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, currency := range []string{"jpy", "usd", "kwd"} {
		amount, err := ledger.FromMinor(999999999999, currency)
		require.NoError(t, err)
		b.mustPost(t, ledger.NewCapture(fmt.Sprintf("capture:big_%d", i), "pi_big", "evt", currency, amount, t0))
		bal, err := ledger.Balance(b.ctx, b.pool, ledger.AccountProviderBalance, currency)
		require.NoError(t, err)
		require.True(t, bal.Equal(amount), "%s: %s", currency, bal)
		minor, err := ledger.ToMinor(bal, currency)
		require.NoError(t, err)
		require.Equal(t, int64(999999999999), minor)
	}
	ts, err := ledger.TransactionsForPayment(b.ctx, b.pool, "pi_big")
	require.NoError(t, err)
	require.Equal(t, "999999999999", ledger.Format(ts[0].Amount(), "jpy"))
	require.Equal(t, "9999999999.99", ledger.Format(ts[1].Amount(), "usd"))
	require.Equal(t, "999999999.999", ledger.Format(ts[2].Amount(), "kwd"))
}

func TestTrialBalance(t *testing.T) {
	t.Parallel()
	b := setup(t)

	tb, err := ledger.TrialBalance(b.ctx, b.pool)
	require.NoError(t, err)
	require.NotNil(t, tb.Currencies)
	require.Empty(t, tb.Currencies)
	require.NotNil(t, tb.Accounts)

	for _, txn := range []ledger.Transaction{
		ledger.NewCapture("c1", "pi_1", "e", "usd", d("100.00"), t0),
		ledger.NewFee("f1", "pi_1", "e", "usd", d("3.20"), t0),
		ledger.NewRefund("r1", "pi_1", "e", "usd", d("40.00"), t0),
		ledger.NewRefundReversal("rr1", "pi_1", "e", "usd", d("15.00"), t0),
		ledger.NewDisputeWithdrawal("dw1", "pi_1", "e", "usd", d("60.00"), t0),
		ledger.NewDisputeReinstatement("dr1", "pi_1", "e", "usd", d("60.00"), t0),
		ledger.NewPayout("p1", "e", "usd", d("30.00"), t0),
		ledger.NewPayoutReversal("pr1", "e", "usd", d("30.00"), t0),
		ledger.NewPayout("p2", "e", "usd", d("20.00"), t0),
		ledger.NewCapture("c2", "pi_2", "e", "jpy", d("5000"), t0),
		ledger.NewRefund("r2", "pi_2", "e", "jpy", d("1000"), t0),
		ledger.NewCapture("c3", "pi_3", "e", "kwd", d("1.234"), t0),
	} {
		b.mustPost(t, txn)
	}

	tb, err = ledger.TrialBalance(b.ctx, b.pool)
	require.NoError(t, err)

	type cur struct{ Currency, Debits, Credits string }
	var curs []cur
	for _, c := range tb.Currencies {
		require.True(t, c.Balanced, c.Currency)
		curs = append(curs, cur{c.Currency, ledger.Format(c.Debits, c.Currency), ledger.Format(c.Credits, c.Currency)})
	}
	require.Equal(t, []cur{
		{"jpy", "6000", "6000"},
		{"kwd", "1.234", "1.234"},
		{"usd", "358.20", "358.20"},
	}, curs)

	type acct struct {
		Account                  ledger.Account
		Currency                 string
		Debits, Credits, Balance string
	}
	var accts []acct
	for _, a := range tb.Accounts {
		accts = append(accts, acct{a.Account, a.Currency,
			ledger.Format(a.Debits, a.Currency), ledger.Format(a.Credits, a.Currency), ledger.Format(a.Balance, a.Currency)})
	}
	require.Equal(t, []acct{
		{ledger.AccountProviderBalance, "jpy", "5000", "1000", "4000"},
		{ledger.AccountSales, "jpy", "0", "5000", "-5000"},
		{ledger.AccountRefunds, "jpy", "1000", "0", "1000"},
		{ledger.AccountProviderBalance, "kwd", "1.234", "0.000", "1.234"},
		{ledger.AccountSales, "kwd", "0.000", "1.234", "-1.234"},
		{ledger.AccountProviderBalance, "usd", "205.00", "153.20", "51.80"},
		{ledger.AccountPayoutsInTransit, "usd", "50.00", "30.00", "20.00"},
		{ledger.AccountSales, "usd", "0.00", "100.00", "-100.00"},
		{ledger.AccountRefunds, "usd", "40.00", "15.00", "25.00"},
		{ledger.AccountDisputeLosses, "usd", "60.00", "60.00", "0.00"},
		{ledger.AccountFees, "usd", "3.20", "0.00", "3.20"},
	}, accts)

	bal, err := ledger.Balance(b.ctx, b.pool, ledger.AccountProviderBalance, "usd")
	require.NoError(t, err)
	require.Equal(t, "51.80", ledger.Format(bal, "usd"))
	bal, err = ledger.Balance(b.ctx, b.pool, ledger.AccountBank, "usd")
	require.NoError(t, err)
	require.Equal(t, "0.00", ledger.Format(bal, "usd"))
	_, err = ledger.Balance(b.ctx, b.pool, "cash", "usd")
	require.ErrorIs(t, err, ledger.ErrInvalidAccount)
	_, err = ledger.Balance(b.ctx, b.pool, ledger.AccountFees, "USD")
	require.ErrorIs(t, err, ledger.ErrUnknownCurrency)
}

// Balanced must be able to say false, and the ledger's triggers must not
// be a matter of manners. A superuser's session_replication_role = replica
// skips ordinary triggers; the ledger's are ENABLE ALWAYS, so in replica
// mode an entry added to a posted transaction is still refused at commit
// and every UPDATE, DELETE and TRUNCATE still refused. What is left is the
// tables' owner disabling a trigger by name (which paygate_app, the role
// serve runs as, cannot do): that tampering gets in, and the trial balance
// shows it.
func TestTrialBalanceShowsTampering(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustPost(t, ledger.NewCapture("c1", "pi_1", "e", "usd", d("100.00"), t0))
	const tamper = `INSERT INTO ledger_entries (transaction_id, account, currency, debit)
		SELECT id, 'fees', 'usd', 1.00 FROM ledger_transactions WHERE ref = 'c1'`

	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(b.ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	_, err = conn.Exec(b.ctx, tamper)
	requirePgError(t, err, "23514", "ledger_transaction_entries")
	for _, stmt := range []string{
		`UPDATE ledger_entries SET debit = debit * 2 WHERE debit > 0`,
		`UPDATE ledger_transactions SET event_id = 'evt_forged'`,
		`DELETE FROM ledger_entries`,
		`DELETE FROM ledger_transactions`,
		`TRUNCATE ledger_entries, ledger_transactions`,
	} {
		_, err = conn.Exec(b.ctx, stmt)
		requirePgError(t, err, "23000", "ledger_append_only")
	}
	_, err = conn.Exec(b.ctx, `RESET session_replication_role`)
	require.NoError(t, err)
	tb, err := ledger.TrialBalance(b.ctx, b.pool)
	require.NoError(t, err)
	require.True(t, tb.Currencies[0].Balanced, "replica mode changed nothing")

	err = pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		for _, stmt := range []string{
			`ALTER TABLE ledger_entries DISABLE TRIGGER ledger_entries_within_count`,
			tamper,
			`ALTER TABLE ledger_entries ENABLE ALWAYS TRIGGER ledger_entries_within_count`,
		} {
			if _, err := tx.Exec(b.ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)

	tb, err = ledger.TrialBalance(b.ctx, b.pool)
	require.NoError(t, err)
	require.Len(t, tb.Currencies, 1)
	require.False(t, tb.Currencies[0].Balanced)
	require.Equal(t, "101.00", ledger.Format(tb.Currencies[0].Debits, "usd"))
}

// Invariant 3 at the ledger's level: posting the same movements in any
// order, any number of times, gives the same ledger.
func TestPostingIsOrderFreeProperty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	movements := []ledger.Transaction{
		ledger.NewCapture("c1", "pi_1", "e1", "usd", d("100.00"), t0),
		ledger.NewFee("f1", "pi_1", "e1", "usd", d("3.20"), t0),
		ledger.NewRefund("r1", "pi_1", "e2", "usd", d("40.00"), t0.Add(time.Hour)),
		ledger.NewRefundReversal("rr1", "pi_1", "e3", "usd", d("40.00"), t0.Add(2*time.Hour)),
		ledger.NewDisputeWithdrawal("dw1", "pi_1", "e4", "usd", d("60.00"), t0.Add(3*time.Hour)),
		ledger.NewCapture("c2", "pi_2", "e5", "jpy", d("5000"), t0),
		ledger.NewPayout("p1", "e6", "usd", d("30.00"), t0.Add(4*time.Hour)),
	}

	// snapshot posts txns in one database transaction, reads the ledger
	// back and rolls back, leaving the database empty for the next run.
	snapshot := func(txns []ledger.Transaction) (string, error) {
		var out string
		err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			for _, txn := range txns {
				if _, err := ledger.PostTx(b.ctx, tx, txn); err != nil {
					return err
				}
			}
			tb, err := ledger.TrialBalance(b.ctx, tx)
			if err != nil {
				return err
			}
			for _, a := range tb.Accounts {
				out += fmt.Sprintf("%s %s %s\n", a.Account, a.Currency, ledger.Format(a.Balance, a.Currency))
			}
			for _, pi := range []string{"pi_1", "pi_2"} {
				ts, err := ledger.TransactionsForPayment(b.ctx, tx, pi)
				if err != nil {
					return err
				}
				for _, x := range ts {
					out += fmt.Sprintf("%s %s %s\n", pi, x.Ref, ledger.Format(x.Amount(), x.Currency))
				}
			}
			return errRollback
		})
		if errors.Is(err, errRollback) {
			err = nil
		}
		return out, err
	}

	want, err := snapshot(movements)
	require.NoError(t, err)
	rapid.Check(t, func(rt *rapid.T) {
		deliveries := rapid.SliceOfN(rapid.IntRange(0, len(movements)-1), len(movements), 3*len(movements)).Draw(rt, "extra")
		order := rapid.Permutation(append(deliveries, indexes(len(movements))...)).Draw(rt, "order")
		txns := make([]ledger.Transaction, len(order))
		for i, j := range order {
			txns[i] = movements[j]
			txns[i].EventID = fmt.Sprintf("evt_delivery_%d", i) // each delivery is its own event
		}
		got, err := snapshot(txns)
		if err != nil {
			rt.Fatalf("posting %v: %v", order, err)
		}
		if got != want {
			rt.Fatalf("order %v gives\n%s\nwant\n%s", order, got, want)
		}
	})
}

var errRollback = errors.New("roll back")

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
