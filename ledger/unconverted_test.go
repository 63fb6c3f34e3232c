package ledger_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/ledger"
)

// TestListUnconverted: the movements an export in dollars leaves out are
// listed with their kind, amount, payment and order reference, in posting
// order and in pages; a movement settled after the range's end stays in
// the range's list (as in its count), a settled one, a conversion and a
// movement in dollars never are; one currency lists its own; a cursor it
// did not hand out, an empty range and an unknown books currency are
// refused.
func TestListUnconverted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fixedLedger(t, b)
	b.learnReference(t, "pi_2", "ord-yen")
	books := func(from, to time.Time, currency string) ledger.UnconvertedFilter {
		return ledger.UnconvertedFilter{From: from, To: to, BooksCurrency: "usd", Currency: currency}
	}

	// February: pi_2's capture in yen, not settled into dollars.
	got := listUnconverted(t, b, books(feb.Start, feb.End(), ""), 50)
	require.Len(t, got, 1)
	require.Equal(t, []ledger.UnconvertedMovement{{ID: got[0].ID, Ref: "stripe:capture:ch_2", PostedAt: time.Date(2026, 2, 26, 15, 0, 0, 0, time.UTC),
		Kind: ledger.KindCapture, Currency: "jpy", Amount: d("5000"), PaymentID: "pi_2", Reference: "ord-yen"}}, got)
	require.Equal(t, "5000", ledger.Format(got[0].Amount, "jpy"))
	requireListedAsCounted(t, b, books(feb.Start, feb.End(), ""))

	// April: pounds not settled (two at one instant), a payout in euros
	// (no payment), pounds settled into dollars and a capture in dollars.
	at := func(day, hour int) time.Time { return time.Date(2026, 4, day, hour, 0, 0, 0, time.UTC) }
	for _, txn := range []ledger.Transaction{
		ledger.NewCapture("stripe:capture:ch_g1", "pi_g1", "evt", "gbp", d("129.00"), at(3, 9)),
		ledger.NewCapture("stripe:capture:ch_g2", "pi_g2", "evt", "gbp", d("34.00"), at(2, 9)),
		ledger.NewCapture("stripe:capture:ch_g3", "pi_g3", "evt", "gbp", d("12.50"), at(2, 9)),
		ledger.NewRefund("stripe:refund:re_g2", "pi_g2", "evt", "gbp", d("4.00"), at(4, 9)),
		ledger.NewPayout("stripe:payout:po_eur", "evt", "eur", d("300.00"), at(5, 9)),
		ledger.NewCapture("stripe:capture:ch_g4", "pi_g4", "evt", "gbp", d("80.00"), at(2, 10)),
		ledger.NewCapture("stripe:capture:ch_u", "pi_u", "evt", "usd", d("7.00"), at(2, 11)),
	} {
		b.mustPost(t, txn)
	}
	for _, leg := range ledger.NewSettlement(func(c string) string { return "stripe:fx:txn_g4:" + c }, "pi_g4", "evt",
		ledger.Money{Amount: d("80.00"), Currency: "gbp"}, ledger.Money{Amount: d("101.60"), Currency: "usd"}, d("1.27"), at(2, 10)) {
		b.mustPost(t, leg)
	}
	april := books(time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), "")
	var whole []string
	for _, m := range listUnconverted(t, b, april, 50) {
		whole = append(whole, strings.Join([]string{m.PostedAt.Format(time.RFC3339), m.Ref, string(m.Kind), m.Currency,
			ledger.Format(m.Amount, m.Currency), m.PaymentID}, " "))
	}
	require.Equal(t, []string{
		"2026-04-02T09:00:00Z stripe:capture:ch_g2 capture gbp 34.00 pi_g2",
		"2026-04-02T09:00:00Z stripe:capture:ch_g3 capture gbp 12.50 pi_g3",
		"2026-04-03T09:00:00Z stripe:capture:ch_g1 capture gbp 129.00 pi_g1",
		"2026-04-04T09:00:00Z stripe:refund:re_g2 refund gbp 4.00 pi_g2",
		"2026-04-05T09:00:00Z stripe:payout:po_eur payout eur 300.00 ",
	}, whole, "in posting order, a movement of no payment among them")
	for limit := 1; limit <= 3; limit++ {
		require.Equal(t, listUnconverted(t, b, april, 50), listUnconverted(t, b, april, limit), "pages of %d", limit)
	}
	requireListedAsCounted(t, b, april)
	april.Currency = "eur"
	eur := listUnconverted(t, b, april, 50)
	require.Len(t, eur, 1)
	require.Equal(t, "stripe:payout:po_eur", eur[0].Ref)
	require.Empty(t, eur[0].PaymentID)
	requireListedAsCounted(t, b, april)
	april.Currency = "usd"
	require.Empty(t, listUnconverted(t, b, april, 50), "the books currency is never left out")

	// pi_2 settled after February's end: still left out of February.
	legs := ledger.NewSettlement(func(c string) string { return "stripe:fx:txn_late:" + c }, "pi_2", "evt_late",
		ledger.Money{Amount: d("5000"), Currency: "jpy"}, ledger.Money{Amount: d("33.50"), Currency: "usd"}, d("0.0067"),
		time.Date(2026, 2, 27, 3, 0, 0, 0, time.UTC))
	b.mustPost(t, legs[0])
	b.mustPost(t, legs[1])
	require.Len(t, listUnconverted(t, b, books(feb.Start, feb.End(), ""), 50), 1)
	requireListedAsCounted(t, b, books(feb.Start, feb.End(), ""))
	require.Empty(t, listUnconverted(t, b, books(feb.Start, feb.End().AddDate(0, 1, 0), "jpy"), 50),
		"settled by the end of a range through March")

	_, _, err := ledger.ListUnconverted(b.ctx, b.pool, books(feb.Start, feb.End(), ""), "dTE6eDoy", 10)
	require.ErrorIs(t, err, ledger.ErrBadCursor)
	_, _, err = ledger.ListUnconverted(b.ctx, b.pool, books(feb.End(), feb.End(), ""), "", 10)
	require.ErrorIs(t, err, ledger.ErrInvalidPeriod)
	_, _, err = ledger.ListUnconverted(b.ctx, b.pool, ledger.UnconvertedFilter{From: feb.Start, To: feb.End(), BooksCurrency: "zzz"}, "", 10)
	require.Error(t, err)
}

// requireListedAsCounted: the list of f is as long as the count of the
// exports of its range in its books currency.
func requireListedAsCounted(t *testing.T, b *testBundle, f ledger.UnconvertedFilter) {
	t.Helper()
	for _, format := range []ledger.JournalFormat{ledger.JournalXero, ledger.JournalQuickBooks} {
		var buf strings.Builder
		sum, err := ledger.WriteJournal(b.ctx, b.pool, &buf, ledger.JournalOpts{From: f.From, To: f.To, Format: format,
			Granularity: ledger.JournalByTransaction, Currency: f.Currency,
			Settings: ledger.ExportSettings{XeroTaxRate: "Tax Exempt", BooksCurrency: f.BooksCurrency}})
		require.NoError(t, err)
		require.Len(t, listUnconverted(t, b, f, 50), sum.Unconverted, "%s of [%s, %s) in %q", format, f.From, f.To, f.Currency)
	}
}
