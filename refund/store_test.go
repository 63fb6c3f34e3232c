package refund_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/refund"
)

// payment stores a payment as the worker's projection would.
func payment(t *testing.T, pool *pgxpool.Pool, id, provider, currency, captured, refunded string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO payments (id, provider, status, currency, amount, amount_captured, amount_refunded)
		VALUES ($1, $2, 'succeeded', $3, $4, $4, $5)`, id, provider, currency, captured, refunded)
	require.NoError(t, err)
}

func create(t *testing.T, pool *pgxpool.Pool, n refund.New) (refund.Request, error) {
	t.Helper()
	if n.Actor == "" {
		n.Actor = "ops:test"
	}
	if n.CanRefund == nil {
		n.CanRefund = func(p string) bool { return p == "stripe" }
	}
	var r refund.Request
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		var err error
		r, err = refund.CreateTx(context.Background(), tx, n)
		return err
	})
	return r, err
}

func amount(s string) decimal.NullDecimal {
	return decimal.NewNullDecimal(decimal.RequireFromString(s))
}

func TestCreateChecksWhatIsRefundable(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	payment(t, pool, "pi_1", "stripe", "usd", "100.00", "20.00")
	payment(t, pool, "pi_jpy", "stripe", "jpy", "5000", "0")
	payment(t, pool, "8816000000000001", "adyen", "eur", "10.00", "0")

	r, err := create(t, pool, refund.New{PaymentID: "pi_1", Amount: amount("30"), Reason: "requested_by_customer", Note: "late delivery"})
	require.NoError(t, err)
	require.Equal(t, refund.StateRequested, r.State)
	require.Equal(t, "30.00", r.Amount.StringFixed(2))
	require.Equal(t, "usd", r.Currency)
	require.Regexp(t, `^rr_[0-9a-f]{24}$`, r.ID)
	require.Equal(t, "paygate-refund-"+r.ID, r.ProviderKey())

	// 100 captured − 20 refunded − 30 requested: 50 is left.
	_, err = create(t, pool, refund.New{PaymentID: "pi_1", Amount: amount("50.01")})
	require.ErrorIs(t, err, refund.ErrExceedsRefundable)
	all, err := create(t, pool, refund.New{PaymentID: "pi_1"})
	require.NoError(t, err)
	require.Equal(t, "50.00", all.Amount.StringFixed(2), "no amount: everything refundable")
	_, err = create(t, pool, refund.New{PaymentID: "pi_1"})
	require.ErrorIs(t, err, refund.ErrExceedsRefundable, "nothing left")

	for name, tc := range map[string]struct {
		n    refund.New
		want error
	}{
		"unknown payment":       {refund.New{PaymentID: "pi_none"}, refund.ErrPaymentNotFound},
		"another provider":      {refund.New{PaymentID: "8816000000000001"}, refund.ErrUnsupportedProvider},
		"unknown reason":        {refund.New{PaymentID: "pi_jpy", Reason: "changed_mind"}, refund.ErrInvalidRequest},
		"more decimals":         {refund.New{PaymentID: "pi_jpy", Amount: amount("10.5")}, refund.ErrInvalidRequest},
		"zero":                  {refund.New{PaymentID: "pi_jpy", Amount: amount("0")}, refund.ErrInvalidRequest},
		"negative":              {refund.New{PaymentID: "pi_jpy", Amount: amount("-1")}, refund.ErrInvalidRequest},
		"a note over 500 runes": {refund.New{PaymentID: "pi_jpy", Note: string(make([]rune, 501))}, refund.ErrInvalidRequest},
	} {
		_, err := create(t, pool, tc.n)
		require.ErrorIs(t, err, tc.want, name)
	}
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM refund_requests`).Scan(&n))
	require.Equal(t, 2, n, "refused requests record nothing")
}

// TestConcurrentRequestsNeverOverRefund: twenty requests of 10.00 racing on
// a payment with 100.00 refundable: exactly ten are recorded, decided by
// the payment's row lock, and the rest are refused.
func TestConcurrentRequestsNeverOverRefund(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	payment(t, pool, "pi_race", "stripe", "usd", "100.00", "0")
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		accepted, refused int
		start             = make(chan struct{})
	)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := create(t, pool, refund.New{PaymentID: "pi_race", Amount: amount("10.00")})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted++
			default:
				require.ErrorIs(t, err, refund.ErrExceedsRefundable)
				refused++
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Equal(t, 10, accepted)
	require.Equal(t, 10, refused)
	var sum decimal.Decimal
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT sum(amount) FROM refund_requests WHERE payment_id = 'pi_race'`).Scan(&sum))
	require.Equal(t, "100.00", sum.StringFixed(2))
}

func settle(t *testing.T, pool *pgxpool.Pool, reps ...refund.Report) []refund.Request {
	t.Helper()
	var settled []refund.Request
	require.NoError(t, pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		var err error
		settled, err = refund.SettleTx(context.Background(), tx, reps)
		return err
	}))
	var failed []refund.Request
	for _, r := range settled {
		if r.State == refund.StateFailed {
			failed = append(failed, r)
		}
	}
	return failed
}

func get(t *testing.T, pool *pgxpool.Pool, id string) refund.Request {
	t.Helper()
	r, err := refund.Get(context.Background(), pool, id)
	require.NoError(t, err)
	return r
}

// TestReportsSettleInAnyOrder: the provider's reports settle a request
// whichever comes first (the saga's record or the report), a failure is
// final even before the success it follows, and a refund that fails days
// after succeeding is compensated once.
func TestReportsSettleInAnyOrder(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ctx := context.Background()
	payment(t, pool, "pi_s", "stripe", "usd", "100.00", "0")
	mk := func() refund.Request {
		r, err := create(t, pool, refund.New{PaymentID: "pi_s", Amount: amount("5")})
		require.NoError(t, err)
		return r
	}
	ok := func(r refund.Request, re string) refund.Report {
		return refund.Report{Provider: "stripe", Reference: r.ID, ProviderRefundID: re, Succeeded: true}
	}
	bad := func(r refund.Request, re string) refund.Report {
		return refund.Report{Provider: "stripe", Reference: r.ID, ProviderRefundID: re, FailureReason: "expired_or_canceled_card"}
	}

	// The report before the saga's record: succeeded, and the record keeps it.
	a := mk()
	require.Empty(t, settle(t, pool, ok(a, "re_a")))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		r, err := refund.MarkSubmittedTx(ctx, tx, a.ID, "re_a")
		require.Equal(t, refund.StateSucceeded, r.State)
		return err
	}))
	require.Equal(t, "re_a", get(t, pool, a.ID).ProviderRefundID)

	// Found by the refund id the saga recorded, without metadata.
	b := mk()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := refund.MarkSubmittedTx(ctx, tx, b.ID, "re_b")
		return err
	}))
	require.Empty(t, settle(t, pool, refund.Report{Provider: "stripe", ProviderRefundID: "re_b", Succeeded: true}))
	require.Equal(t, refund.StateSucceeded, get(t, pool, b.ID).State)

	// Failed after succeeding: compensated once, however often reported.
	failed := settle(t, pool, bad(a, "re_a"), bad(a, "re_a"))
	require.Len(t, failed, 1)
	require.Equal(t, a.ID, failed[0].ID)
	require.Empty(t, settle(t, pool, bad(a, "re_a")))
	require.Equal(t, refund.StateFailed, get(t, pool, a.ID).State)

	// The failure first, the success late: still failed.
	c := mk()
	require.Len(t, settle(t, pool, bad(c, "re_c")), 1)
	require.Empty(t, settle(t, pool, ok(c, "re_c")))
	require.Equal(t, refund.StateFailed, get(t, pool, c.ID).State)

	// Failed by paygate (no refund named), then the provider reports the
	// refund made after all: the money moved, so it succeeded.
	d := mk()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, changed, err := refund.FailTx(ctx, tx, d.ID, "key window passed")
		require.True(t, changed)
		return err
	}))
	require.Empty(t, settle(t, pool, ok(d, "re_d")))
	require.Equal(t, refund.StateSucceeded, get(t, pool, d.ID).State)

	// Another provider's refund of the same id settles nothing.
	e := mk()
	require.Empty(t, settle(t, pool, refund.Report{Provider: "adyen", Reference: e.ID, ProviderRefundID: "re_e", Succeeded: true}))
	require.Equal(t, refund.StateRequested, get(t, pool, e.ID).State)

	// Among reports of refunds made at the provider, which name no request,
	// one that names a request still settles it, and a later report of the
	// same batch finds it by the refund id the first recorded.
	f := mk()
	failed = settle(t, pool,
		refund.Report{Provider: "stripe", ProviderRefundID: "re_elsewhere_1", Succeeded: true},
		ok(f, "re_f"),
		refund.Report{Provider: "stripe", ProviderRefundID: "re_f", FailureReason: "expired_or_canceled_card"},
		refund.Report{Provider: "stripe", ProviderRefundID: "re_elsewhere_2", Succeeded: true})
	require.Len(t, failed, 1)
	require.Equal(t, f.ID, failed[0].ID)
	require.Equal(t, "re_f", get(t, pool, f.ID).ProviderRefundID)

	// Failed and settled requests release their reservation: only e, still
	// open, holds its 5.00 (the succeeded ones count through the payment's
	// amount_refunded, which the refunds' events keep and this test does
	// not move).
	all, err := create(t, pool, refund.New{PaymentID: "pi_s"})
	require.NoError(t, err)
	require.Equal(t, "95.00", all.Amount.StringFixed(2))
}
