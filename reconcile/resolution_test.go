package reconcile_test

import (
	"context"
	"encoding/csv"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/worldtest"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/reconcile"
)

// exceptionDay is a reconciled day with one of each exception: a capture
// the provider booked for 41.00 and the ledger for 40.00, one booked in
// eur and posted in usd, one the provider dropped (15.00), and a charge
// of 9.00 the ledger never saw, whose payment paygate knows from a fact.
type exceptionDay struct {
	b                                                 *testBundle
	run                                               reconcile.Run
	matched, mismatch, currency, atProvider, inLedger reconcile.Item
	mismatchPayment                                   string
}

func setupExceptions(t *testing.T) exceptionDay {
	t.Helper()
	b := setup(t, nil)
	sim := b.sim
	p1 := sim.Pay(stripesim.PayOpts{Amount: 10000})
	p5 := sim.Pay(stripesim.PayOpts{Amount: 4000})
	sim.TamperBalanceTransaction(p5.BalanceTransactionID, 4100)
	p6 := sim.Pay(stripesim.PayOpts{Amount: 2500})
	sim.TamperBalanceTransactionCurrency(p6.BalanceTransactionID, "eur")
	p7 := sim.Pay(stripesim.PayOpts{Amount: 1500})
	sim.DropBalanceTransaction(p7.BalanceTransactionID)
	sim.BalanceTransactionOnly(stripesim.BalanceTransactionOpts{Type: stripesim.TxnCharge, Source: "ch_ghost", Amount: 900})
	b.deliver(t)
	// The provider reported the ghost charge's payment otherwise (its
	// authorization): a fact names the charge.
	ctx := context.Background()
	_, err := b.world.Pool.Exec(ctx, `INSERT INTO payments (id, provider, currency) VALUES ('pi_ghost', 'stripe', 'usd')`)
	require.NoError(t, err)
	_, err = b.world.Pool.Exec(ctx, `INSERT INTO payment_facts (payment_id, key, kind, object_id, amount, currency, event_id, occurred_at)
		VALUES ('pi_ghost', 'authorized:ch_ghost', 'authorized', 'ch_ghost', 9, 'usd', 'evt_ghost', $1)`, day.Add(time.Hour))
	require.NoError(t, err)

	run, items := b.run(t, day)
	d := exceptionDay{b: b, run: run, mismatchPayment: p5.ID}
	d.matched = find(t, items, byRef("stripe:charge:"+p1.ChargeID+":capture"))
	d.mismatch = find(t, items, byRef("stripe:charge:"+p5.ChargeID+":capture"))
	d.currency = find(t, items, byRef("stripe:charge:"+p6.ChargeID+":capture"))
	d.atProvider = find(t, items, byRef("stripe:charge:"+p7.ChargeID+":capture"))
	d.inLedger = find(t, items, byRef("stripe:charge:ch_ghost:capture"))
	require.Equal(t, []reconcile.Status{reconcile.StatusMatched, reconcile.StatusAmountMismatch, reconcile.StatusCurrencyMismatch,
		reconcile.StatusMissingAtProvider, reconcile.StatusMissingInLedger},
		[]reconcile.Status{d.matched.Status, d.mismatch.Status, d.currency.Status, d.atProvider.Status, d.inLedger.Status})
	require.Equal(t, "pi_ghost", d.inLedger.PaymentID, "a movement the ledger lacks is tied to the payment its facts name")
	require.Equal(t, p5.ID, d.mismatch.PaymentID)
	return d
}

// resolve resolves one item as alice in its own transaction.
func (d exceptionDay) resolve(t *testing.T, it reconcile.Item, kind reconcile.ResolutionKind, note, key string) (reconcile.Resolved, error) {
	t.Helper()
	var out reconcile.Resolved
	err := pgx.BeginFunc(context.Background(), d.b.world.Pool, func(tx pgx.Tx) error {
		var err error
		out, err = reconcile.ResolveTx(context.Background(), tx, it.ID, reconcile.Resolve{Kind: kind, Note: note,
			Op: inbox.Operation{Actor: "alice", IdempotencyKey: key}})
		return err
	})
	return out, err
}

func balances(t *testing.T, d exceptionDay) map[ledger.Account]decimal.Decimal {
	t.Helper()
	tb, err := ledger.TrialBalance(context.Background(), d.b.world.Pool)
	require.NoError(t, err)
	out := map[ledger.Account]decimal.Decimal{}
	for _, a := range tb.Accounts {
		if a.Currency == "usd" {
			out[a.Account] = a.Balance
		}
	}
	for _, c := range tb.Currencies {
		require.True(t, c.Balanced, "%s", c.Currency)
	}
	return out
}

func audit(t *testing.T, d exceptionDay, it reconcile.Item) []inbox.AuditEntry {
	t.Helper()
	entries, _, err := inbox.ListAudit(context.Background(), d.b.world.Pool,
		inbox.AuditFilter{Provider: "stripe", EventID: strconv.FormatInt(it.ID, 10)}, inbox.Page{})
	require.NoError(t, err)
	return entries
}

// TestResolveEachKind resolves one exception of each kind: a write-off of
// a money difference posts one balanced adjustment against
// reconciliation_adjustments, and the trial balance moves by exactly the
// difference; the other resolutions move nothing. Each is recorded once,
// with who and when, and audited.
func TestResolveEachKind(t *testing.T) {
	t.Parallel()
	d := setupExceptions(t)
	ctx := context.Background()
	before := balances(t, d)

	res, err := d.resolve(t, d.mismatch, reconcile.ResolutionWriteOff, "  Stripe confirmed the extra 1.00; written off per FIN-7  ", "k1")
	require.NoError(t, err)
	require.True(t, res.Created)
	r := res.Item.Resolution
	require.NotNil(t, r)
	require.Equal(t, reconcile.ResolutionWriteOff, r.Kind)
	require.Equal(t, "Stripe confirmed the extra 1.00; written off per FIN-7", r.Note, "the note is kept trimmed")
	require.Equal(t, "alice", r.ResolvedBy)
	require.WithinDuration(t, time.Now(), r.ResolvedAt, time.Minute)
	require.NotNil(t, res.Adjustment)
	adj := *res.Adjustment
	require.Equal(t, r.AdjustmentRef, adj.Ref)
	require.Equal(t, "reconciliation:write_off:"+d.mismatch.Ref, adj.Ref)
	require.Equal(t, ledger.KindAdjustment, adj.Kind)
	require.Equal(t, d.mismatchPayment, adj.PaymentID, "the write-off shows on the payment's ledger")
	require.Equal(t, []string{"provider_balance Dr 1.00", "reconciliation_adjustments Cr 1.00"}, entries(adj),
		"the provider holds 1.00 more than the ledger")
	require.True(t, adj.OccurredAt.Equal(day), "dated the reconciled day")
	require.True(t, adj.PostedAt.Equal(day), "its month is open: posted when it occurred")
	require.Equal(t, 1, countRefs(t, d.b, "reconciliation:write_off:%"))

	after := balances(t, d)
	require.Equal(t, "1", after[ledger.AccountProviderBalance].Sub(before[ledger.AccountProviderBalance]).String())
	require.Equal(t, "-1", after[ledger.AccountReconciliationAdjustments].String())
	for _, a := range []ledger.Account{ledger.AccountSales, ledger.AccountFees} {
		require.True(t, after[a].Equal(before[a]), "%s is untouched", a)
	}

	logged := audit(t, d, d.mismatch)
	require.Len(t, logged, 1)
	e := logged[0]
	require.Equal(t, inbox.ActionReconciliationResolve, e.Action)
	require.Equal(t, "alice", e.Actor)
	require.Equal(t, "k1", e.IdempotencyKey)
	require.Equal(t, "write_off of reconciliation item "+strconv.FormatInt(d.mismatch.ID, 10)+" (run "+strconv.FormatInt(d.run.ID, 10)+
		", amount_mismatch "+d.mismatch.Ref+"), 1.00 usd written off as "+adj.Ref+": Stripe confirmed the extra 1.00; written off per FIN-7", e.Reason)

	// The same resolution again: the first as it stands, nothing more.
	again, err := d.resolve(t, d.mismatch, reconcile.ResolutionWriteOff, "Stripe confirmed the extra 1.00; written off per FIN-7", "k2")
	require.NoError(t, err)
	require.False(t, again.Created)
	require.Equal(t, r.ResolvedAt, again.Item.Resolution.ResolvedAt)
	require.Equal(t, adj.Ref, again.Adjustment.Ref)
	require.Equal(t, 1, countRefs(t, d.b, "reconciliation:write_off:%"))
	require.Len(t, audit(t, d, d.mismatch), 1)
	// Another: refused, the first stands.
	_, err = d.resolve(t, d.mismatch, reconcile.ResolutionProviderError, "on second thoughts", "k3")
	var resolved *reconcile.AlreadyResolvedError
	require.ErrorAs(t, err, &resolved)
	require.ErrorIs(t, err, reconcile.ErrAlreadyResolved)
	require.Equal(t, reconcile.ResolutionWriteOff, resolved.First.Kind)
	_, err = d.resolve(t, d.mismatch, reconcile.ResolutionWriteOff, "another note", "k4")
	require.ErrorIs(t, err, reconcile.ErrAlreadyResolved, "the note is part of the resolution")

	// A movement the ledger lacks: its 9.00 comes in.
	res, err = d.resolve(t, d.inLedger, reconcile.ResolutionWriteOff, "a charge whose webhook was never sent", "k5")
	require.NoError(t, err)
	require.Equal(t, "pi_ghost", res.Adjustment.PaymentID)
	require.Equal(t, []string{"provider_balance Dr 9.00", "reconciliation_adjustments Cr 9.00"}, entries(*res.Adjustment))

	// The currency mismatch has no one amount to write off; it is
	// resolved otherwise, and moves nothing.
	_, err = d.resolve(t, d.currency, reconcile.ResolutionWriteOff, "write it off", "k6")
	require.ErrorIs(t, err, reconcile.ErrNoDifference)
	res, err = d.resolve(t, d.currency, reconcile.ResolutionMatchedManually, "the eur balance was converted by hand", "k7")
	require.NoError(t, err)
	require.Nil(t, res.Adjustment)
	require.Empty(t, res.Item.Resolution.AdjustmentRef)

	// A movement the provider lacks, left to the provider.
	res, err = d.resolve(t, d.atProvider, reconcile.ResolutionProviderError, "Stripe support case 123: the balance transaction is missing", "k8")
	require.NoError(t, err)
	require.Nil(t, res.Adjustment)

	final := balances(t, d)
	require.Equal(t, "10", final[ledger.AccountProviderBalance].Sub(before[ledger.AccountProviderBalance]).String(), "1.00 and 9.00")
	require.Equal(t, "-10", final[ledger.AccountReconciliationAdjustments].String())
	require.Equal(t, 2, countRefs(t, d.b, "reconciliation:write_off:%"))
	for _, it := range []reconcile.Item{d.inLedger, d.currency, d.atProvider} {
		require.Len(t, audit(t, d, it), 1)
	}

	counts, err := reconcile.CountExceptions(ctx, d.b.world.Pool, d.run.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.ExceptionCounts{Open: 0, Resolved: 4}, counts)
	for state, want := range map[reconcile.ItemState]int{reconcile.ItemOpen: 0, reconcile.ItemResolved: 4} {
		page, _, err := reconcile.ItemsPage(ctx, d.b.world.Pool, d.run.ID, reconcile.ItemFilter{State: state}, "", 0)
		require.NoError(t, err)
		require.Len(t, page, want, state)
	}
}

// TestResolveRefusals: a matched item is no exception, a note is
// required and bounded, an unknown resolution or item is refused; none of
// them writes anything.
func TestResolveRefusals(t *testing.T) {
	t.Parallel()
	d := setupExceptions(t)
	_, err := d.resolve(t, d.matched, reconcile.ResolutionMatchedManually, "looks fine", "k")
	require.ErrorIs(t, err, reconcile.ErrNotException)
	for _, note := range []string{"", "   \n", strings.Repeat("é", reconcile.MaxNoteLen+1)} {
		_, err = d.resolve(t, d.mismatch, reconcile.ResolutionProviderError, note, "k")
		require.ErrorIs(t, err, reconcile.ErrInvalidResolution, "%q", note)
	}
	_, err = d.resolve(t, d.mismatch, reconcile.ResolutionProviderError, strings.Repeat("é", reconcile.MaxNoteLen), "k")
	require.NoError(t, err, "a note of the longest length is kept whole")
	_, err = d.resolve(t, d.atProvider, "ignore", "a note", "k")
	require.ErrorIs(t, err, reconcile.ErrInvalidResolution)
	_, err = d.resolve(t, reconcile.Item{ID: d.inLedger.ID + 1000}, reconcile.ResolutionProviderError, "a note", "k")
	require.ErrorIs(t, err, reconcile.ErrItemNotFound)
	require.Zero(t, countRefs(t, d.b, "reconciliation:write_off:%"))
	require.Equal(t, 1, d.b.world.Count(t, `SELECT count(*) FROM reconciliation_resolutions`))
}

// TestWriteOffAfterTheMonthClosed: once the month of the run's day is
// closed, a write-off keeps the day as occurred_at and is posted at the
// first instant of the first open month; the closed month's trial
// balance does not move.
func TestWriteOffAfterTheMonthClosed(t *testing.T) {
	t.Parallel()
	d := setupExceptions(t)
	ctx := context.Background()
	march, err := ledger.ParsePeriod("2025-03")
	require.NoError(t, err)
	var closed ledger.ClosedPeriod
	require.NoError(t, pgx.BeginFunc(ctx, d.b.world.Pool, func(tx pgx.Tx) error {
		closed, _, err = ledger.ClosePeriodTx(ctx, tx, march, "alice", ledger.ExportSettings{}, time.Now())
		return err
	}))

	res, err := d.resolve(t, d.atProvider, reconcile.ResolutionWriteOff, "the capture never happened at Stripe", "k")
	require.NoError(t, err)
	adj := res.Adjustment
	require.True(t, adj.OccurredAt.Equal(day), "it keeps the day the difference arose")
	require.True(t, adj.PostedAt.Equal(time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC)), "posted at %s", adj.PostedAt)
	require.Equal(t, []string{"reconciliation_adjustments Dr 15.00", "provider_balance Cr 15.00"}, entries(*adj),
		"the ledger holds 15.00 the provider does not")

	endOfMarch, err := ledger.TrialBalanceAsOf(ctx, d.b.world.Pool, march.End().Add(-time.Microsecond))
	require.NoError(t, err)
	require.Equal(t, ledger.TrialBalanceDigest(march, closed.TrialBalance), ledger.TrialBalanceDigest(march, endOfMarch),
		"the closed month's balance is as it was closed")
	april, err := ledger.TrialBalanceAsOf(ctx, d.b.world.Pool, time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	var writtenOff decimal.Decimal
	for _, a := range april.Accounts {
		if a.Account == ledger.AccountReconciliationAdjustments {
			writtenOff = a.Balance
		}
	}
	require.Equal(t, "15", writtenOff.String(), "in the open month from its first instant")
}

// TestWriteOffOfARerunPostsOnce: a re-run of the day lists the same
// difference again as a new item; writing off both posts the money once.
func TestWriteOffOfARerunPostsOnce(t *testing.T) {
	t.Parallel()
	d := setupExceptions(t)
	_, items := d.b.run(t, day)
	again := find(t, items, byRef(d.mismatch.Ref))
	require.Equal(t, reconcile.StatusAmountMismatch, again.Status)
	require.NotEqual(t, d.mismatch.ID, again.ID, "a new item of a new run")
	before := balances(t, d)

	first, err := d.resolve(t, d.mismatch, reconcile.ResolutionWriteOff, "written off", "k1")
	require.NoError(t, err)
	second, err := d.resolve(t, again, reconcile.ResolutionWriteOff, "written off in the first run already", "k2")
	require.NoError(t, err)
	require.True(t, second.Created, "the second item is resolved too")
	require.Equal(t, first.Adjustment.Ref, second.Item.Resolution.AdjustmentRef)
	require.Equal(t, 1, countRefs(t, d.b, "reconciliation:write_off:%"))
	require.Equal(t, "1", balances(t, d)[ledger.AccountProviderBalance].Sub(before[ledger.AccountProviderBalance]).String(),
		"the difference moved once")
}

// TestResolutionsAreWrittenOnce: paygate_app, the role serve runs as,
// resolves (and writes off) but may not change a resolution; the database
// keeps a resolution as it was written, whoever asks, and takes one for an
// exception only.
func TestResolutionsAreWrittenOnce(t *testing.T) {
	t.Parallel()
	d := setupExceptions(t)
	ctx := context.Background()
	app, err := pgx.Connect(ctx, d.b.world.URL)
	require.NoError(t, err)
	defer app.Close(ctx)
	_, err = app.Exec(ctx, `SET ROLE paygate_app`)
	require.NoError(t, err)
	for _, it := range []reconcile.Item{d.mismatch, d.inLedger} {
		kind := reconcile.ResolutionProviderError
		if it.ID == d.inLedger.ID {
			kind = reconcile.ResolutionWriteOff
		}
		require.NoError(t, pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
			_, err := reconcile.ResolveTx(ctx, tx, it.ID, reconcile.Resolve{Kind: kind, Note: "Stripe will correct it",
				Op: inbox.Operation{Actor: "alice"}})
			return err
		}), "the app resolves %s", it.Status)
	}
	for _, sql := range []string{
		`UPDATE reconciliation_resolutions SET note = 'rewritten'`,
		`DELETE FROM reconciliation_resolutions`,
		`TRUNCATE reconciliation_resolutions`,
	} {
		_, err := app.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr), "%s: %v", sql, err)
		require.Equal(t, "42501", pgErr.Code, "%s: the app may not: %s", sql, pgErr.Message)
	}
	for _, sql := range []string{
		`UPDATE reconciliation_resolutions SET note = 'rewritten'`,
		`DELETE FROM reconciliation_resolutions`,
		`TRUNCATE reconciliation_resolutions`,
	} {
		_, err := d.b.world.Pool.Exec(ctx, sql)
		requireConstraint(t, err, "reconciliation_resolutions_append_only", sql)
	}
	_, err = d.b.world.Pool.Exec(ctx, `INSERT INTO reconciliation_resolutions (item_id, resolution, note, resolved_by)
		VALUES ($1, 'matched_manually', 'by hand', 'mallory')`, d.matched.ID)
	requireConstraint(t, err, "reconciliation_resolutions_exception", "a matched item")
	it, _, err := reconcile.GetItem(ctx, d.b.world.Pool, d.mismatch.ID)
	require.NoError(t, err)
	require.Equal(t, "Stripe will correct it", it.Resolution.Note)
}

// entries writes a transaction's entries as "account Dr|Cr amount".
func entries(tx ledger.Transaction) []string {
	out := make([]string, len(tx.Entries))
	for i, e := range tx.Entries {
		if e.Debit.IsPositive() {
			out[i] = string(e.Account) + " Dr " + ledger.Format(e.Debit, tx.Currency)
		} else {
			out[i] = string(e.Account) + " Cr " + ledger.Format(e.Credit, tx.Currency)
		}
	}
	return out
}

func requireConstraint(t *testing.T, err error, constraint, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%s: %v", what, err)
	require.Equal(t, constraint, pgErr.ConstraintName, "%s: %v", what, err)
}

// TestAdyenItemsNameTheirPayments: an Adyen batch's items carry their
// payment, so that finance can follow them: a matched capture the
// ledger's, a capture the ledger lacks (its CAPTURE never came) the
// payment its row's Psp Reference names; a payment paygate never heard of
// none. Each names the order its payment's AUTHORISATION gave as
// merchantReference, in the items and the CSV. Writing the missing capture off ties the adjustment to the
// payment, dated when the batch's run ran.
func TestAdyenItemsNameTheirPayments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := adyensim.New(adyensim.Config{Seed: 29, Start: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)})
	world := worldtest.New(t, nil)
	receiver, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{sim.HMACKey()}})
	require.NoError(t, err)
	apply := func(items ...adyensim.Item) {
		t.Helper()
		var events []provider.Event
		for _, it := range items {
			evs, err := receiver.Receive(http.Header{}, sim.Batch(false, it), sim.Now())
			require.NoError(t, err)
			events = append(events, evs...)
		}
		world.ApplyEvents(t, events...)
	}
	paid, auth := sim.Authorise(10000, "EUR", "order-1", true)
	captured, capture := sim.Capture(paid, 10000)
	uncaptured, auth2 := sim.Authorise(4000, "EUR", "order-2", true)
	lostCapture, _ := sim.Capture(uncaptured, 4000)
	apply(auth, capture, auth2)

	sim.Advance(48 * time.Hour)
	batch := sim.NewBatch(21)
	batch.Settled(captured, adyensim.Fees{Commission: 100})
	batch.Settled(lostCapture, adyensim.Fees{Commission: 40})
	unknown := batch.UnknownPayment(900, "EUR", adyensim.Fees{})
	report := batch.Close()
	noteAndStore(t, world.Pool, report.FileName, 21, report.CSV)
	run, err := reconcile.New(reconcile.Config{Pool: world.Pool, Batches: adyen.Settlements{}}).
		Run(ctx, reconcile.BatchScope(adyen.Name, 21), reconcile.TriggerCLI, "cli")
	require.NoError(t, err)
	items, err := reconcile.Items(ctx, world.Pool, run.ID)
	require.NoError(t, err)

	matched := find(t, items, byRef(adyen.CaptureRef(captured)))
	require.Equal(t, reconcile.StatusMatched, matched.Status)
	require.Equal(t, paid, matched.PaymentID)
	require.Equal(t, "order-1", matched.Reference)
	missing := find(t, items, byRef(adyen.CaptureRef(lostCapture)))
	require.Equal(t, reconcile.StatusMissingInLedger, missing.Status)
	require.Equal(t, uncaptured, missing.PaymentID, "the row's Psp Reference is the payment's")
	require.Equal(t, "order-2", missing.Reference, "the order of the payment the record names")
	stranger := find(t, items, byRef(adyen.CaptureRef(unknown.ModificationReference)))
	require.Empty(t, stranger.PaymentID)
	require.Empty(t, stranger.Reference)
	var out strings.Builder
	require.NoError(t, reconcile.WriteRunCSV(ctx, world.Pool, &out, run.ID))
	rows, err := csv.NewReader(strings.NewReader(out.String())).ReadAll()
	require.NoError(t, err)
	column := slices.Index(rows[0], "reference")
	require.Positive(t, column)
	refs := map[string]string{}
	for _, r := range rows[1:] {
		refs[r[slices.Index(rows[0], "ref")]] = r[column]
	}
	require.Equal(t, "order-1", refs[adyen.CaptureRef(captured)])
	require.Equal(t, "order-2", refs[adyen.CaptureRef(lostCapture)])
	require.Equal(t, "", refs[adyen.CaptureRef(unknown.ModificationReference)])

	var res reconcile.Resolved
	require.NoError(t, pgx.BeginFunc(ctx, world.Pool, func(tx pgx.Tx) error {
		res, err = reconcile.ResolveTx(ctx, tx, missing.ID, reconcile.Resolve{Kind: reconcile.ResolutionWriteOff,
			Note: "captured at Adyen, never reported", Op: inbox.Operation{Actor: "alice"}})
		return err
	}))
	require.Equal(t, uncaptured, res.Adjustment.PaymentID)
	require.Equal(t, "eur", res.Adjustment.Currency)
	require.True(t, res.Adjustment.OccurredAt.Equal(run.StartedAt), "a batch's difference is dated when its run ran")
	require.Equal(t, []string{"provider_balance Dr 40.00", "reconciliation_adjustments Cr 40.00"}, entries(*res.Adjustment))
	require.Equal(t, "reconciliation:write_off:"+adyen.CaptureRef(lostCapture), res.Adjustment.Ref)
}
