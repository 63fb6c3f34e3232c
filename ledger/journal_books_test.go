package ledger_test

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/ledger"
)

// modelMovement is a movement of the property's model: what the ledger
// holds, and when the provider settled it into which currency.
type modelMovement struct {
	tx ledger.Transaction
	id int64
	// effect on provider_balance, as the settlement's presentment leg
	// takes it out.
	effect decimal.Decimal
	// settledInto, rate and settledAt: its settlement; "" when the
	// provider has not settled it.
	settledInto string
	rate        decimal.Decimal
	settledAt   time.Time
}

func minorUnit(currency string) decimal.Decimal {
	exp, err := ledger.Exponent(currency)
	if err != nil {
		panic(err)
	}
	return decimal.New(1, -exp)
}

// convert is a line converted as the exports convert it: at rate, rounded
// half away from zero to books' minor unit.
func convert(amount, rate decimal.Decimal, books string) decimal.Decimal {
	exp, _ := ledger.Exponent(books)
	return amount.Mul(rate).Round(exp)
}

// modelJournal is what the model says a transaction's journal holds in the
// books currency: each account's net (debit positive), zero nets left out.
func modelJournal(m *modelMovement, books string) map[string]decimal.Decimal {
	out := map[string]decimal.Decimal{}
	diff := decimal.Zero
	for _, e := range m.tx.Entries {
		d, c := e.Debit, e.Credit
		if m.tx.Currency != books {
			d, c = convert(d, m.rate, books), convert(c, m.rate, books)
		}
		out[string(e.Account)] = out[string(e.Account)].Add(d).Sub(c)
		diff = diff.Add(d).Sub(c)
	}
	// The rounding difference goes on fx_clearing.
	fx := string(ledger.AccountFXClearing)
	out[fx] = out[fx].Sub(diff)
	for a, v := range out {
		if v.IsZero() {
			delete(out, a)
		}
	}
	return out
}

// TestJournalInBooksCurrency: random days of payments in several
// currencies, each movement in another currency than the books currency
// settled into it at a rate of its own, settled into a third currency,
// or not settled (yet: some settle after the export's range). Whatever
// the day, in Xero's and QuickBooks' formats, by day and by transaction:
//
//   - every journal balances in the books currency, its amounts at its
//     minor unit;
//   - by transaction, the journals are exactly the books currency's
//     movements and those settled into it within the range (at the later
//     of their own posting and their settlement), each line converted at
//     its own settlement's rate (a refund's own, not its capture's), the
//     rounding on fx_clearing; no conversion is exported;
//   - sales in the books currency are the model's captures converted at
//     the settlement rates: within one minor unit per converted movement
//     of the exact product, and exactly the sum of the rounded lines;
//   - by day, each account sums what it does by transaction;
//   - the movements posted in the range and left out are counted: the
//     movements in another currency not settled into the books currency
//     by the range's end.
func TestJournalInBooksCurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := time.Date(2027, 1, 10, 0, 0, 0, 0, time.UTC)
	currencies := []string{"usd", "eur", "gbp", "jpy", "kwd"}
	check := 0
	rapid.Check(t, func(rt *rapid.T) {
		check++
		// Every case in days of its own, none closed: the ledger is shared.
		from := start.AddDate(0, 0, 16*check)
		to := from.AddDate(0, 0, 4)
		books := rapid.SampledFrom([]string{"usd", "eur", "jpy"}).Draw(rt, "books")
		tick := 0
		at := func(label string) time.Time {
			// From a day before the range to a day before its end, each
			// instant once.
			tick++
			s := rapid.IntRange(0, 4*86400-1).Draw(rt, label)
			return from.AddDate(0, 0, -1).Add(time.Duration(s)*time.Second + time.Duration(tick)*time.Millisecond)
		}
		amount := func(currency, label string) decimal.Decimal {
			d, err := ledger.FromMinor(rapid.Int64Range(1, 2_000_000).Draw(rt, label), currency)
			require.NoError(rt, err)
			return d
		}
		var moves []*modelMovement
		add := func(tx ledger.Transaction) *modelMovement {
			m := &modelMovement{tx: tx, effect: decimal.Zero}
			for _, e := range tx.Entries {
				if e.Account == ledger.AccountProviderBalance {
					m.effect = m.effect.Add(e.Debit).Sub(e.Credit)
				}
			}
			moves = append(moves, m)
			return m
		}
		for p := range rapid.IntRange(1, 5).Draw(rt, "payments") {
			pid := fmt.Sprintf("c%d-pi%d", check, p)
			cur := rapid.SampledFrom(currencies).Draw(rt, "currency")
			ref := func(what string) string { return fmt.Sprintf("c%d:%s:%d", check, what, len(moves)) }
			captured := amount(cur, "captured")
			add(ledger.NewCapture(ref("capture"), pid, "evt", cur, captured, at("capture_at")))
			var last decimal.Decimal
			for range rapid.IntRange(0, 3).Draw(rt, "refunds") {
				r := amount(cur, "refund")
				if !last.IsZero() && rapid.Bool().Draw(rt, "same_as_last") {
					r = last // alike in all but the rate: paired in order
				}
				last = r
				add(ledger.NewRefund(ref("refund"), pid, "evt", cur, r, at("refund_at")))
			}
			if rapid.Bool().Draw(rt, "dispute") {
				add(ledger.NewDisputeWithdrawal(ref("dispute"), pid, "evt", cur, amount(cur, "disputed"), at("dispute_at")))
			}
			if rapid.Bool().Draw(rt, "adjustment") {
				// Three lines of unequal amounts: rounded one by one, they
				// may not balance.
				sales, other := amount(cur, "adj_sales"), amount(cur, "adj_other")
				add(ledger.Transaction{Ref: ref("adjustment"), Kind: ledger.KindAdjustment, Currency: cur, OccurredAt: at("adj_at"),
					PaymentID: pid, Entries: []ledger.Entry{ledger.Debit(ledger.AccountProviderBalance, sales.Add(other)),
						ledger.Credit(ledger.AccountSales, sales), ledger.Credit(ledger.AccountReconciliationAdjustments, other)}})
			}
			if rapid.Bool().Draw(rt, "fee") {
				// Fees are in the balance's currency, whatever the payment's.
				fee := rapid.SampledFrom([]string{books, cur}).Draw(rt, "fee_currency")
				add(ledger.NewFee(ref("fee"), pid, "evt", fee, amount(fee, "fee_amount"), at("fee_at")))
			}
		}
		if rapid.Bool().Draw(rt, "payout") {
			cur := rapid.SampledFrom(currencies).Draw(rt, "payout_currency")
			add(ledger.NewPayout(fmt.Sprintf("c%d:payout", check), "evt", cur, amount(cur, "payout_amount"), at("payout_at")))
		}

		var txs []ledger.Transaction
		for i, m := range moves {
			txs = append(txs, m.tx)
			if m.tx.Currency == books || m.tx.PaymentID == "" {
				continue
			}
			into := books
			switch rapid.IntRange(0, 3).Draw(rt, "settled") {
			case 0:
				continue // not settled
			case 1:
				// Into a balance in a third currency: never into the books'.
				into = rapid.SampledFrom(slices.DeleteFunc(slices.Clone(currencies), func(c string) bool {
					return c == books || c == m.tx.Currency
				})).Draw(rt, "into")
			}
			rate := decimal.New(rapid.Int64Range(1, 3_000_000).Draw(rt, "rate_micro"), -6)
			settled := convert(m.effect, rate, into)
			if settled.IsZero() {
				continue // too small to settle anything
			}
			// Settled up to four days after it moved: often after the
			// range's end.
			settledAt := m.tx.OccurredAt.Add(time.Duration(rapid.IntRange(0, 4*86400).Draw(rt, "settle_after_s")) * time.Second)
			legs := ledger.NewSettlement(func(c string) string { return fmt.Sprintf("c%d:fx:%d:%s", check, i, c) }, m.tx.PaymentID, "evt",
				ledger.Money{Amount: m.effect, Currency: m.tx.Currency}, ledger.Money{Amount: settled, Currency: into}, rate, settledAt)
			txs = append(txs, legs[:]...)
			m.settledInto, m.rate, m.settledAt = into, rate, settledAt
		}
		// Posted in any order: the export reads posting instants, not
		// ids.
		txs = rapid.Permutation(txs).Draw(rt, "posting_order")
		require.NoError(rt, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, err := ledger.PostManyTx(b.ctx, tx, txs)
			return err
		}))
		ids := map[string]int64{}
		rows, err := b.pool.Query(b.ctx, `SELECT ref, id FROM ledger_transactions WHERE ref LIKE $1`, fmt.Sprintf("c%d:%%", check))
		require.NoError(rt, err)
		for rows.Next() {
			var ref string
			var id int64
			require.NoError(rt, rows.Scan(&ref, &id))
			ids[ref] = id
		}
		require.NoError(rt, rows.Err())
		for _, m := range moves {
			m.id = ids[m.tx.Ref]
		}

		// The model's pairing: within a payment, currency and effect, the
		// n-th movement with the n-th settlement into the books currency,
		// both in posting order.
		type group struct {
			payment, currency, effect string
		}
		groups := map[group][]*modelMovement{}
		for _, m := range moves {
			if m.tx.Currency != books && m.tx.PaymentID != "" {
				g := group{m.tx.PaymentID, m.tx.Currency, m.effect.String()}
				groups[g] = append(groups[g], m)
			}
		}
		type counted struct {
			m          *modelMovement
			rate       decimal.Decimal
			at         time.Time
			exportedIn bool
		}
		var (
			want = map[string]counted{}
			left []*modelMovement // posted in the range, not settled into books by its end
		)
		in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
		for _, m := range moves {
			if m.tx.Currency == books && in(m.tx.OccurredAt) {
				want["PG-T"+strconv.FormatInt(m.id, 10)] = counted{m: m, at: m.tx.OccurredAt}
			}
		}
		for _, ms := range groups {
			slices.SortFunc(ms, func(x, y *modelMovement) int { return x.tx.OccurredAt.Compare(y.tx.OccurredAt) })
			var settlements []*modelMovement
			for _, m := range ms {
				if m.settledInto == books {
					settlements = append(settlements, m)
				}
			}
			slices.SortFunc(settlements, func(x, y *modelMovement) int { return x.settledAt.Compare(y.settledAt) })
			for i, m := range ms {
				if i >= len(settlements) {
					if in(m.tx.OccurredAt) {
						left = append(left, m)
					}
					continue
				}
				s := settlements[i]
				exportAt := m.tx.OccurredAt
				if s.settledAt.After(exportAt) {
					exportAt = s.settledAt
				}
				if in(exportAt) {
					want["PG-T"+strconv.FormatInt(m.id, 10)] = counted{m: m, rate: s.rate, at: exportAt}
				} else if in(m.tx.OccurredAt) {
					left = append(left, m)
				}
			}
		}
		for _, m := range moves {
			if m.tx.Currency != books && m.tx.PaymentID == "" && in(m.tx.OccurredAt) {
				left = append(left, m) // a payout in another currency: never converted
			}
		}
		unconverted := len(left)

		// What the model expects by transaction, and its sales.
		wantJournals := map[string]map[string]decimal.Decimal{}
		wantSales, exactSales, converted := decimal.Zero, decimal.Zero, 0
		for id, c := range want {
			m := *c.m
			m.rate = c.rate
			lines := modelJournal(&m, books)
			if len(lines) > 0 {
				wantJournals[id] = lines
			}
			wantSales = wantSales.Sub(lines[string(ledger.AccountSales)])
			for _, e := range m.tx.Entries {
				if e.Account != ledger.AccountSales {
					continue
				}
				net := e.Credit.Sub(e.Debit)
				if m.tx.Currency != books {
					net = net.Mul(c.rate)
				}
				exactSales = exactSales.Add(net)
			}
			if m.tx.Currency != books {
				converted++
			}
		}

		unit := minorUnit(books)
		exp, _ := ledger.Exponent(books)
		settings := ledger.ExportSettings{XeroTaxRate: "Tax Exempt", BooksCurrency: books}
		exported := map[string]bool{} // the journals of the exports by transaction
		for _, format := range []ledger.JournalFormat{ledger.JournalXero, ledger.JournalQuickBooks} {
			totals := map[ledger.JournalGranularity]map[string]decimal.Decimal{}
			for _, g := range ledger.JournalGranularities {
				var buf strings.Builder
				sum, err := ledger.WriteJournal(b.ctx, b.pool, &buf, ledger.JournalOpts{From: from, To: to, Format: format,
					Granularity: g, Settings: settings})
				require.NoError(rt, err)
				require.Equal(rt, unconverted, sum.Unconverted, "%s by %s: the movements left out are counted", format, g)
				lines := parseJournal(rt, format, g, buf.String())
				requireBalancedJournals(rt, lines)
				got := map[string]map[string]decimal.Decimal{}
				totals[g] = map[string]decimal.Decimal{}
				for _, l := range lines {
					for _, side := range []decimal.Decimal{l.debit, l.credit} {
						require.GreaterOrEqual(rt, side.Exponent(), -exp, "%s: %s is finer than %s's minor unit", format, side, books)
					}
					net := l.debit.Sub(l.credit)
					id, _, _ := strings.Cut(l.journal, " ")
					if got[id] == nil {
						got[id] = map[string]decimal.Decimal{}
					}
					got[id][l.account] = got[id][l.account].Add(net)
					totals[g][l.account] = totals[g][l.account].Add(net)
				}
				if g != ledger.JournalByTransaction {
					continue
				}
				require.Equal(rt, sortedKeys(wantJournals), sortedKeys(got), "%s: the journals are the movements in %s or settled into it", format, books)
				for id := range got {
					exported[id] = true
				}
				for id, w := range wantJournals {
					require.Equal(rt, decimalsText(w), decimalsText(got[id]), "%s %s", format, id)
				}
				sales := got // sales by transaction, credits positive
				total := decimal.Zero
				for _, j := range sales {
					total = total.Sub(j[string(ledger.AccountSales)])
				}
				require.True(rt, total.Equal(wantSales), "%s: sales %s, the model's %s", format, total, wantSales)
				slack := unit.Mul(decimal.NewFromInt(int64(converted)))
				require.True(rt, total.Sub(exactSales).Abs().LessThanOrEqual(slack),
					"%s: sales %s, the captures at the settlement rates %s: more than a minor unit per converted movement (%d) apart",
					format, total, exactSales, converted)
			}
			require.Equal(rt, decimalsText(totals[ledger.JournalByTransaction]), decimalsText(totals[ledger.JournalByDay]),
				"%s: by day, each account sums what it does by transaction", format)
		}

		// The movements left out, listed a page at a time: the model's, in
		// posting order, each as the ledger holds it.
		slices.SortFunc(left, func(x, y *modelMovement) int {
			return cmp.Or(x.tx.OccurredAt.Compare(y.tx.OccurredAt), cmp.Compare(x.id, y.id))
		})
		page := rapid.IntRange(1, 4).Draw(rt, "page")
		listed := listUnconverted(rt, b, ledger.UnconvertedFilter{From: from, To: to, BooksCurrency: books}, page)
		require.Len(rt, listed, len(left), "the list holds what the exports count")
		for i, m := range left {
			l := listed[i]
			require.Equal(rt, []any{m.id, m.tx.Ref, m.tx.Kind, m.tx.Currency, m.tx.PaymentID},
				[]any{l.ID, l.Ref, l.Kind, l.Currency, l.PaymentID}, "movement %d of the list", i)
			require.True(rt, m.tx.OccurredAt.Equal(l.PostedAt), "%s posted at %s, listed at %s", m.tx.Ref, m.tx.OccurredAt, l.PostedAt)
			debits := decimal.Zero
			for _, e := range m.tx.Entries {
				debits = debits.Add(e.Debit)
			}
			require.Equal(rt, ledger.Format(debits, m.tx.Currency), ledger.Format(l.Amount, m.tx.Currency), "%s moves its debits", m.tx.Ref)
		}
		// Whatever the model says: of the range's movements in another
		// currency, each is either in the export by transaction or in the
		// list, never both, never neither.
		isListed := map[int64]bool{}
		for _, l := range listed {
			isListed[l.ID] = true
		}
		for _, m := range moves {
			if m.tx.Currency == books || !in(m.tx.OccurredAt) {
				continue
			}
			require.NotEqual(rt, isListed[m.id], exported["PG-T"+strconv.FormatInt(m.id, 10)],
				"%s (%s): exported or listed, exactly one of them", m.tx.Ref, m.tx.Currency)
		}
		// For any day of the range (and the day before it), and any one
		// currency, the list is as long as the exports' count.
		for day := -1; day < 4; day++ {
			f := ledger.UnconvertedFilter{From: from.AddDate(0, 0, day), To: from.AddDate(0, 0, day+1), BooksCurrency: books}
			if day == 3 {
				f.From, f.To, f.Currency = from, to, rapid.SampledFrom(currencies).Draw(rt, "list_currency")
			}
			var buf strings.Builder
			sum, err := ledger.WriteJournal(b.ctx, b.pool, &buf, ledger.JournalOpts{From: f.From, To: f.To, Format: ledger.JournalQuickBooks,
				Granularity: ledger.JournalByDay, Currency: f.Currency, Settings: settings})
			require.NoError(rt, err)
			require.Len(rt, listUnconverted(rt, b, f, page), sum.Unconverted, "[%s, %s) in %q", f.From, f.To, f.Currency)
		}
	})
}

// listUnconverted reads every page of ListUnconverted, limit at a time.
func listUnconverted(t tb, b *testBundle, f ledger.UnconvertedFilter, limit int) []ledger.UnconvertedMovement {
	t.Helper()
	var (
		out    []ledger.UnconvertedMovement
		cursor string
	)
	for {
		page, next, err := ledger.ListUnconverted(b.ctx, b.pool, f, cursor, limit)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), limit)
		for _, m := range page {
			if n := len(out); n > 0 {
				last := out[n-1]
				require.True(t, last.PostedAt.Before(m.PostedAt) || last.PostedAt.Equal(m.PostedAt) && last.ID < m.ID,
					"%s (%d) follows %s (%d): posting order, each movement once", m.Ref, m.ID, last.Ref, last.ID)
			}
			out = append(out, m)
		}
		if next == "" {
			return out
		}
		require.Len(t, page, limit, "a page before the last is full")
		cursor = next
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// decimalsText renders nets for comparison, zero ones left out.
func decimalsText(m map[string]decimal.Decimal) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if !v.IsZero() {
			out[k] = v.String()
		}
	}
	return out
}

// xeroPart is one part of a Xero export, read back.
type xeroPart struct {
	header   []string
	rows     [][]string
	journals []string // each journal's key (Narration and Date), in order
	sizes    []int    // each journal's number of lines
}

func readXeroPart(t tb, text string) xeroPart {
	t.Helper()
	records, err := csv.NewReader(strings.NewReader(text)).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, records)
	p := xeroPart{header: records[0], rows: records[1:]}
	for _, r := range p.rows {
		key := r[0] + "|" + r[1]
		if n := len(p.journals); n > 0 && p.journals[n-1] == key {
			p.sizes[n-1]++
			continue
		}
		require.NotContains(t, p.journals, key, "journal %s is split within a part", key)
		p.journals, p.sizes = append(p.journals, key), append(p.sizes, 1)
	}
	return p
}

// TestXeroExportParts: however many journals a range holds, its Xero
// export comes in parts of at most XeroPartLines data lines, each with the
// header; the parts, in order, are the whole export, no journal split
// across two, each part but the last full (the next journal would not
// fit); there is no part past the last, and the other formats are one
// part.
func TestXeroExportParts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	start := time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)
	check := 0
	// A long day first, whatever rapid draws: a day of more than ten
	// parts.
	long := true
	rapid.Check(t, func(rt *rapid.T) {
		check++
		from := start.AddDate(0, 0, 64*check)
		days := rapid.IntRange(1, 40).Draw(rt, "days")
		n := rapid.IntRange(0, 300).Draw(rt, "transactions")
		if long {
			days, n, long = 1, 1600, false
		}
		var txs []ledger.Transaction
		accounts := ledger.Accounts()
		for i := range n {
			at := from.Add(time.Duration(rapid.IntRange(0, days*86400-1).Draw(rt, "at_s")) * time.Second)
			ref := fmt.Sprintf("parts%d:%d", check, i)
			minor := rapid.Int64Range(1, 100_000).Draw(rt, "minor")
			amount, _ := ledger.FromMinor(minor, "usd")
			if rapid.IntRange(0, 3).Draw(rt, "shape") > 0 {
				txs = append(txs, ledger.NewCapture(ref, "pi_"+ref, "evt", "usd", amount, at))
				continue
			}
			// An adjustment of 3 to 12 lines: journals of many sizes.
			tx := ledger.Transaction{Ref: ref, Kind: ledger.KindAdjustment, Currency: "usd", OccurredAt: at}
			total := decimal.Zero
			for range rapid.IntRange(2, 11).Draw(rt, "lines") {
				a, _ := ledger.FromMinor(rapid.Int64Range(1, 10_000).Draw(rt, "line_minor"), "usd")
				tx.Entries = append(tx.Entries, ledger.Debit(rapid.SampledFrom(accounts).Draw(rt, "account"), a))
				total = total.Add(a)
			}
			tx.Entries = append(tx.Entries, ledger.Credit(ledger.AccountProviderBalance, total))
			txs = append(txs, tx)
		}
		require.NoError(rt, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
			_, err := ledger.PostManyTx(b.ctx, tx, txs)
			return err
		}))

		settings := ledger.ExportSettings{XeroTaxRate: "Tax Exempt", BooksCurrency: "usd"}
		for _, g := range ledger.JournalGranularities {
			o := ledger.JournalOpts{From: from, To: from.AddDate(0, 0, days), Format: ledger.JournalXero, Granularity: g, Settings: settings}
			var whole strings.Builder
			sum, err := ledger.WriteJournal(b.ctx, b.pool, &whole, o)
			require.NoError(rt, err)
			all := readXeroPart(rt, whole.String())
			require.Equal(rt, sum.Lines, len(all.rows))
			require.GreaterOrEqual(rt, sum.Parts, 1)
			require.GreaterOrEqual(rt, sum.Parts*ledger.XeroPartLines, len(all.rows), "parts enough for every line")

			var (
				union = [][]string{}
				seen  []string
				parts []xeroPart
			)
			for part := 1; part <= sum.Parts; part++ {
				o.Part = part
				var buf strings.Builder
				ps, err := ledger.WriteJournal(b.ctx, b.pool, &buf, o)
				require.NoError(rt, err)
				require.Equal(rt, sum.Parts, ps.Parts, "every part says how many there are")
				p := readXeroPart(rt, buf.String())
				require.Equal(rt, all.header, p.header, "part %d has the header", part)
				require.LessOrEqual(rt, len(p.rows), ledger.XeroPartLines, "part %d of %d", part, sum.Parts)
				require.Equal(rt, ps.Lines, len(p.rows))
				if sum.Lines > 0 {
					require.NotEmpty(rt, p.rows, "part %d of %d is empty", part, sum.Parts)
				}
				for _, j := range p.journals {
					require.NotContains(rt, seen, j, "journal %s is split across parts", j)
				}
				seen = append(seen, p.journals...)
				union = append(union, p.rows...)
				parts = append(parts, p)
			}
			for i := 1; i < len(parts); i++ {
				require.Greater(rt, len(parts[i-1].rows)+parts[i].sizes[0], ledger.XeroPartLines,
					"part %d could have held the next journal", i)
			}
			require.Equal(rt, all.rows, union, "by %s, the parts in order are the whole export", g)

			o.Part = sum.Parts + 1
			var buf strings.Builder
			_, err = ledger.WriteJournal(b.ctx, b.pool, &buf, o)
			var pe *ledger.JournalPartError
			require.True(rt, errors.As(err, &pe), "%v", err)
			require.Equal(rt, ledger.JournalPartError{Part: sum.Parts + 1, Parts: sum.Parts}, *pe)
			require.Zero(rt, buf.Len(), "nothing written")
		}

		// QuickBooks has no such limit: one part.
		var buf strings.Builder
		o := ledger.JournalOpts{From: from, To: from.AddDate(0, 0, days), Format: ledger.JournalQuickBooks,
			Granularity: ledger.JournalByTransaction, Settings: settings, Part: 1}
		sum, err := ledger.WriteJournal(b.ctx, b.pool, &buf, o)
		require.NoError(rt, err)
		require.Equal(rt, 1, sum.Parts)
		require.Equal(rt, len(txs), sum.Journals, "part 1 is the whole export")
		o.Part = 2
		_, err = ledger.WriteJournal(b.ctx, b.pool, &buf, o)
		var pe *ledger.JournalPartError
		require.True(rt, errors.As(err, &pe), "%v", err)
	})
}

// TestClosedMonthExportAfterALateSettlement: February is closed with
// pi_2's capture in yen not yet settled into dollars (left out, counted).
// Stripe settles it after the close: February's exports in every format
// and part are the same bytes as before, with the same digests and the
// same count of movements left out, and the capture is exported with
// March, on the day its settlement is posted, converted at its rate.
func TestClosedMonthExportAfterALateSettlement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fixedLedger(t, b)
	closed, err := ledger.GetClosedPeriod(b.ctx, b.pool, feb)
	require.NoError(t, err)
	require.Equal(t, "usd", closed.Export.BooksCurrency, "the books currency is kept with the close")

	type export struct {
		format ledger.JournalFormat
		part   int
	}
	exports := []export{{ledger.JournalGeneric, 0}, {ledger.JournalQuickBooks, 0}, {ledger.JournalXero, 0}, {ledger.JournalXero, 1}}
	write := func(e export) (string, ledger.JournalSummary) {
		o := ledger.PeriodJournalOpts(closed, e.format)
		o.Part = e.part
		var buf strings.Builder
		sum, err := ledger.WriteJournal(b.ctx, b.pool, &buf, o)
		require.NoError(t, err)
		return buf.String(), sum
	}
	before := map[export]string{}
	digests := map[export]string{}
	for _, e := range exports {
		var sum ledger.JournalSummary
		before[e], sum = write(e)
		if e.format != ledger.JournalGeneric {
			require.Equal(t, 1, sum.Unconverted, "%v: pi_2's capture in yen is left out", e)
			require.NotContains(t, before[e], "5000")
		}
		digests[e], _, err = ledger.PeriodJournalDigest(b.ctx, b.pool, closed, e.format, e.part)
		require.NoError(t, err)
	}

	legs := ledger.NewSettlement(func(c string) string { return "stripe:fx:txn_late:" + c }, "pi_2", "evt_late",
		ledger.Money{Amount: d("5000"), Currency: "jpy"}, ledger.Money{Amount: d("33.50"), Currency: "usd"}, d("0.0067"),
		time.Date(2026, 2, 27, 3, 0, 0, 0, time.UTC))
	b.mustPost(t, legs[0])
	b.mustPost(t, legs[1])

	for _, e := range exports {
		after, sum := write(e)
		require.Equal(t, before[e], after, "%v: a closed month's export never changes", e)
		if e.format != ledger.JournalGeneric {
			require.Equal(t, 1, sum.Unconverted, "%v: it was not settled by February's end", e)
		}
		digest, _, err := ledger.PeriodJournalDigest(b.ctx, b.pool, closed, e.format, e.part)
		require.NoError(t, err)
		require.Equal(t, digests[e], digest)
		require.Equal(t, sha256Hex(after), digest, "%v", e)
	}

	march := ledger.JournalOpts{From: feb.End(), To: feb.End().AddDate(0, 1, 0), Format: ledger.JournalQuickBooks,
		Granularity: ledger.JournalByTransaction, Settings: closed.Export}
	got := exportString(t, b, march)
	require.Contains(t, got, "PG-T3,03/01/2026,1200,33.50,,capture stripe:capture:ch_2 payment pi_2 occurred 2026-02-26 · jpy 5000 at 0.0067\n")
	require.Contains(t, got, "PG-T3,03/01/2026,4000,,33.50,")
	march.Granularity = ledger.JournalByDay
	require.Contains(t, exportString(t, b, march), "PG-20260301-USD,03/01/2026,4000,,33.50,paygate usd 2026-03-01\n")
	var buf strings.Builder
	sum, err := ledger.WriteJournal(b.ctx, b.pool, &buf, march)
	require.NoError(t, err)
	require.Zero(t, sum.Unconverted, "March's movements are all settled")
}

// TestPeriodClosedWithoutBooksCurrency: a month closed before exports had
// a books currency keeps its Xero and QuickBooks exports as they were
// rendered at its close, one journal per day and currency, each in its
// own amounts, nothing left out.
func TestPeriodClosedWithoutBooksCurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fixedLedgerIn(t, b, "")
	closed, err := ledger.GetClosedPeriod(b.ctx, b.pool, feb)
	require.NoError(t, err)
	require.Empty(t, closed.Export.BooksCurrency)
	for _, format := range []ledger.JournalFormat{ledger.JournalXero, ledger.JournalQuickBooks} {
		var buf strings.Builder
		sum, err := ledger.WriteJournal(b.ctx, b.pool, &buf, ledger.PeriodJournalOpts(closed, format))
		require.NoError(t, err)
		require.Zero(t, sum.Unconverted)
		golden(t, "journal_"+string(format)+"_closed_without_books_currency.csv", buf.String())
		require.Contains(t, buf.String(), "PG-20260226-JPY")
	}
}

// TestJournalNeutralisesFormulas: an order reference a spreadsheet would
// read as a formula is written with a leading ' where it starts a cell
// (the generic export's reference column), and an account code too;
// amounts, Xero's negative credits among them, are as they are.
func TestJournalNeutralisesFormulas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.learnReference(t, "pi_x", `=HYPERLINK("http://evil.example","x")`)
	b.learnReference(t, "pi_y", "-1+1")
	at := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	b.mustPost(t, ledger.NewCapture("stripe:capture:ch_x", "pi_x", "evt_x", "usd", d("12.50"), at))
	b.mustPost(t, ledger.NewRefund("stripe:refund:re_y", "pi_y", "evt_y", "usd", d("3.00"), at.Add(time.Hour)))
	accounts, err := ledger.ParseGLAccounts("sales=@4000,refunds=4010")
	require.NoError(t, err)
	settings := ledger.ExportSettings{Accounts: accounts, XeroTaxRate: "+Tax", BooksCurrency: "usd"}
	o := ledger.JournalOpts{From: at.Truncate(24 * time.Hour), To: at.Truncate(24*time.Hour).AddDate(0, 0, 1),
		Granularity: ledger.JournalByTransaction, Settings: settings}

	o.Format = ledger.JournalGeneric
	rows, err := csv.NewReader(strings.NewReader(exportString(t, b, o))).ReadAll()
	require.NoError(t, err)
	require.Equal(t, `'=HYPERLINK("http://evil.example","x")`, rows[1][8])
	require.Equal(t, "'-1+1", rows[3][8])
	require.Equal(t, "'@4000", rows[2][3])
	require.Equal(t, "12.50", rows[2][6], "an amount as it is")

	o.Format = ledger.JournalXero
	rows, err = csv.NewReader(strings.NewReader(exportString(t, b, o))).ReadAll()
	require.NoError(t, err)
	require.Equal(t, []string{`PG-T1 capture stripe:capture:ch_x payment pi_x · order =HYPERLINK("http://evil.example","x")`, "04 May 2026",
		`sales · order =HYPERLINK("http://evil.example","x")`, "'@4000", "'+Tax", "-12.50"}, rows[2],
		"within a cell a formula is text already; Xero's credit stays negative")
	require.Equal(t, "-3.00", rows[4][5])
}
