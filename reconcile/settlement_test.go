package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/ledger"
	striperef "github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/reconcile"
)

// TestSettlementInAnotherCurrency: a USD account takes a EUR charge, refunds
// part of it a day later at another rate, and pays out in USD. Stripe books
// each movement in USD with its exchange_rate; reconciliation matches them
// in USD, books the conversions through fx_clearing, and the ledger's USD
// balance at Stripe is Stripe's to the cent, its EUR balance zero.
func TestSettlementInAnotherCurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{sim: func(c *stripesim.Config) {
		c.SettlementCurrency = "usd"
		c.ExchangeRates = map[string]string{"eur": "1.0852"}
	}})
	ctx := context.Background()
	sim := b.sim
	p := sim.Pay(stripesim.PayOpts{Amount: 10000, Currency: "eur", Email: "buyer@example.com"})
	sim.Advance(24 * time.Hour)
	sim.SetExchangeRate("eur", "1.0791")
	r := sim.Refund(p, 4000)
	sim.Advance(time.Hour)
	po := sim.Payout(5000, "")
	b.deliver(t)

	charge, ok := sim.BalanceTransaction(p.BalanceTransactionID)
	require.True(t, ok)
	require.Equal(t, "usd", charge.Currency)
	require.Equal(t, int64(10852), charge.Amount, "100.00 eur at 1.0852")
	refund, _ := sim.BalanceTransaction(r.BalanceTransactionID)
	require.Equal(t, int64(-4316), refund.Amount, "40.00 eur at 1.0791")

	_, items := b.run(t, day)
	capture := find(t, items, byRef(striperef.CaptureRef(p.ChargeID)))
	require.Equal(t, reconcile.StatusMatched, capture.Status)
	require.Equal(t, "usd", capture.Currency)
	require.Equal(t, "108.52", capture.ProviderAmount.StringFixed(2))
	require.Equal(t, "108.52", capture.LedgerAmount.StringFixed(2))
	require.Equal(t, "eur", capture.PresentmentCurrency)
	require.Equal(t, "100.00", capture.PresentmentAmount.StringFixed(2))
	require.Equal(t, "1.0852", capture.ExchangeRate.String())
	fee := find(t, items, func(it reconcile.Item) bool { return it.Type == reconcile.TypeFee && it.ProviderTxnID == charge.ID })
	require.Equal(t, reconcile.StatusFeePosted, fee.Status)
	require.Equal(t, "usd", fee.Currency, "the fee is charged in the settlement currency")

	next, items2 := b.run(t, day.AddDate(0, 0, 1))
	require.Zero(t, next.Report.Summary[reconcile.StatusCurrencyMismatch])
	require.Zero(t, next.Report.Summary[reconcile.StatusMissingAtProvider])
	rf := find(t, items2, byRef(striperef.RefundRef(r.ID)))
	require.Equal(t, reconcile.StatusMatched, rf.Status)
	require.Equal(t, "-43.16", rf.LedgerAmount.StringFixed(2))
	require.Equal(t, "-40.00", rf.PresentmentAmount.StringFixed(2))
	require.Equal(t, reconcile.StatusMatched, find(t, items2, byRef(striperef.PayoutRef(po.ID))).Status)

	// The conversion is two balanced adjustments with Stripe's rate.
	leg, err := ledger.TransactionByRef(ctx, b.world.Pool, striperef.SettlementRef(charge.ID, "usd"))
	require.NoError(t, err)
	require.Equal(t, "1.0852", leg.ExchangeRate.Decimal.String())
	require.Equal(t, p.ID, leg.PaymentID)

	// The books follow the money: provider_balance per currency is what
	// Stripe's balance holds (every balance transaction's net), eur none.
	stripeNet := map[string]int64{}
	for _, bt := range sim.BalanceTransactions() {
		stripeNet[bt.Currency] += bt.Net
	}
	require.Equal(t, map[string]int64{"usd": 10852 - charge.Fee - 4316 - 5000}, stripeNet)
	for cur, want := range map[string]string{"usd": decimal.New(stripeNet["usd"], -2).StringFixed(2), "eur": "0.00"} {
		got, err := ledger.Balance(ctx, b.world.Pool, ledger.AccountProviderBalance, cur)
		require.NoError(t, err)
		require.Equal(t, want, ledger.Format(got, cur), "provider_balance in %s", cur)
	}
	tb, err := ledger.TrialBalance(ctx, b.world.Pool)
	require.NoError(t, err)
	for _, c := range tb.Currencies {
		require.True(t, c.Balanced, c.Currency)
	}

	// A re-run books nothing twice.
	again, _ := b.run(t, day)
	require.Zero(t, again.Report.Summary[reconcile.StatusFeePosted])
	require.Zero(t, again.Report.Summary[reconcile.StatusCurrencyMismatch])
}
