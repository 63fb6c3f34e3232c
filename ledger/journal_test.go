package ledger_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/ledger"
)

var updateGolden = flag.Bool("update", false, "rewrite the journal export golden files in testdata/")

// fixedLedger posts the same ledger every time: three currencies, a
// capture in euros settled in dollars (a conversion's two legs), a capture
// in yen never settled, a payout, a fee, a day whose sales net to zero in
// one account, a refund that occurred in February, reported after
// February was closed (posted at March's first instant), and a partial
// refund in euros in March, settled at its own rate. Payments pi_1 and
// pi_4 carry the merchant's order references; the others have none.
// February is closed with dollars as the books currency.
func fixedLedger(t *testing.T, b *testBundle) ledger.ExportSettings {
	t.Helper()
	return fixedLedgerIn(t, b, "usd")
}

// fixedLedgerIn is fixedLedger with February closed with books (""
// as a close before exports had a books currency).
func fixedLedgerIn(t *testing.T, b *testBundle, books string) ledger.ExportSettings {
	t.Helper()
	b.learnReference(t, "pi_1", "ord-1042")
	b.learnReference(t, "pi_4", "ord 2001, gift")
	at := func(day, hour int) time.Time { return time.Date(2026, 2, day, hour, 0, 0, 0, time.UTC) }
	for _, txn := range []ledger.Transaction{
		ledger.NewCapture("stripe:capture:ch_1", "pi_1", "evt_1", "usd", d("120.00"), at(26, 9)),
		ledger.NewFee("stripe:fee:txn_1", "pi_1", "evt_1", "usd", d("3.78"), at(26, 9)),
		ledger.NewCapture("stripe:capture:ch_2", "pi_2", "evt_2", "jpy", d("5000"), at(26, 15)),
		ledger.NewCapture("stripe:capture:ch_3", "pi_3", "evt_3", "usd", d("40.00"), at(27, 8)),
		ledger.NewCaptureReversal("stripe:capture:ch_3:reversal", "pi_3", "evt_4", "usd", d("40.00"), at(27, 20)),
		ledger.NewPayout("stripe:payout:po_1", "evt_5", "usd", d("100.00"), at(28, 23)),
	} {
		b.mustPost(t, txn)
	}
	legs := ledger.NewSettlement(func(c string) string { return "stripe:fx:txn_9:" + c }, "pi_4", "evt_6",
		ledger.Money{Amount: d("10.00"), Currency: "eur"}, ledger.Money{Amount: d("10.85"), Currency: "usd"}, d("1.085"), at(27, 12))
	b.mustPost(t, ledger.NewCapture("stripe:capture:ch_4", "pi_4", "evt_6", "eur", d("10.00"), at(27, 12)))
	b.mustPost(t, legs[0])
	b.mustPost(t, legs[1])

	settings := ledger.ExportSettings{XeroTaxRate: "Tax Exempt", BooksCurrency: books}
	var err error
	settings.Accounts, err = ledger.ParseGLAccounts("sales=4000, refunds=4010,provider_balance=1200,fees=6100,fx_clearing=Clearing:FX")
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := ledger.ClosePeriodTx(b.ctx, tx, feb, "finance:test", settings, time.Now())
		return err
	}))
	b.mustPost(t, ledger.NewRefund("stripe:refund:re_1", "pi_1", "evt_7", "usd", d("20.00"), at(27, 10)))
	b.mustPost(t, ledger.NewCapture("stripe:capture:ch_5", "pi_5", "evt_8", "usd", d("7.00"), time.Date(2026, 3, 2, 6, 0, 0, 0, time.UTC)))
	// pi_4's partial refund, settled at its own rate, not its capture's.
	b.mustPost(t, ledger.NewRefund("stripe:refund:re_4", "pi_4", "evt_10", "eur", d("4.00"), time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)))
	for _, leg := range ledger.NewSettlement(func(c string) string { return "stripe:fx:txn_10:" + c }, "pi_4", "evt_10",
		ledger.Money{Amount: d("-4.00"), Currency: "eur"}, ledger.Money{Amount: d("-4.36"), Currency: "usd"}, d("1.09"),
		time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)) {
		b.mustPost(t, leg)
	}
	return settings
}

// learnReference gives payment id (created when new) the merchant's order
// reference, as applying an event that carries it does.
func (b *testBundle) learnReference(t *testing.T, id, reference string) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		p, err := ledger.LockPaymentTx(b.ctx, tx, "stripe", id)
		if err != nil {
			return err
		}
		p.Details.Reference = reference
		return ledger.SavePaymentTx(b.ctx, tx, p, p.State, "evt_reference_"+id)
	}))
}

// tb is what the export helpers need of a test: a *testing.T, or a
// *rapid.T in a property.
type tb interface {
	require.TestingT
	Helper()
}

func exportString(t tb, b *testBundle, o ledger.JournalOpts) string {
	t.Helper()
	var buf bytes.Buffer
	_, err := ledger.WriteJournal(b.ctx, b.pool, &buf, o)
	require.NoError(t, err)
	return buf.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *updateGolden {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./ledger -run Journal -update to write it")
	require.Equal(t, string(want), got, "%s differs (go test ./ledger -run Journal -update rewrites it)", path)
}

// parsedLine is one exported line, read back whatever the format.
type parsedLine struct {
	journal, date, account string
	debit, credit          decimal.Decimal
	description            string // Xero's and QuickBooks' Description, the generic description
	reference              string // the generic export's by transaction
}

// parseJournal reads an export back, checks its header, and returns its
// lines with each journal's key (what groups lines into a journal in the
// format: Narration and Date for Xero, Journal No for QuickBooks).
func parseJournal(t tb, format ledger.JournalFormat, g ledger.JournalGranularity, text string) []parsedLine {
	t.Helper()
	records, err := csv.NewReader(strings.NewReader(text)).ReadAll()
	require.NoError(t, err)
	require.NotEmpty(t, records)
	header := map[ledger.JournalFormat][]string{
		ledger.JournalGeneric:    {"date", "journal", "account", "account_code", "currency", "debit", "credit", "description"},
		ledger.JournalXero:       {"Narration", "Date", "Description", "AccountCode", "TaxRate", "Amount"},
		ledger.JournalQuickBooks: {"Journal No", "Journal Date", "Account Name", "Debits", "Credits", "Description"},
	}[format]
	if format == ledger.JournalGeneric && g == ledger.JournalByTransaction {
		header = append(header, "reference")
	}
	require.Equal(t, header, records[0])
	amount := func(s string) decimal.Decimal {
		if s == "" {
			return decimal.Zero
		}
		v, err := decimal.NewFromString(s)
		require.NoError(t, err, s)
		return v
	}
	var out []parsedLine
	for _, r := range records[1:] {
		var l parsedLine
		switch format {
		case ledger.JournalXero:
			_, err := time.Parse("02 Jan 2006", r[1])
			require.NoError(t, err, "Xero reads dd mmm yyyy: %q", r[1])
			require.NotEmpty(t, r[4], "TaxRate is mandatory")
			a := amount(r[5])
			require.False(t, a.IsZero())
			l = parsedLine{journal: r[0] + "|" + r[1], date: r[1], account: r[3], description: r[2]}
			if a.IsPositive() {
				l.debit = a
			} else {
				l.credit = a.Neg()
			}
		case ledger.JournalQuickBooks:
			_, err := time.Parse("01/02/2006", r[1])
			require.NoError(t, err, "MM/DD/YYYY: %q", r[1])
			require.LessOrEqual(t, len(r[0]), 21, "QuickBooks' journal numbers hold 21 characters")
			l = parsedLine{journal: r[0], date: r[1], account: r[2], debit: amount(r[3]), credit: amount(r[4]), description: r[5]}
		default:
			_, err := time.Parse(time.DateOnly, r[0])
			require.NoError(t, err)
			l = parsedLine{journal: r[1], date: r[0], account: r[3], debit: amount(r[5]), credit: amount(r[6]), description: r[7]}
			if g == ledger.JournalByTransaction {
				l.reference = r[8]
			}
		}
		require.True(t, l.debit.IsZero() != l.credit.IsZero(), "one side per line: %v", r)
		out = append(out, l)
	}
	return out
}

// requireBalancedJournals checks that every journal's debits equal its
// credits and that a journal's lines are contiguous and share one date.
func requireBalancedJournals(t tb, lines []parsedLine) int {
	t.Helper()
	type total struct {
		date          string
		debit, credit decimal.Decimal
	}
	totals := map[string]*total{}
	var order []string
	for i, l := range lines {
		tt, ok := totals[l.journal]
		if !ok {
			tt = &total{date: l.date}
			totals[l.journal] = tt
			order = append(order, l.journal)
		} else {
			require.Equal(t, l.journal, lines[i-1].journal, "journal %s is split", l.journal)
		}
		require.Equal(t, tt.date, l.date, "journal %s spans dates", l.journal)
		tt.debit, tt.credit = tt.debit.Add(l.debit), tt.credit.Add(l.credit)
	}
	for _, j := range order {
		require.True(t, totals[j].debit.Equal(totals[j].credit), "journal %s: debits %s, credits %s", j, totals[j].debit, totals[j].credit)
	}
	return len(order)
}

// TestJournalExportFormats: each format of a fixed ledger, per day and per
// transaction, equals its golden file, reads back as CSV with the format's
// header, and every journal in it balances.
func TestJournalExportFormats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	settings := fixedLedger(t, b)
	from, to := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)
	for _, format := range ledger.JournalFormats {
		for _, g := range ledger.JournalGranularities {
			o := ledger.JournalOpts{From: from, To: to, Format: format, Granularity: g, Settings: settings}
			got := exportString(t, b, o)
			golden(t, "journal_"+string(format)+"_"+string(g)+".csv", got)
			journals := requireBalancedJournals(t, parseJournal(t, format, g, got))
			require.Positive(t, journals)
			if g == ledger.JournalByTransaction && format == ledger.JournalGeneric {
				require.Equal(t, 14, journals, "one journal per transaction")
			}
			if g == ledger.JournalByTransaction && format != ledger.JournalGeneric {
				require.Equal(t, 9, journals, "one journal per transaction but the 4 legs of conversions and the capture in yen, not settled into dollars")
			}
		}
	}

	// One currency, and a range of one day.
	got := exportString(t, b, ledger.JournalOpts{From: from, To: to, Format: ledger.JournalGeneric,
		Granularity: ledger.JournalByDay, Currency: "jpy", Settings: settings})
	require.Equal(t, "date,journal,account,account_code,currency,debit,credit,description\n"+
		"2026-02-26,PG-20260226-JPY,provider_balance,1200,jpy,5000,,paygate jpy 2026-02-26\n"+
		"2026-02-26,PG-20260226-JPY,sales,4000,jpy,,5000,paygate jpy 2026-02-26\n", got)
	got = exportString(t, b, ledger.JournalOpts{From: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC),
		Format: ledger.JournalGeneric, Granularity: ledger.JournalByTransaction, Settings: settings})
	require.Contains(t, got, "refund stripe:refund:re_1 payment pi_1 occurred 2026-02-27", "a late movement says when the money moved")
	require.NotContains(t, got, "ch_5")
}

// TestJournalNamesTheOrder: by transaction, the generic export's
// reference column holds the order reference of each transaction's payment
// (empty for a payment without one and for a movement of no payment), and
// Xero's and QuickBooks' descriptions name the order; by day, where a
// journal sums many payments, nothing is named.
func TestJournalNamesTheOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	settings := fixedLedger(t, b)
	from, to := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)
	byJournal := func(format ledger.JournalFormat, g ledger.JournalGranularity) map[string][]parsedLine {
		t.Helper()
		out := map[string][]parsedLine{}
		text := exportString(t, b, ledger.JournalOpts{From: from, To: to, Format: format, Granularity: g, Settings: settings})
		for _, l := range parseJournal(t, format, g, text) {
			id, _, _ := strings.Cut(l.journal, " ") // Xero's key is its Narration
			out[id] = append(out[id], l)
		}
		return out
	}
	// PG-T1 is pi_1's capture, PG-T10 its refund posted in March; PG-T7
	// pi_4's capture, PG-T4 pi_3's (no reference); PG-T6 a payout.
	want := map[string]string{"PG-T1": "ord-1042", "PG-T10": "ord-1042", "PG-T7": "ord 2001, gift", "PG-T4": "", "PG-T6": ""}

	generic := byJournal(ledger.JournalGeneric, ledger.JournalByTransaction)
	for id, ref := range want {
		require.NotEmpty(t, generic[id], id)
		for _, l := range generic[id] {
			require.Equal(t, ref, l.reference, "%s: the reference column", id)
			require.NotContains(t, l.description, "order", "%s: the generic description stays as it was", id)
		}
	}
	for _, format := range []ledger.JournalFormat{ledger.JournalXero, ledger.JournalQuickBooks} {
		journals := byJournal(format, ledger.JournalByTransaction)
		for id, ref := range want {
			require.NotEmpty(t, journals[id], "%s %s", format, id)
			for _, l := range journals[id] {
				if ref == "" {
					require.NotContains(t, l.description, "order", "%s %s", format, id)
					require.NotContains(t, l.journal, "order", "%s %s", format, id)
					continue
				}
				require.True(t, strings.HasSuffix(l.description, " · order "+ref), "%s %s: %q", format, id, l.description)
			}
		}
	}
	qb := byJournal(ledger.JournalQuickBooks, ledger.JournalByTransaction)["PG-T1"]
	require.Equal(t, "capture stripe:capture:ch_1 payment pi_1 · order ord-1042", qb[0].description)
	xero := byJournal(ledger.JournalXero, ledger.JournalByTransaction)["PG-T1"]
	require.Equal(t, "PG-T1 capture stripe:capture:ch_1 payment pi_1 · order ord-1042|26 Feb 2026", xero[0].journal,
		"Xero's Narration, the journal's description, names it too")
	require.Equal(t, "provider_balance · order ord-1042", xero[0].description)

	for _, format := range ledger.JournalFormats {
		text := exportString(t, b, ledger.JournalOpts{From: from, To: to, Format: format, Granularity: ledger.JournalByDay, Settings: settings})
		require.NotContains(t, text, "ord-1042", "%s by day names no order", format)
		require.NotContains(t, text, "ord 2001", "%s by day names no order", format)
		require.NotContains(t, text, "reference", "%s by day has no reference column", format)
	}
}

// TestClosedPeriodExportIsFrozen: a closed month's export is rendered with
// the settings stored at its close, so it is the same bytes after more
// postings (moved out of the month) and whatever the settings become; its
// digest is kept and matches the bytes.
func TestClosedPeriodExportIsFrozen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fixedLedger(t, b)
	closed, err := ledger.GetClosedPeriod(b.ctx, b.pool, feb)
	require.NoError(t, err)
	require.Equal(t, "4000", closed.Export.Accounts.Code(ledger.AccountSales))

	for _, format := range ledger.JournalFormats {
		first := exportString(t, b, ledger.PeriodJournalOpts(closed, format))
		require.Contains(t, first, ",4000,", "%s: rendered with the account codes stored at the close", format)
		digest, size, err := ledger.PeriodJournalDigest(b.ctx, b.pool, closed, format, 0)
		require.NoError(t, err)
		require.Equal(t, int64(len(first)), size)
		require.Equal(t, sha256Hex(first), digest)

		b.mustPost(t, ledger.NewFee("stripe:fee:late_"+string(format), "pi_1", "evt_9", "usd", d("1.00"),
			time.Date(2026, 2, 14, 0, 0, 0, 0, time.UTC)))
		again := exportString(t, b, ledger.PeriodJournalOpts(closed, format))
		require.Equal(t, first, again, "%s: a closed month's export never changes", format)
		digest2, _, err := ledger.PeriodJournalDigest(b.ctx, b.pool, closed, format, 0)
		require.NoError(t, err)
		require.Equal(t, digest, digest2)
	}
	require.Equal(t, 3, b.count(t, "ledger_period_exports"))
}

// TestClosedPeriodExportIgnoresReferencesLearntLater: after a month is
// closed, a payment of it learns its order reference and another's is
// replaced; the closed month's export in every format is the same bytes as
// before and matches the digest kept before, while an export by
// transaction of the same days, which is of the ledger as it stands, names
// the new references.
func TestClosedPeriodExportIgnoresReferencesLearntLater(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fixedLedger(t, b)
	closed, err := ledger.GetClosedPeriod(b.ctx, b.pool, feb)
	require.NoError(t, err)
	before := map[ledger.JournalFormat]string{}
	digests := map[ledger.JournalFormat]string{}
	for _, format := range ledger.JournalFormats {
		before[format] = exportString(t, b, ledger.PeriodJournalOpts(closed, format))
		digests[format], _, err = ledger.PeriodJournalDigest(b.ctx, b.pool, closed, format, 0)
		require.NoError(t, err)
	}

	b.learnReference(t, "pi_3", "ord-late")
	b.learnReference(t, "pi_1", "ord-1042-b")

	for _, format := range ledger.JournalFormats {
		after := exportString(t, b, ledger.PeriodJournalOpts(closed, format))
		require.Equal(t, before[format], after, "%s: a closed month's export never changes", format)
		digest, size, err := ledger.PeriodJournalDigest(b.ctx, b.pool, closed, format, 0)
		require.NoError(t, err)
		require.Equal(t, digests[format], digest)
		require.Equal(t, sha256Hex(after), digest, "%s: the bytes still match the digest kept before", format)
		require.Equal(t, int64(len(after)), size)
	}
	current := exportString(t, b, ledger.JournalOpts{From: feb.Start, To: feb.End(), Format: ledger.JournalGeneric,
		Granularity: ledger.JournalByTransaction, Settings: closed.Export})
	require.Contains(t, current, "capture stripe:capture:ch_3 payment pi_3,ord-late\n")
	require.Contains(t, current, "capture stripe:capture:ch_1 payment pi_1,ord-1042-b\n")
}

func TestWriteJournalStreams(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var batch []ledger.Transaction
	for i := range 3000 {
		batch = append(batch, ledger.NewCapture("capture:"+strings.Repeat("x", 40)+strconv.Itoa(i), "pi", "evt", "usd", d("1.00"),
			time.Date(2026, 2, 1+i%28, 0, 0, i, 0, time.UTC)))
	}
	require.NoError(t, pgx.BeginFunc(b.ctx, b.pool, func(tx pgx.Tx) error {
		_, err := ledger.PostManyTx(b.ctx, tx, batch)
		return err
	}))
	w := &chunkRecorder{}
	sum, err := ledger.WriteJournal(b.ctx, b.pool, w, ledger.JournalOpts{From: feb.Start, To: feb.End(),
		Format: ledger.JournalGeneric, Granularity: ledger.JournalByTransaction})
	require.NoError(t, err)
	require.Equal(t, 3000, sum.Journals)
	require.Equal(t, 6000, sum.Lines)
	require.Greater(t, w.total, 500_000)
	require.Greater(t, w.writes, 100, "written as it is read, in many small writes")
	require.LessOrEqual(t, w.largest, 8192, "no write holds more than a buffer's worth")
}

func TestWriteJournalRefusesBadOptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var buf bytes.Buffer
	_, err := ledger.WriteJournal(b.ctx, b.pool, &buf, ledger.JournalOpts{From: feb.End(), To: feb.Start,
		Format: ledger.JournalGeneric, Granularity: ledger.JournalByDay})
	require.ErrorIs(t, err, ledger.ErrInvalidPeriod)
	_, err = ledger.WriteJournal(b.ctx, b.pool, &buf, ledger.JournalOpts{From: feb.Start, To: feb.End(),
		Format: "sage", Granularity: ledger.JournalByDay})
	require.Error(t, err)
	require.Zero(t, buf.Len())
}

func TestParseGLAccounts(t *testing.T) {
	t.Parallel()
	g, err := ledger.ParseGLAccounts(" sales = 4000 ,refunds=4010, fx_clearing=Clearing:FX")
	require.NoError(t, err)
	require.Equal(t, ledger.GLAccounts{ledger.AccountSales: "4000", ledger.AccountRefunds: "4010", ledger.AccountFXClearing: "Clearing:FX"}, g)
	require.Equal(t, "4000", g.Code(ledger.AccountSales))
	require.Equal(t, "bank", g.Code(ledger.AccountBank), "an account without a code exports its name")
	g, err = ledger.ParseGLAccounts("")
	require.NoError(t, err)
	require.Empty(t, g)
	for in, want := range map[string]string{
		"sales":                            `entry 1 ("sales") is not account=code`,
		"sales=4000,":                      `entry 2 ("") is not account=code`,
		"cash=1000":                        `"cash" is not an account of the chart`,
		"sales=4000,sales=4001":            "sales is given twice",
		"sales=":                           "the code of sales is empty",
		"sales=40\x0700":                   "control character",
		"fees=" + strings.Repeat("9", 101): "longer than 100 characters",
	} {
		_, err := ledger.ParseGLAccounts(in)
		require.ErrorIs(t, err, ledger.ErrInvalidGLAccounts, in)
		require.ErrorContains(t, err, want, in)
	}
}

type chunkRecorder struct{ writes, largest, total int }

func (c *chunkRecorder) Write(p []byte) (int, error) {
	c.writes++
	c.largest = max(c.largest, len(p))
	c.total += len(p)
	return len(p), nil
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
