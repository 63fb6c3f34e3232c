package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/statemachine"
)

// TestFillHoldsWhatPaygateWould fills a database and reads it back through
// paygate's own packages: the filled rows must be what applying the events
// would have left, or the growth benchmark measures another database.
func TestFillHoldsWhatPaygateWould(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, url := testdb.NewWithURL(t)
	opts := options{databaseURL: url, events: 2000, samplePayments: 60, paidTwice: 0.2, chunk: 300, workers: 2,
		span: 365 * 24 * time.Hour, vacuum: true, progress: time.Hour, log: io.Discard}
	res, err := fill(ctx, opts)
	require.NoError(t, err)
	require.Zero(t, res.Before)
	require.Positive(t, res.Bytes)

	var events, keys, joined, outside int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM inbox_events),
		(SELECT count(*) FROM inbox_event_keys),
		(SELECT count(*) FROM inbox_events e JOIN inbox_event_keys k USING (provider, event_id, received_at)),
		(SELECT count(*) FROM inbox_events WHERE received_at >= now() OR received_at < now() - interval '366 days'
			OR tableoid <> 'inbox_events_before'::regclass)`).Scan(&events, &keys, &joined, &outside))
	require.Equal(t, res.After, events)
	require.GreaterOrEqual(t, events, int64(2000))
	require.Less(t, events, int64(2000+10), "a fill stops within one payment's events of its target")
	require.Equal(t, events, keys, "every event has its key")
	require.Equal(t, events, joined, "every key has its event's received_at")
	require.Zero(t, outside, "events received in the past year, in the partition before next month")

	counts, err := inbox.Counts(ctx, pool)
	require.NoError(t, err)
	byStatus := map[inbox.Status]int64{}
	rows, err := pool.Query(ctx, `SELECT status, count(*) FROM inbox_events GROUP BY status`)
	require.NoError(t, err)
	for rows.Next() {
		var s inbox.Status
		var n int64
		require.NoError(t, rows.Scan(&s, &n))
		byStatus[s] = n
	}
	require.NoError(t, rows.Err())
	for _, s := range inbox.Statuses {
		require.Equal(t, byStatus[s], counts[s], "kept count of %s", s)
	}
	require.Equal(t, events, counts[inbox.StatusProcessed], "every filled event is processed")

	tb, err := ledger.TrialBalance(ctx, pool)
	require.NoError(t, err)
	require.NotEmpty(t, tb.Currencies)
	for _, c := range tb.Currencies {
		require.True(t, c.Balanced, "%s: debits %s, credits %s", c.Currency, c.Debits, c.Credits)
	}

	// A filled capture event maps, through the provider's own mapping, to
	// a payment and ledger transactions the fill wrote alike.
	var eventID string
	require.NoError(t, pool.QueryRow(ctx, `SELECT event_id FROM inbox_events
		WHERE type = 'charge.succeeded' ORDER BY received_at DESC LIMIT 1`).Scan(&eventID))
	ev, err := inbox.Get(ctx, pool, "stripe", eventID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusProcessed, ev.Status)
	fx, err := stripe.Effects(ev.Payload)
	require.NoError(t, err)
	require.NotEmpty(t, fx.PaymentID)
	require.NotEmpty(t, fx.Postings)
	for _, posting := range fx.Postings {
		stored, err := ledger.TransactionByRef(ctx, pool, posting.Ref)
		require.NoError(t, err, "posting %s of %s", posting.Ref, eventID)
		require.NoError(t, ledger.CheckSameContent(stored, posting))
		require.True(t, stored.OccurredAt.Equal(posting.OccurredAt), "%s occurred at %s, its payload says %s",
			posting.Ref, stored.OccurredAt, posting.OccurredAt)
	}
	p, err := ledger.GetPayment(ctx, pool, fx.PaymentID)
	require.NoError(t, err)
	facts, err := ledger.Facts(ctx, pool, fx.PaymentID)
	require.NoError(t, err)
	require.Equal(t, statemachine.Fold(facts).State, p.State, "the projection is the fold of its facts")
	require.True(t, statemachine.Fold(facts).AmountCaptured.Equal(p.AmountCaptured))
	require.True(t, p.AmountCaptured.IsPositive())
	history, err := ledger.History(ctx, pool, fx.PaymentID)
	require.NoError(t, err)
	require.NotEmpty(t, history)
	require.Equal(t, p.State, history[len(history)-1].To)
	txns, err := ledger.TransactionsForPayment(ctx, pool, fx.PaymentID)
	require.NoError(t, err)
	require.NotEmpty(t, txns)

	// The filled keys dedupe as the real ones do.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		created, err := inbox.InsertManyTx(ctx, tx, []inbox.Event{{Provider: "stripe", EventID: eventID,
			Type: ev.Type, APIVersion: ev.APIVersion, Payload: ev.Payload}})
		require.NoError(t, err)
		require.False(t, created[0], "a filled event id arriving again is a duplicate")
		return nil
	})
	require.NoError(t, err)

	// Every payment names its order, each copy an order of its own: a
	// search by reference finds one payment, or the two of an order paid
	// twice, which is a double charge, with its payments, unless one was
	// refunded; a search by receipt email finds one.
	var payments, withRef, refs, withCustomer, doubled int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(reference), count(DISTINCT reference), count(customer),
		(SELECT count(*) FROM double_charges WHERE state = 'open') FROM payments`).
		Scan(&payments, &withRef, &refs, &withCustomer, &doubled))
	require.Equal(t, payments, withRef)
	require.Positive(t, doubled)
	require.Less(t, refs, payments, "some orders are paid twice")
	require.Greater(t, refs, payments*2/3)
	require.Greater(t, withCustomer, payments/2)
	var twice string
	require.NoError(t, pool.QueryRow(ctx, `SELECT reference FROM double_charges WHERE state = 'open'
		ORDER BY detected_at DESC LIMIT 1`).Scan(&twice))
	found, _, err := ledger.ListPayments(ctx, pool, ledger.PaymentFilter{Reference: twice}, "", 0)
	require.NoError(t, err)
	require.Len(t, found, 2)
	charge, err := ledger.GetDoubleCharge(ctx, pool, twice)
	require.NoError(t, err)
	require.Len(t, charge.Payments, 2)
	require.ElementsMatch(t, []string{found[0].ID, found[1].ID}, []string{charge.Payments[0].ID, charge.Payments[1].ID})
	for _, f := range found {
		require.True(t, ledger.NetCaptured(f.Summary))
		require.Equal(t, "Order "+twice, f.Details.Description)
		require.Equal(t, twice, f.Details.Metadata["order_id"])
	}
	found, _, err = ledger.ListPayments(ctx, pool, ledger.PaymentFilter{Q: strings.ToUpper(p.ReceiptEmail), QEmail: true}, "", 0)
	require.NoError(t, err)
	require.LessOrEqual(t, len(found), 2, "a shopper's payment, and its twin if the order was paid twice")
	require.Contains(t, []string{found[0].ID, found[len(found)-1].ID}, p.ID)
	for _, f := range found {
		require.Equal(t, p.ReceiptEmail, f.ReceiptEmail)
		require.Equal(t, p.Details.Reference, f.Details.Reference)
	}
	// The details' stamps moved with the copy, as its events did.
	require.NotZero(t, p.Details.Stamps)
	for _, field := range statemachine.Fields {
		st := p.Details.Stamps.Of(field)
		if st.IsZero() {
			continue
		}
		ev, err := inbox.Get(ctx, pool, "stripe", st.EventID)
		require.NoError(t, err, field)
		require.True(t, st.At.Equal(*ev.ProviderCreatedAt), "%s stamped %s, its event created %s", field, st.At, ev.ProviderCreatedAt)
	}
	details, err := ledger.GetDetailsFill(ctx, pool)
	require.NoError(t, err)
	require.True(t, details.Done, "nothing to fill: the filled payments have their details")

	// A second run adds up to its new target, with ids of its own.
	opts.events = 3000
	res2, err := fill(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, res.After, res2.Before)
	require.GreaterOrEqual(t, res2.After, int64(3000))
	tb, err = ledger.TrialBalance(ctx, pool)
	require.NoError(t, err)
	for _, c := range tb.Currencies {
		require.True(t, c.Balanced, "%s after the second run", c.Currency)
	}
	res3, err := fill(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, res2.After, res3.After, "a run to a level already held adds nothing")
}

// TestFillPaymentsOnly: -payments fills the payments table alone, with
// the payments a full fill writes (an order, customer and email of its own
// per copy, times in the past year), analyzed, resumable, and found by
// every kind of search.
func TestFillPaymentsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, url := testdb.NewWithURL(t)
	opts := options{databaseURL: url, payments: 1500, samplePayments: 60, paidTwice: 0.2, chunk: 300, workers: 2,
		span: 365 * 24 * time.Hour, vacuum: true, progress: time.Hour, log: io.Discard}
	res, err := fill(ctx, opts)
	require.NoError(t, err)
	require.Zero(t, res.Before)
	require.GreaterOrEqual(t, res.After, int64(1500))
	require.Less(t, res.After, int64(1500+3), "a fill stops within one order's payments of its target")

	for _, table := range fillTables {
		if table == "payments" {
			continue
		}
		var n int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n))
		require.Zero(t, n, "%s is not filled", table)
	}

	// Each copy has an order, a customer and an email of its own: at most
	// the two payments of an order paid twice share one.
	perCopy := func() {
		t.Helper()
		var payments, outside, withRef int64
		var refs, customers, emails int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*),
			count(*) FILTER (WHERE created_at >= now() OR created_at < now() - interval '366 days'),
			count(reference),
			(SELECT max(n) FROM (SELECT count(*) n FROM payments GROUP BY reference) r),
			(SELECT max(n) FROM (SELECT count(*) n FROM payments WHERE customer IS NOT NULL GROUP BY customer) c),
			(SELECT max(n) FROM (SELECT count(*) n FROM payments GROUP BY lower(receipt_email)) e)
			FROM payments`).Scan(&payments, &outside, &withRef, &refs, &customers, &emails))
		require.Zero(t, outside, "payments created in the past year")
		require.Equal(t, payments, withRef)
		require.Equal(t, 2, refs, "an order paid twice has its two payments, no more")
		require.LessOrEqual(t, customers, 2)
		require.LessOrEqual(t, emails, 2)
	}
	perCopy()

	// ANALYZEd: the planner sees every payment.
	var reltuples float64
	require.NoError(t, pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'payments'::regclass`).Scan(&reltuples))
	require.Equal(t, float64(res.After), reltuples)

	var id string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM payments ORDER BY created_at DESC LIMIT 1`).Scan(&id))
	p, err := ledger.GetPayment(ctx, pool, id)
	require.NoError(t, err)
	require.True(t, p.AmountCaptured.IsPositive() || p.AmountRefunded.IsPositive(), "payment %s", id)
	require.Equal(t, "Order "+p.Details.Reference, p.Details.Description)
	require.Equal(t, p.Details.Reference, p.Details.Metadata["order_id"])
	require.NotZero(t, p.Details.Stamps)
	found, _, err := ledger.ListPayments(ctx, pool, ledger.PaymentFilter{Q: p.Details.Reference}, "", 0)
	require.NoError(t, err)
	require.NotEmpty(t, found)
	require.LessOrEqual(t, len(found), 2)
	require.Contains(t, []string{found[0].ID, found[len(found)-1].ID}, id)

	// A second run adds up to its new target, with ids of its own; a run
	// to a level already held adds nothing.
	opts.payments = 2500
	res2, err := fill(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, res.After, res2.Before)
	require.GreaterOrEqual(t, res2.After, int64(2500))
	perCopy()
	res3, err := fill(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, res2.After, res3.After)

	opts.search = 20
	searched, results, err := search(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, res2.After, searched)
	require.Len(t, results, len(lookups))
	for _, r := range results {
		require.Equal(t, 20, r.Lookups, r.Name)
		if strings.Contains(r.Name, "no such") {
			require.Zero(t, r.Found, r.Name)
		} else {
			require.GreaterOrEqual(t, r.Found, r.Lookups, r.Name)
		}
	}
}

// TestStampKeepsOrder: copies' ids sort in the order they were filled.
func TestStampKeepsOrder(t *testing.T) {
	t.Parallel()
	prev := ""
	for _, k := range []int64{0, 1, 9, 10, 61, 62, 3843, 3844, 1_000_000, 4_200_000, 56_800_235_583} {
		b := []byte("evt_AVfFa8anFJpta1R6z1cNVk2J")[4:]
		stamp(b, k)
		require.Greater(t, string(b), prev, "stamp %d", k)
		prev = string(b)
	}
}

// TestFillDetailsAndSearch: on a filled database, -fill-details takes the
// payments' details away and paygate's fill gives them back as they were,
// the double charges with them; -search finds every payment it looks for
// by each kind of lookup, and nothing for a term that names none.
func TestFillDetailsAndSearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, url := testdb.NewWithURL(t)
	opts := options{databaseURL: url, events: 1500, samplePayments: 60, paidTwice: 0.2, chunk: 300, workers: 2,
		span: 365 * 24 * time.Hour, progress: time.Hour, log: io.Discard}
	_, err := fill(ctx, opts)
	require.NoError(t, err)
	details := func() string {
		rows, err := pool.Query(ctx, `SELECT concat_ws(' ', id, reference, customer, description, metadata::text)
			FROM payments ORDER BY id`)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	doubled := func() string {
		// Open ones only: one the sample saw open and then resolved by a
		// refund was never open to the fill.
		rows, err := pool.Query(ctx, `SELECT reference || ' ' || state FROM double_charges WHERE state = 'open' ORDER BY 1`)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}
	want, wantDoubled := details(), doubled()
	require.Contains(t, want, "ord_")
	require.Contains(t, wantDoubled, "open")

	payments, took, err := fillDetails(ctx, opts)
	require.NoError(t, err)
	require.Positive(t, took)
	var n int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM payments`).Scan(&n))
	require.Equal(t, n, payments)
	require.Equal(t, want, details())
	require.Equal(t, wantDoubled, doubled())
	var emails int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM email_outbox WHERE kind = 'double_charge'
		AND recipient = 'ops@example.com'`).Scan(&emails))
	require.Equal(t, strings.Count(wantDoubled, "open"), emails)

	opts.search = 20
	searched, results, err := search(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, payments, searched)
	require.Len(t, results, len(lookups))
	for _, r := range results {
		require.Equal(t, 20, r.Lookups, r.Name)
		require.NotEmpty(t, r.Plan, r.Name)
		require.LessOrEqual(t, r.Median, r.P99, r.Name)
		if strings.Contains(r.Name, "no such") {
			require.Zero(t, r.Found, r.Name)
		} else {
			require.GreaterOrEqual(t, r.Found, r.Lookups, r.Name)
		}
	}
	var out strings.Builder
	opts.log = &out
	printSearch(opts, searched, results)
	require.Contains(t, out.String(), "reference=<order>")
}
