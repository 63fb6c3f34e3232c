package reconcile

import (
	"context"
	"encoding/csv"
	"io"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/internal/csvtext"
	"github.com/paygate/paygate/ledger"
)

// Report is what a completed run found, besides its items. It is stored
// with the run as JSON, in this shape.
type Report struct {
	// Summary maps every item status to its count (all present).
	Summary map[Status]int `json:"summary"`
	// Counts are the run's sizes.
	Counts Counts `json:"counts"`
	// Currencies holds, per currency and reporting category, the provider's
	// gross, fee and net against the ledger's.
	Currencies []CurrencyTotals `json:"currencies"`
	// Payouts lists the day's payouts with the transactions they settled.
	Payouts []PayoutSettlement `json:"payouts"`
	// Recovery is what the missed-event recovery did.
	Recovery Recovery `json:"recovery"`
	// TimingDifferences are ledger transactions of the day that the
	// provider booked on another day.
	TimingDifferences []TimingDifference `json:"timing_differences"`
	// Statement is the file a settlement batch's run read; nil for a day's
	// run, whose statement is the provider's API.
	Statement *StatementFile `json:"statement,omitempty"`
}

// Counts are a run's sizes.
type Counts struct {
	ProviderTransactions int `json:"provider_transactions"`
	LedgerTransactions   int `json:"ledger_transactions"`
	Items                int `json:"items"`
	RecoveredEvents      int `json:"recovered_events"`
}

// CurrencyTotals is one currency's section of the report.
type CurrencyTotals struct {
	Currency   string          `json:"currency"`
	Categories []CategoryTotal `json:"categories"`
	Total      CategoryTotal   `json:"total"`
}

// CategoryTotal compares one reporting category (or a currency's total) in
// decimal strings at the currency's scale, signed as the provider signs:
// gross is the movements, fee the fees charged (positive), net = gross −
// fee. The ledger side sums the ledger transactions the provider's records
// matched plus those missing at the provider; lines whose currency differs
// are left out of the ledger side. Difference is provider net − ledger net.
type CategoryTotal struct {
	ReportingCategory string `json:"reporting_category"`
	ProviderGross     string `json:"provider_gross"`
	ProviderFee       string `json:"provider_fee"`
	ProviderNet       string `json:"provider_net"`
	LedgerGross       string `json:"ledger_gross"`
	LedgerFee         string `json:"ledger_fee"`
	LedgerNet         string `json:"ledger_net"`
	Difference        string `json:"difference"`
}

// PayoutSettlement is one payout of the day and what it settled, from the
// provider's balance transactions filtered by payout; or one payout of a
// settlement batch and the batch's records in its currency.
type PayoutSettlement struct {
	PayoutID      string `json:"payout_id"`
	ProviderTxnID string `json:"provider_txn_id"`
	Currency      string `json:"currency"`
	Amount        string `json:"amount"` // paid out, positive
	// SettledCount and SettledNet cover the transactions the payout paid
	// out, its own excluded; Difference is SettledNet − Amount (zero when
	// the payout is exactly the sum of what it settled).
	SettledCount int          `json:"settled_count"`
	SettledNet   string       `json:"settled_net"`
	Difference   string       `json:"difference"`
	SettledDays  []SettledDay `json:"settled_days"`
	// Error is set when the provider could not list what the payout
	// settled (manual payouts cannot be filtered by).
	Error string `json:"error,omitempty"`
}

// SettledDay is the part of a payout that settled one UTC day's
// transactions.
type SettledDay struct {
	Date  string `json:"date"`
	Count int    `json:"count"`
	Net   string `json:"net"`
}

// Recovery is what the missed-event recovery found and did.
type Recovery struct {
	// Listed is how many events the provider listed for the day.
	Listed int `json:"listed"`
	// Recovered is how many of them the inbox lacked and that were
	// ingested by this run.
	Recovered int `json:"recovered"`
	// Settled is how many recovered events left the inbox's received
	// status (processed, ignored, or poison for ops) before matching began;
	// Pending how many were still waiting when the wait ran out (their
	// movements may show as missing_in_ledger here and match in a re-run).
	Settled  int      `json:"settled"`
	Pending  int      `json:"pending"`
	EventIDs []string `json:"event_ids"`
}

type totals struct {
	pGross, pFee, lGross, lFee decimal.Decimal
}

func (t *totals) add(o totals) {
	t.pGross, t.pFee = t.pGross.Add(o.pGross), t.pFee.Add(o.pFee)
	t.lGross, t.lFee = t.lGross.Add(o.lGross), t.lFee.Add(o.lFee)
}

func (t totals) view(category, currency string) CategoryTotal {
	pNet, lNet := t.pGross.Sub(t.pFee), t.lGross.Sub(t.lFee)
	f := func(d decimal.Decimal) string { return ledger.Format(d, currency) }
	return CategoryTotal{
		ReportingCategory: category,
		ProviderGross:     f(t.pGross), ProviderFee: f(t.pFee), ProviderNet: f(pNet),
		LedgerGross: f(t.lGross), LedgerFee: f(t.lFee), LedgerNet: f(lNet),
		Difference: f(pNet.Sub(lNet)),
	}
}

func deref(d *decimal.Decimal) decimal.Decimal {
	if d == nil {
		return decimal.Zero
	}
	return *d
}

// Summarize counts items per status (every status present) and totals them
// per currency and reporting category. It is pure.
func Summarize(items []Item) (map[Status]int, []CurrencyTotals) {
	summary := make(map[Status]int, len(Statuses))
	for _, s := range Statuses {
		summary[s] = 0
	}
	byCur := map[string]map[string]*totals{}
	for _, it := range items {
		summary[it.Status]++
		cats := byCur[it.Currency]
		if cats == nil {
			cats = map[string]*totals{}
			byCur[it.Currency] = cats
		}
		t := cats[it.ReportingCategory]
		if t == nil {
			t = &totals{}
			cats[it.ReportingCategory] = t
		}
		ledgerSide := it.LedgerAmount != nil && it.Status != StatusCurrencyMismatch
		if it.Type == TypeFee {
			// A fee line: the provider's fee is already in its record's
			// provider_fee; the ledger's fee transaction is money out.
			if ledgerSide {
				t.lFee = t.lFee.Sub(*it.LedgerAmount)
			}
			continue
		}
		t.pGross = t.pGross.Add(deref(it.ProviderAmount))
		t.pFee = t.pFee.Add(deref(it.ProviderFee))
		if ledgerSide {
			t.lGross = t.lGross.Add(*it.LedgerAmount)
		}
	}
	currencies := make([]string, 0, len(byCur))
	for c := range byCur {
		currencies = append(currencies, c)
	}
	sort.Strings(currencies)
	out := make([]CurrencyTotals, 0, len(currencies))
	for _, c := range currencies {
		cats := make([]string, 0, len(byCur[c]))
		for k := range byCur[c] {
			cats = append(cats, k)
		}
		sort.Strings(cats)
		ct := CurrencyTotals{Currency: c, Categories: make([]CategoryTotal, 0, len(cats))}
		var sum totals
		for _, k := range cats {
			ct.Categories = append(ct.Categories, byCur[c][k].view(k, c))
			sum.add(*byCur[c][k])
		}
		ct.Total = sum.view("total", c)
		out = append(out, ct)
	}
	return summary, out
}

// CSVHeader is the items CSV's header row: the item fields, in this order.
// Columns are only ever added at the end, so that a reader by position
// keeps reading the same ones.
var CSVHeader = []string{
	"status", "provider_txn_id", "source_id", "ref", "type", "currency",
	"provider_amount", "provider_fee", "ledger_amount",
	"presentment_currency", "presentment_amount", "exchange_rate",
	"id", "run_id", "payment_id", "resolution", "note", "resolved_by", "resolved_at", "adjustment_ref",
	"reference",
}

// FormatAmount renders an item amount at its currency's scale; "" when
// absent.
func FormatAmount(d *decimal.Decimal, currency string) string {
	if d == nil {
		return ""
	}
	return ledger.Format(*d, currency)
}

// Record is an item as the CSV's columns (CSVHeader), absent values empty.
func (it Item) Record() []string {
	ledgerCur := it.LedgerCurrency
	if ledgerCur == "" {
		ledgerCur = it.Currency
	}
	rec := []string{
		string(it.Status), it.ProviderTxnID, it.SourceID, it.Ref, it.Type, it.Currency,
		FormatAmount(it.ProviderAmount, it.Currency), FormatAmount(it.ProviderFee, it.Currency),
		FormatAmount(it.LedgerAmount, ledgerCur),
		it.PresentmentCurrency, FormatAmount(it.PresentmentAmount, it.PresentmentCurrency), rateText(it.ExchangeRate),
		idText(it.ID), idText(it.RunID), it.PaymentID, "", "", "", "", "",
		it.Reference,
	}
	if r := it.Resolution; r != nil {
		copy(rec[15:], []string{string(r.Kind), r.Note, r.ResolvedBy, r.ResolvedAt.UTC().Format(time.RFC3339Nano), r.AdjustmentRef})
	}
	return rec
}

// csvAmounts are the columns of CSVHeader holding numbers, written as
// they are: a negative amount is a number, not a formula.
var csvAmounts = []string{"provider_amount", "provider_fee", "ledger_amount", "presentment_amount", "exchange_rate"}

// csvRecord is it as a row of the CSV: Record, each text cell made safe
// for a spreadsheet (csvtext.Cell). References and notes are anyone's
// words, and finance opens the file in one.
func csvRecord(it Item) []string {
	rec := it.Record()
	for i, cell := range rec {
		if !slices.Contains(csvAmounts, CSVHeader[i]) {
			rec[i] = csvtext.Cell(cell)
		}
	}
	return rec
}

func idText(id int64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
}

func rateText(d *decimal.Decimal) string {
	if d == nil {
		return ""
	}
	return d.String()
}

// WriteRunCSV writes a run's items as WriteCSV does, reading and writing
// them a page at a time (EachItem) and flushing after each page, so that a
// run of any size streams in bounded memory. The header is written first,
// whatever follows; an error after it leaves the output incomplete.
func WriteRunCSV(ctx context.Context, q Querier, w io.Writer, runID int64) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	n := 0
	err := EachItem(ctx, q, runID, func(it Item) error {
		if err := cw.Write(csvRecord(it)); err != nil {
			return err
		}
		if n++; n%MaxLimit == 0 {
			cw.Flush()
			return cw.Error()
		}
		return nil
	})
	if err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

// WriteCSV writes the header row and one row per item (RFC 4180).
func WriteCSV(w io.Writer, items []Item) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, it := range items {
		if err := cw.Write(csvRecord(it)); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
