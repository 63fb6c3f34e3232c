package ledger_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/statemachine"
)

// closedTx is a transaction already rolled back: a call given it fails if
// it touches the database, so succeeding with it proves it did not.
func closedTx(t *testing.T, pool *pgxpool.Pool) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(t.Context()))
	return tx
}

func (b *testBundle) refs(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT ref FROM ledger_transactions ORDER BY ref`)
	require.NoError(t, err)
	refs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return refs
}

func TestPostManyTx(t *testing.T) {
	t.Parallel()
	stored := ledger.NewCapture("capture:stored", "pi_1", "evt_0", "usd", d("10.00"), t0)
	// The same movements reported again by other events, later, with the
	// amount at another scale: duplicates, not conflicts.
	storedAgain := ledger.NewCapture("capture:stored", "pi_1", "evt_9", "usd", d("10"), t0.Add(time.Hour))
	storedOther := ledger.NewCapture("capture:stored", "pi_1", "evt_9", "usd", d("11.00"), t0)
	a := ledger.NewCapture("capture:a", "pi_1", "evt_1", "usd", d("360.00"), t0)
	aAgain := ledger.NewCapture("capture:a", "pi_1", "evt_2", "usd", d("360"), t0.Add(time.Minute))
	aOther := ledger.NewCapture("capture:a", "pi_2", "evt_2", "usd", d("360.00"), t0)
	b := ledger.NewRefund("refund:b", "pi_1", "evt_1", "usd", d("4.00"), t0)

	for _, tc := range []struct {
		name     string
		ts       []ledger.Transaction
		created  []bool
		conflict string   // the ref of the expected *RefConflictError, or ""
		detail   string   // what its Detail names
		after    []string // the ledger's refs once the caller committed, or rolled back on error
	}{
		{
			name:    "new and already stored",
			ts:      []ledger.Transaction{a, storedAgain, b},
			created: []bool{true, false, true},
			after:   []string{"capture:a", "capture:stored", "refund:b"},
		},
		{
			name:    "one ref twice, identical",
			ts:      []ledger.Transaction{aAgain, b, a, storedAgain, stored},
			created: []bool{true, true, false, false, false},
			after:   []string{"capture:a", "capture:stored", "refund:b"},
		},
		{
			name:     "stored with different content",
			ts:       []ledger.Transaction{a, storedOther, b},
			conflict: "capture:stored",
			detail:   "entries:",
			after:    []string{"capture:stored"},
		},
		{
			name:     "one ref twice, different",
			ts:       []ledger.Transaction{a, b, aOther},
			conflict: "capture:a",
			detail:   "payment:",
			after:    []string{"capture:stored"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bb := setup(t)
			bb.mustPost(t, stored)

			var created []bool
			err := pgx.BeginFunc(bb.ctx, bb.pool, func(tx pgx.Tx) (err error) {
				created, err = ledger.PostManyTx(bb.ctx, tx, tc.ts)
				return err
			})
			if tc.conflict == "" {
				require.NoError(t, err)
				require.Equal(t, tc.created, created)
			} else {
				require.ErrorIs(t, err, ledger.ErrRefConflict)
				var conflict *ledger.RefConflictError
				require.ErrorAs(t, err, &conflict)
				require.Equal(t, tc.conflict, conflict.Ref)
				require.Contains(t, conflict.Detail, tc.detail)
				require.ErrorContains(t, err, "post "+tc.conflict+": ")
				require.Nil(t, created)
			}
			require.Equal(t, tc.after, bb.refs(t))
			require.Equal(t, 2*len(tc.after), bb.count(t, "ledger_entries"))

			got, err := ledger.TransactionByRef(bb.ctx, bb.pool, "capture:stored")
			require.NoError(t, err)
			require.Equal(t, "evt_0", got.EventID, "the stored transaction is untouched")
			if slices.Contains(tc.after, "capture:a") {
				got, err := ledger.TransactionByRef(bb.ctx, bb.pool, "capture:a")
				require.NoError(t, err)
				require.Equal(t, tc.ts[slices.IndexFunc(tc.ts, func(x ledger.Transaction) bool { return x.Ref == "capture:a" })].EventID,
					got.EventID, "the first of a ref given twice is the one stored")
			}
		})
	}
}

func TestPostManyTxValidatesBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A closed transaction fails any statement: the errors below come from
	// before the first one.
	tx := closedTx(t, b.pool)
	for _, tc := range invalidTransactions() {
		valid := ledger.NewCapture("capture:ok", "pi_1", "evt_1", "usd", d("1.00"), t0)
		created, err := ledger.PostManyTx(b.ctx, tx, []ledger.Transaction{valid, tc.txn})
		require.Nil(t, created, tc.name)
		for _, want := range tc.want {
			require.ErrorIs(t, err, want, tc.name)
		}
		require.ErrorContains(t, err, "post "+tc.txn.Ref+": ", tc.name)
	}

	created, err := ledger.PostManyTx(b.ctx, tx, nil)
	require.NoError(t, err, "nothing to post touches nothing")
	require.Nil(t, created)

	// A conflict inside the batch is found before the database too.
	_, err = ledger.PostManyTx(b.ctx, tx, []ledger.Transaction{
		ledger.NewFee("fee:1", "pi_1", "evt_1", "usd", d("1.00"), t0),
		ledger.NewFee("fee:1", "pi_1", "evt_2", "usd", d("2.00"), t0),
	})
	require.ErrorIs(t, err, ledger.ErrRefConflict)
}

// Entries keep their order within each transaction, whatever the order of
// the refs, and amounts are stored at each currency's scale.
func TestPostManyTxEntriesAndCurrencies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ts := []ledger.Transaction{
		{Ref: "z:adjustment", Kind: ledger.KindAdjustment, Currency: "usd", OccurredAt: t0, EventID: "evt_1", Entries: []ledger.Entry{
			ledger.Credit(ledger.AccountPayoutsInTransit, d("100")),
			ledger.Debit(ledger.AccountFees, d("5.00")),
			ledger.Debit(ledger.AccountBank, d("95.0")),
		}},
		ledger.NewCapture("m:jpy", "pi_jpy", "evt_2", "jpy", d("5000"), t0),
		{Ref: "a:adjustment", Kind: ledger.KindAdjustment, Currency: "kwd", OccurredAt: t0, Entries: []ledger.Entry{
			ledger.Debit(ledger.AccountSales, d("1.5")),
			ledger.Credit(ledger.AccountBank, d("1.234")),
			ledger.Credit(ledger.AccountFees, d("0.266")),
		}},
	}
	var created []bool
	err := pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) (err error) {
		created, err = ledger.PostManyTx(b.ctx, tx, ts)
		return err
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true}, created)

	rows, err := b.pool.Query(b.ctx, `
		SELECT t.ref, coalesce(t.payment_id, '<null>'), e.account, e.currency, e.debit::text, e.credit::text
		FROM ledger_entries e JOIN ledger_transactions t ON t.id = e.transaction_id
		ORDER BY t.ref, e.id`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var ref, payment, account, currency, debit, credit string
		require.NoError(t, rows.Scan(&ref, &payment, &account, &currency, &debit, &credit))
		got = append(got, fmt.Sprintf("%s %s %s %s %s/%s", ref, payment, account, currency, debit, credit))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"a:adjustment <null> sales kwd 1.500/0.000",
		"a:adjustment <null> bank kwd 0.000/1.234",
		"a:adjustment <null> fees kwd 0.000/0.266",
		"m:jpy pi_jpy provider_balance jpy 5000/0",
		"m:jpy pi_jpy sales jpy 0/5000",
		"z:adjustment <null> payouts_in_transit usd 0.00/100.00",
		"z:adjustment <null> fees usd 5.00/0.00",
		"z:adjustment <null> bank usd 95.00/0.00",
	}, got)

	stored, err := ledger.TransactionsByRefs(b.ctx, b.pool, []string{"z:adjustment", "m:jpy", "nope", "a:adjustment", "m:jpy"})
	require.NoError(t, err)
	require.Len(t, stored, 3, "a ref with no transaction is absent")
	require.Equal(t, "evt_1", stored["z:adjustment"].EventID)
	require.Equal(t, ledger.AccountPayoutsInTransit, stored["z:adjustment"].Entries[0].Account)
	require.Equal(t, "5000", ledger.Format(stored["m:jpy"].Amount(), "jpy"))
	for _, txn := range ts {
		require.NoError(t, ledger.CheckSameContent(stored[txn.Ref], txn), txn.Ref)
	}
	require.Len(t, stored["m:jpy"].Entries, 2, "a ref asked for twice is read once")
	err = ledger.CheckSameContent(stored["m:jpy"], ledger.NewCapture("m:jpy", "pi_jpy", "evt_3", "jpy", d("5001"), t0))
	var conflict *ledger.RefConflictError
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, "m:jpy", conflict.Ref)
	require.ErrorContains(t, err, "post m:jpy: ")

	none, err := ledger.TransactionsByRefs(b.ctx, b.pool, nil)
	require.NoError(t, err)
	require.NotNil(t, none)
	require.Empty(t, none)
}

// Two batches posting overlapping refs in opposite orders would deadlock if
// each took the unique key's locks in its own input order. Taken in ref
// order, the later waits for the earlier's commit and sees its rows.
func TestPostManyTxConcurrentOppositeOrders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const rounds, n, overlap = 30, 300, 200
	for round := range rounds {
		all := make([]ledger.Transaction, n)
		for i := range all {
			all[i] = ledger.NewCapture(fmt.Sprintf("capture:%d:%03d", round, i), "pi_race", "evt", "usd", d("1.00"), t0)
		}
		batches := [2][]ledger.Transaction{
			all[:overlap],
			slices.Clone(all[n-overlap:]),
		}
		slices.Reverse(batches[1])

		var (
			start   = make(chan struct{})
			ready   sync.WaitGroup
			done    sync.WaitGroup
			created [2][]bool
			errs    [2]error
		)
		for i := range batches {
			ready.Add(1)
			done.Go(func() {
				tx, err := b.pool.Begin(b.ctx)
				ready.Done()
				if err != nil {
					errs[i] = err
					return
				}
				defer tx.Rollback(b.ctx) //nolint:errcheck
				<-start
				if created[i], errs[i] = ledger.PostManyTx(b.ctx, tx, batches[i]); errs[i] == nil {
					errs[i] = tx.Commit(b.ctx)
				}
			})
		}
		ready.Wait()
		close(start)
		done.Wait()
		require.NoError(t, errs[0], "round %d", round)
		require.NoError(t, errs[1], "round %d", round)

		winners := map[string]int{}
		for i, batch := range batches {
			for j, txn := range batch {
				if created[i][j] {
					winners[txn.Ref]++
				}
			}
		}
		require.Len(t, winners, n, "round %d: every ref posted", round)
		for ref, w := range winners {
			require.Equal(t, 1, w, "round %d: %s created once", round, ref)
		}
	}
	require.Equal(t, rounds*n, b.count(t, "ledger_transactions"))
	require.Equal(t, 2*rounds*n, b.count(t, "ledger_entries"))
}

// describeFacts makes stored facts comparable: times come back from the
// database in the local zone.
func describeFacts(facts []statemachine.Fact) []string {
	var out []string
	for _, f := range facts {
		out = append(out, fmt.Sprintf("%s %s %s %s %s %s", f.Kind, f.ObjectID, f.Amount, f.Currency, f.EventID, f.At.UTC().Format(time.RFC3339)))
	}
	return out
}

func TestLockPaymentsWithFactsTx(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := t.Context()

	captureA := fact(statemachine.FactCaptured, "ch_a", "10.00", "evt_1")
	refundA := fact(statemachine.FactRefundSucceeded, "re_a", "4.00", "evt_2")
	captureC := fact(statemachine.FactCaptured, "ch_c", "7.00", "evt_3")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, id := range []string{"pi_a", "pi_b", "pi_c", "pi_free"} {
			if _, err := ledger.LockPaymentTx(ctx, tx, "stripe", id); err != nil {
				return err
			}
		}
		return ledger.AddFactsManyTx(ctx, tx, []ledger.PaymentFact{
			{PaymentID: "pi_a", Fact: refundA}, {PaymentID: "pi_c", Fact: captureC}, {PaymentID: "pi_a", Fact: captureA},
		})
	})
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	ps, facts, err := ledger.LockPaymentsWithFactsTx(ctx, tx, "adyen", []string{"pi_new", "pi_c", "pi_a", "pi_b", "pi_a"})
	require.NoError(t, err)

	require.ElementsMatch(t, []string{"pi_a", "pi_b", "pi_c", "pi_new"}, slices.Collect(maps.Keys(ps)))
	for id, p := range ps {
		require.Equal(t, id, p.ID)
	}
	require.Equal(t, "stripe", ps["pi_a"].Provider, "an existing payment keeps its provider")
	require.Equal(t, "adyen", ps["pi_new"].Provider)
	require.Equal(t, statemachine.StateProcessing, ps["pi_new"].State)
	require.False(t, ps["pi_new"].CreatedAt.IsZero())
	var created int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM payments WHERE id = 'pi_new'`).Scan(&created))
	require.Zero(t, created, "a new payment is not created by its lock")

	require.ElementsMatch(t, []string{"pi_a", "pi_c"}, slices.Collect(maps.Keys(facts)), "a payment without facts has no entry")
	// Stored in one transaction, so in key order.
	require.Equal(t, describeFacts([]statemachine.Fact{captureA, refundA}), describeFacts(facts["pi_a"]))
	require.Equal(t, describeFacts([]statemachine.Fact{captureC}), describeFacts(facts["pi_c"]))

	// Another transaction cannot lock the payments, but can lock one not
	// asked for.
	for _, id := range []string{"pi_a", "pi_b", "pi_c"} {
		_, err := pool.Exec(ctx, `SELECT id FROM payments WHERE id = $1 FOR UPDATE NOWAIT`, id)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, id)
		require.Equal(t, "55P03", pgErr.Code, "%s: lock_not_available", id)
	}
	_, err = pool.Exec(ctx, `SELECT id FROM payments WHERE id = 'pi_free' FOR UPDATE NOWAIT`)
	require.NoError(t, err)

	require.NoError(t, tx.Commit(ctx))
	_, err = ledger.GetPayment(ctx, pool, "pi_new")
	require.ErrorIs(t, err, ledger.ErrPaymentNotFound, "nor by the transaction's commit: only SavePaymentsTx creates it")

	ps, facts, err = ledger.LockPaymentsWithFactsTx(ctx, closedTx(t, pool), "stripe", nil)
	require.NoError(t, err, "nothing to lock touches nothing")
	require.Empty(t, ps)
	require.Empty(t, facts)
}

// TestSavePaymentsTxNewPaymentCreatedMeanwhile: a payment found new by
// LockPaymentsWithFactsTx is created by SavePaymentsTx with its summary,
// unless another transaction created it in between: then the save fails
// with ErrPaymentCreatedMeanwhile (after that transaction commits; it waits
// for it), and succeeds if that transaction rolled back.
func TestSavePaymentsTxNewPaymentCreatedMeanwhile(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := t.Context()
	capture := fact(statemachine.FactCaptured, "ch_race", "12.00", "evt_race")

	for _, other := range []string{"commits", "rolls back"} {
		t.Run("the other transaction "+other, func(t *testing.T) {
			id := "pi_race_" + strings.ReplaceAll(other, " ", "_")
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck
			ps, _, err := ledger.LockPaymentsWithFactsTx(ctx, tx, "stripe", []string{id})
			require.NoError(t, err)
			p := ps[id]
			p.Summary = statemachine.Fold([]statemachine.Fact{capture})

			rival, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer rival.Rollback(ctx) //nolint:errcheck
			_, err = ledger.LockPaymentTx(ctx, rival, "stripe", id)
			require.NoError(t, err)

			saved := make(chan error, 1)
			go func() { saved <- ledger.SavePaymentsTx(ctx, tx, []ledger.Payment{p}, nil) }()
			select {
			case err := <-saved:
				t.Fatalf("the save did not wait for the rival's insert: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			if other == "commits" {
				require.NoError(t, rival.Commit(ctx))
				require.ErrorIs(t, <-saved, ledger.ErrPaymentCreatedMeanwhile)
				require.NoError(t, tx.Rollback(ctx))
				got, err := ledger.GetPayment(ctx, pool, id)
				require.NoError(t, err)
				require.Equal(t, statemachine.StateProcessing, got.State, "the rival's payment, untouched")
				return
			}
			require.NoError(t, rival.Rollback(ctx))
			require.NoError(t, <-saved)
			require.NoError(t, tx.Commit(ctx))
			got, err := ledger.GetPayment(ctx, pool, id)
			require.NoError(t, err)
			require.Equal(t, statemachine.StateSucceeded, got.State)
			require.Equal(t, "12", got.AmountCaptured.String())
			require.Equal(t, "usd", got.Currency)
		})
	}
}

// TestAddFactsManyAndSavePaymentsTx: facts of several payments in one
// statement (duplicates skipped, a key belongs to its payment), summaries
// and history rows of several payments in one round trip, history in the
// order the changes were given.
func TestAddFactsManyAndSavePaymentsTx(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := t.Context()

	capture1 := fact(statemachine.FactCaptured, "ch_1", "10.00", "evt_1")
	refund1 := fact(statemachine.FactRefundSucceeded, "re_1", "4.00", "evt_1")
	capture2 := fact(statemachine.FactCaptured, "ch_1", "7.00", "evt_2") // the same key, another payment

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ps, _, err := ledger.LockPaymentsWithFactsTx(ctx, tx, "stripe", []string{"pi_1", "pi_2"})
		require.NoError(t, err)
		p1, p2 := ps["pi_1"], ps["pi_2"]
		p1.Summary = statemachine.Fold([]statemachine.Fact{capture1, refund1})
		p2.Summary = statemachine.Fold([]statemachine.Fact{capture2})
		// New payments: created by the save, before their facts.
		require.NoError(t, ledger.SavePaymentsTx(ctx, tx, []ledger.Payment{p1, p2}, []ledger.StateChange{
			{PaymentID: "pi_1", To: statemachine.StateSucceeded, EventID: "evt_1"},
			{PaymentID: "pi_2", To: statemachine.StateSucceeded, EventID: "evt_2"},
			{PaymentID: "pi_1", From: statemachine.StateSucceeded, To: statemachine.StatePartiallyRefunded, EventID: "evt_1"},
		}))
		return ledger.AddFactsManyTx(ctx, tx, []ledger.PaymentFact{
			{PaymentID: "pi_1", Fact: capture1},
			{PaymentID: "pi_2", Fact: capture2},
			{PaymentID: "pi_1", Fact: refund1},
			{PaymentID: "pi_1", Fact: capture1}, // given twice
		})
	})
	require.NoError(t, err)

	rows, err := pool.Query(ctx, `SELECT payment_id, coalesce(from_status, '<null>'), to_status, event_id FROM payment_history ORDER BY id`)
	require.NoError(t, err)
	var history []string
	for rows.Next() {
		var payment, from, to, event string
		require.NoError(t, rows.Scan(&payment, &from, &to, &event))
		history = append(history, fmt.Sprintf("%s %s→%s %s", payment, from, to, event))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{
		"pi_1 <null>→succeeded evt_1",
		"pi_2 <null>→succeeded evt_2",
		"pi_1 succeeded→partially_refunded evt_1",
	}, history)
	h1, err := ledger.History(ctx, pool, "pi_1")
	require.NoError(t, err)
	require.Len(t, h1, 2)
	require.Equal(t, statemachine.State(""), h1[0].From)
	require.Equal(t, statemachine.StatePartiallyRefunded, h1[1].To)

	facts, err := ledger.Facts(ctx, pool, "pi_1")
	require.NoError(t, err)
	require.Equal(t, describeFacts([]statemachine.Fact{capture1, refund1}), describeFacts(facts))
	facts, err = ledger.Facts(ctx, pool, "pi_2")
	require.NoError(t, err)
	require.Equal(t, describeFacts([]statemachine.Fact{capture2}), describeFacts(facts))

	p1, err := ledger.GetPayment(ctx, pool, "pi_1")
	require.NoError(t, err)
	require.Equal(t, statemachine.StatePartiallyRefunded, p1.State)
	require.Equal(t, "usd", p1.Currency)
	require.Equal(t, "10", p1.AmountCaptured.String())
	require.Equal(t, "4", p1.AmountRefunded.String())
	p2, err := ledger.GetPayment(ctx, pool, "pi_2")
	require.NoError(t, err)
	require.Equal(t, statemachine.StateSucceeded, p2.State)
	require.Equal(t, "7", p2.AmountCaptured.String())

	// Facts already stored are skipped; a summary saved with no change
	// writes no history.
	refund2 := fact(statemachine.FactRefundSucceeded, "re_2", "6.00", "evt_3")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := ledger.AddFactsManyTx(ctx, tx, []ledger.PaymentFact{
			{PaymentID: "pi_1", Fact: refund1}, {PaymentID: "pi_1", Fact: refund2}, {PaymentID: "pi_2", Fact: capture2},
		}); err != nil {
			return err
		}
		return ledger.SavePaymentsTx(ctx, tx, []ledger.Payment{p2}, nil)
	})
	require.NoError(t, err)
	facts, err = ledger.Facts(ctx, pool, "pi_1")
	require.NoError(t, err)
	require.Len(t, facts, 3)
	require.Equal(t, 3, countRows(t, pool, "payment_history"))

	// Nothing to write touches nothing; each payment is saved once.
	tx := closedTx(t, pool)
	require.NoError(t, ledger.AddFactsManyTx(ctx, tx, nil))
	require.NoError(t, ledger.SavePaymentsTx(ctx, tx, nil, nil))
	require.ErrorContains(t, ledger.SavePaymentsTx(ctx, tx, []ledger.Payment{p1, p2, p1}, nil), "save payment pi_1: given twice")
}

func countRows(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// A known receipt email is kept once learnt; a payment saved with
// ReceiptEmailKnown false leaves the stored one alone; a new address
// replaces the old.
func TestSavePaymentsTxReceiptEmail(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := t.Context()

	type email struct {
		address string
		known   bool
	}
	unknown := email{}
	for _, tc := range []struct {
		name                string
		first, second, want email
	}{
		{"unknown stays unknown", unknown, unknown, unknown},
		{"a known absence", unknown, email{"", true}, email{"", true}},
		{"learnt", unknown, email{"a@example.com", true}, email{"a@example.com", true}},
		{"learnt after a known absence", email{"", true}, email{"a@example.com", true}, email{"a@example.com", true}},
		{"kept when a report has none", email{"a@example.com", true}, email{"", true}, email{"a@example.com", true}},
		{"kept when unknown", email{"a@example.com", true}, unknown, email{"a@example.com", true}},
		{"replaced by another address", email{"a@example.com", true}, email{"b@example.com", true}, email{"b@example.com", true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := "pi_" + tc.name
			for _, e := range []email{tc.first, tc.second} {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					ps, _, err := ledger.LockPaymentsWithFactsTx(ctx, tx, "stripe", []string{id})
					if err != nil {
						return err
					}
					p := ps[id]
					p.ReceiptEmail, p.ReceiptEmailKnown = e.address, e.known
					return ledger.SavePaymentsTx(ctx, tx, []ledger.Payment{p}, nil)
				})
				require.NoError(t, err)
			}
			got, err := ledger.GetPayment(ctx, pool, id)
			require.NoError(t, err)
			require.Equal(t, tc.want, email{got.ReceiptEmail, got.ReceiptEmailKnown})
		})
	}
}

// The emails of several payments in one statement, each by its own rule,
// leaving a payment not in the batch alone.
func TestSavePaymentsTxReceiptEmailBatch(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	ids := []string{"pi_keep", "pi_learn", "pi_alone", "pi_other"}
	save := func(ps []ledger.Payment) {
		t.Helper()
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return ledger.SavePaymentsTx(ctx, tx, ps, nil)
		}))
	}
	ps := map[string]ledger.Payment{}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, id := range ids { // created empty
			p, err := ledger.LockPaymentTx(ctx, tx, "stripe", id)
			if err != nil {
				return err
			}
			ps[id] = p
		}
		return nil
	}))
	with := func(id, address string, known bool) ledger.Payment {
		p := ps[id]
		p.ReceiptEmail, p.ReceiptEmailKnown = address, known
		return p
	}
	save([]ledger.Payment{with("pi_keep", "k@example.com", true), with("pi_alone", "a@example.com", true), with("pi_other", "o@example.com", true)})
	save([]ledger.Payment{with("pi_keep", "", true), with("pi_learn", "l@example.com", true), with("pi_alone", "x@example.com", false)})

	want := map[string]string{"pi_keep": "k@example.com", "pi_learn": "l@example.com", "pi_alone": "a@example.com", "pi_other": "o@example.com"}
	for _, id := range ids {
		got, err := ledger.GetPayment(ctx, pool, id)
		require.NoError(t, err)
		require.Equal(t, want[id], got.ReceiptEmail, id)
		require.True(t, got.ReceiptEmailKnown, id)
	}
}
