package adyen

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
)

// Adyen writes a settlement details report whenever a batch of the
// merchant account closes and pays out: one row per movement of the
// balance in the batch (a capture settled, a refund, a chargeback…), each
// with its fees, the batch's own fees, and one MerchantPayout row per
// currency paid out. Its columns are read by header name: Adyen adds
// columns and has reordered them. Amounts are written in major units,
// with as many decimals as the currency has at Adyen.

// ErrInvalidReport: a settlement report paygate cannot read (a required
// column missing, an amount or date that is not one, a row of another
// batch). The error names the column and the line, never a value.
var ErrInvalidReport = errors.New("invalid settlement report")

// The settlement details report's row types paygate maps; every other
// type is listed by reconciliation as missing_in_ledger (see Settlements).
const (
	RowSettled            = "Settled"
	RowRefunded           = "Refunded"
	RowRefundedReversed   = "RefundedReversed"
	RowChargeback         = "Chargeback"
	RowSecondChargeback   = "SecondChargeback"
	RowChargebackReversed = "ChargebackReversed"
	RowFee                = "Fee"
	RowMerchantPayout     = "MerchantPayout"
)

// The columns paygate reads, by their header name.
const (
	colPspReference  = "Psp Reference"
	colCreationDate  = "Creation Date"
	colTimeZone      = "TimeZone"
	colType          = "Type"
	colModification  = "Modification Reference"
	colGrossCurrency = "Gross Currency"
	colGrossDebit    = "Gross Debit (GC)"
	colGrossCredit   = "Gross Credit (GC)"
	colExchangeRate  = "Exchange Rate"
	colNetCurrency   = "Net Currency"
	colNetDebit      = "Net Debit (NC)"
	colNetCredit     = "Net Credit (NC)"
	colCommission    = "Commission (NC)"
	colMarkup        = "Markup (NC)"
	colSchemeFees    = "Scheme Fees (NC)"
	colInterchange   = "Interchange (NC)"
	colBatchNumber   = "Batch Number"
	colMerchant      = "Merchant Account"
)

// requiredColumns must all be in the header; the file is refused without
// one of them rather than read with a column silently zero.
var requiredColumns = []string{
	colPspReference, colCreationDate, colTimeZone, colType, colModification,
	colGrossCurrency, colGrossDebit, colGrossCredit, colExchangeRate,
	colNetCurrency, colNetDebit, colNetCredit,
	colCommission, colMarkup, colSchemeFees, colInterchange, colBatchNumber,
}

// SettlementRow is one row of a settlement details report. Amounts are in
// major units as Adyen wrote them (an empty cell is zero); currencies are
// lowercase, as the ledger spells them.
type SettlementRow struct {
	Line                  int // the row's line in the file, the header being line 1
	MerchantAccount       string
	PspReference          string
	ModificationReference string
	Type                  string
	Created               time.Time
	GrossCurrency         string
	GrossDebit            decimal.Decimal
	GrossCredit           decimal.Decimal
	ExchangeRate          decimal.NullDecimal
	NetCurrency           string
	NetDebit              decimal.Decimal
	NetCredit             decimal.Decimal
	Commission            decimal.Decimal
	Markup                decimal.Decimal
	SchemeFees            decimal.Decimal
	Interchange           decimal.Decimal
	Batch                 int64 // zero when the cell is empty
}

// Net is what the row moved into the balance (negative: out of it), fees
// deducted, in its net currency.
func (r SettlementRow) Net() decimal.Decimal { return r.NetCredit.Sub(r.NetDebit) }

// Fees is what Adyen charged on the row: commission, markup, scheme fees
// and interchange, in its net currency (negative when refunded).
func (r SettlementRow) Fees() decimal.Decimal {
	return r.Commission.Add(r.Markup).Add(r.SchemeFees).Add(r.Interchange)
}

var settlementReportName = regexp.MustCompile(`^settlement_detail_report_batch_([1-9][0-9]{0,17})\.csv$`)

// SettlementReportBatch returns the batch of a settlement details report's
// file name (settlement_detail_report_batch_<n>.csv); ok is false for any
// other file.
func SettlementReportBatch(fileName string) (batch int64, ok bool) {
	m := settlementReportName.FindStringSubmatch(fileName)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	return n, err == nil
}

// maxReportURL bounds a report's URL, as endpoint URLs are bounded.
const maxReportURL = 2048

// checkReportURL checks what a REPORT_AVAILABLE item's reason must be to
// name the file it announces: an absolute http(s) URL without
// credentials whose last path segment is the file name. Whether its host
// may be fetched is the downloader's to decide (ReportClient).
func checkReportURL(raw, fileName string) error {
	if raw == "" {
		return errors.New("reason holds no download URL")
	}
	if len(raw) > maxReportURL {
		return fmt.Errorf("the download URL is longer than %d characters", maxReportURL)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "":
		return errors.New("reason is not an absolute download URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return errors.New("the download URL is not http(s)")
	case u.User != nil:
		return errors.New("the download URL holds credentials")
	case path.Base(u.Path) != fileName:
		return errors.New("the download URL does not name the announced file")
	}
	return nil
}

// ParseSettlementReport reads a settlement details report by its header's
// column names, whatever their order and whatever other columns it has.
// Rows are returned in the file's order.
//
// It fails with an error wrapping ErrInvalidReport for a file without one
// of the columns paygate reads, a row whose amount, exchange rate, batch
// number or creation date cannot be read, an amount with more decimals than
// Adyen writes for its currency, or a currency the ledger does not know.
func ParseSettlementReport(file []byte) ([]SettlementRow, error) {
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(file, []byte("\xef\xbb\xbf"))))
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: the file is empty", ErrInvalidReport)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrInvalidReport, err)
	}
	index := map[string]int{}
	for i, name := range header {
		name = strings.TrimSpace(name)
		if _, dup := index[name]; !dup {
			index[name] = i
		}
	}
	for _, name := range requiredColumns {
		if _, ok := index[name]; !ok {
			return nil, fmt.Errorf("%w: the header has no %q column", ErrInvalidReport, name)
		}
	}
	var rows []SettlementRow
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidReport, err)
		}
		line, _ := r.FieldPos(0)
		row, err := parseRow(rec, index, line)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrInvalidReport, line, err)
		}
		rows = append(rows, row)
	}
}

func parseRow(rec []string, index map[string]int, line int) (SettlementRow, error) {
	cell := func(name string) string {
		i, ok := index[name]
		if !ok || i >= len(rec) {
			return ""
		}
		return strings.TrimSpace(rec[i])
	}
	row := SettlementRow{
		Line: line, MerchantAccount: cell(colMerchant), PspReference: cell(colPspReference),
		ModificationReference: cell(colModification), Type: cell(colType),
	}
	if row.Type == "" {
		return row, fmt.Errorf("%s is empty", colType)
	}
	var err error
	if row.GrossCurrency, err = currencyOf(cell(colGrossCurrency), colGrossCurrency); err != nil {
		return row, err
	}
	if row.NetCurrency, err = currencyOf(cell(colNetCurrency), colNetCurrency); err != nil {
		return row, err
	}
	if row.NetCurrency == "" {
		// A row always moves money in some currency; Adyen names it in
		// Net Currency, and in Gross Currency when the two are the same.
		if row.GrossCurrency == "" {
			return row, fmt.Errorf("%s and %s are both empty", colNetCurrency, colGrossCurrency)
		}
		row.NetCurrency = row.GrossCurrency
	}
	for _, a := range []struct {
		col string
		cur string
		dst *decimal.Decimal
	}{
		{colGrossDebit, row.GrossCurrency, &row.GrossDebit}, {colGrossCredit, row.GrossCurrency, &row.GrossCredit},
		{colNetDebit, row.NetCurrency, &row.NetDebit}, {colNetCredit, row.NetCurrency, &row.NetCredit},
		{colCommission, row.NetCurrency, &row.Commission}, {colMarkup, row.NetCurrency, &row.Markup},
		{colSchemeFees, row.NetCurrency, &row.SchemeFees}, {colInterchange, row.NetCurrency, &row.Interchange},
	} {
		if *a.dst, err = amountOf(cell(a.col), a.cur, a.col); err != nil {
			return row, err
		}
	}
	if v := cell(colExchangeRate); v != "" {
		rate, err := decimalOf(v)
		if err != nil || !rate.IsPositive() {
			return row, fmt.Errorf("%s is not a positive number", colExchangeRate)
		}
		row.ExchangeRate = decimal.NullDecimal{Decimal: rate, Valid: true}
	}
	if v := cell(colBatchNumber); v != "" {
		if row.Batch, err = strconv.ParseInt(v, 10, 64); err != nil || row.Batch < 1 {
			return row, fmt.Errorf("%s is not a batch number", colBatchNumber)
		}
	}
	if row.Created, err = creationTime(cell(colCreationDate), cell(colTimeZone)); err != nil {
		return row, err
	}
	return row, nil
}

// currencyOf reads a currency cell: empty, or a code the ledger knows.
func currencyOf(v, col string) (string, error) {
	if v == "" {
		return "", nil
	}
	cur := strings.ToLower(v)
	if !currencyShapeOK(v) {
		return "", fmt.Errorf("%s is not a three-letter currency code", col)
	}
	if _, err := Exponent(cur); err != nil {
		return "", fmt.Errorf("%s: %w", col, err)
	}
	return cur, nil
}

var decimalText = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// decimalOf reads a plain decimal number: digits, an optional sign and
// point; no exponent, no grouping, never through a float.
func decimalOf(v string) (decimal.Decimal, error) {
	if !decimalText.MatchString(v) {
		return decimal.Decimal{}, errors.New("not a decimal number")
	}
	return decimal.NewFromString(v)
}

// amountOf reads an amount cell of currency: empty is zero; otherwise a
// decimal number with at most as many decimals as Adyen writes for the
// currency.
func amountOf(v, currency, col string) (decimal.Decimal, error) {
	if v == "" {
		return decimal.Zero, nil
	}
	if currency == "" {
		return decimal.Decimal{}, fmt.Errorf("%s holds an amount of no currency", col)
	}
	d, err := decimalOf(v)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%s is not an amount", col)
	}
	exp, _ := Exponent(currency) // known: currencyOf checked it
	if -d.Exponent() > exp {
		return decimal.Decimal{}, fmt.Errorf("%s has more than %d decimals for %s", col, exp, strings.ToUpper(currency))
	}
	return d, nil
}

// creationDateLayout is how Adyen writes Creation Date, in the row's
// TimeZone.
const creationDateLayout = "2006-01-02 15:04:05"

// zoneOffsets are the zone abbreviations Adyen writes in TimeZone that
// name one offset each. Ambiguous ones (CST, IST) are not guessed: a file
// using them is refused with the reason rather than dated wrongly.
var zoneOffsets = map[string]int{
	"UTC": 0, "GMT": 0, "WET": 0, "WEST": 1, "BST": 1, "CET": 1, "CEST": 2, "EET": 2, "EEST": 3, "MSK": 3,
	"EST": -5, "EDT": -4, "MST": -7, "MDT": -6, "PST": -8, "PDT": -7, "AKST": -9, "AKDT": -8, "HST": -10,
	"BRT": -3, "ART": -3, "SGT": 8, "HKT": 8, "AWST": 8, "JST": 9, "KST": 9, "AEST": 10, "AEDT": 11,
	"NZST": 12, "NZDT": 13,
}

// creationTime reads Creation Date in TimeZone: an abbreviation of
// zoneOffsets, an IANA zone name (Europe/Amsterdam), or an offset
// (+01:00).
func creationTime(date, zone string) (time.Time, error) {
	if date == "" {
		return time.Time{}, fmt.Errorf("%s is empty", colCreationDate)
	}
	var loc *time.Location
	if h, ok := zoneOffsets[strings.ToUpper(zone)]; ok {
		loc = time.FixedZone(strings.ToUpper(zone), h*3600)
	} else if t, err := time.Parse("-07:00", zone); err == nil {
		_, off := t.Zone()
		loc = time.FixedZone(zone, off)
	} else if l, err := time.LoadLocation(zone); err == nil && zone != "" && zone != "Local" {
		loc = l
	} else {
		return time.Time{}, fmt.Errorf("%s %q is not a time zone paygate knows", colTimeZone, zone)
	}
	t, err := time.ParseInLocation(creationDateLayout, date, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s is not a date such as 2026-05-20 00:06:43", colCreationDate)
	}
	return t.UTC(), nil
}

// Settlements reads Adyen's settlement batches for reconciliation: the
// settlement details report of a batch, as Adyen wrote it. It is pure.
//
// Each row is a record of the batch; its lines are, in the row's net
// currency:
//
//	row type                         ledger ref                                   kind
//	Settled                          adyen:capture:<Modification Reference>      capture
//	Refunded                         adyen:refund:<…>                            refund
//	RefundedReversed                 adyen:refund:<…>:reversal                   refund_reversal
//	Chargeback                       adyen:dispute:<…>:chargeback                dispute_withdrawal
//	SecondChargeback                 adyen:dispute:<…>:second_chargeback         dispute_withdrawal
//	ChargebackReversed               adyen:dispute:<…>:chargeback_reversed       dispute_reinstatement
//	Fee                              adyen:fee:batch:<n>:line:<line>             fee, posted when missing
//	MerchantPayout                   adyen:payout:batch:<n>:<currency>           payout, posted when missing
//	fees of any row (Commission +    adyen:fee:<Modification Reference>:<type>   fee, posted when missing
//	Markup + Scheme Fees + Interchange)
//
// A movement's amount is its gross in the net currency: the net plus the
// fees Adyen deducted from it (Settled 5.00 = net 4.88 + fees 0.12). A row
// of any other type (SettledExternally, DepositCorrection, InvoiceDeduction,
// BalanceTransfer…) moves money paygate never posts: its line has no ref,
// so the run lists it missing_in_ledger for finance to book or resolve,
// rather than drop it; its fees are posted like any row's. A movement
// without a Modification Reference is listed the same way.
type Settlements struct{}

// Name is the provider's name.
func (Settlements) Name() string { return Name }

// Statement reads settlement batch's report file into its records and
// their lines. It fails with an error wrapping ErrInvalidReport (see
// ParseSettlementReport), also for a row of another batch, or an amount the
// ledger cannot hold in its currency.
func (Settlements) Statement(batch int64, file []byte) ([]provider.StatementRecord, error) {
	rows, err := ParseSettlementReport(file)
	if err != nil {
		return nil, err
	}
	out := make([]provider.StatementRecord, 0, len(rows))
	for _, row := range rows {
		if row.Batch != 0 && row.Batch != batch {
			return nil, fmt.Errorf("%w: line %d is of batch %d, not %d", ErrInvalidReport, row.Line, row.Batch, batch)
		}
		rec, err := statementRecord(batch, row)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrInvalidReport, row.Line, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// rowCategories are the reporting categories the run's totals group the
// mapped row types under; every other type is other_adjustment.
var rowCategories = map[string]string{
	RowSettled: "charge", RowRefunded: "refund", RowRefundedReversed: "refund_failure",
	RowChargeback: "dispute", RowSecondChargeback: "dispute", RowChargebackReversed: "dispute_reversal",
	RowFee: "fee", RowMerchantPayout: "payout",
}

// feeLineType is the Type of the line carrying a row's fees.
const feeLineType = "fee"

func statementRecord(batch int64, row SettlementRow) (provider.StatementRecord, error) {
	cur := row.NetCurrency
	net, err := minorOf(row.Net(), cur)
	if err != nil {
		return provider.StatementRecord{}, err
	}
	fee, err := minorOf(row.Fees(), cur)
	if err != nil {
		return provider.StatementRecord{}, err
	}
	bt := provider.BalanceTransaction{
		ID: row.PspReference, Type: row.Type, SourceID: row.ModificationReference, Currency: cur,
		Amount: net + fee, Fee: fee, Net: net, Created: row.Created,
	}
	bt.ReportingCategory = rowCategories[row.Type]
	if bt.ReportingCategory == "" {
		bt.ReportingCategory = "other_adjustment"
	}
	if row.GrossCurrency != "" && row.GrossCurrency != cur && row.ExchangeRate.Valid {
		bt.ExchangeRate = row.ExchangeRate
	}

	mod := row.ModificationReference
	main := provider.StatementLine{Type: row.Type, Amount: bt.Amount, FeeColumn: &bt.Fee}
	switch row.Type {
	case RowFee:
		main.Ref, main.Kind, main.Post = BatchRowFeeRef(batch, row.Line), ledger.KindFee, true
	case RowMerchantPayout:
		main.Ref, main.Kind, main.Post = PayoutRef(batch, cur), ledger.KindPayout, true
		if bt.Amount > 0 {
			main.Kind = ledger.KindPayoutReversal // the bank paid the balance back
		}
	default:
		if mod != "" {
			main.Ref, main.Kind = movementRef(row.Type, mod)
		}
		if main.Ref != "" {
			main.Conversion = SettlementRefPrefix(mod, row.Type)
		}
	}
	rec := provider.StatementRecord{BalanceTransaction: bt, Lines: []provider.StatementLine{main}}
	if fee != 0 {
		feeRef := BatchRowFeeRef(batch, row.Line)
		switch {
		case main.Post:
			feeRef += ":fee"
		case mod != "":
			feeRef = FeeRef(mod, row.Type)
		}
		rec.Lines = append(rec.Lines, provider.StatementLine{Ref: feeRef, Kind: ledger.KindFee, Post: true, Type: feeLineType, Amount: -fee})
	}
	return rec, nil
}

// movementRef is the ledger ref and kind the webhook path posts the
// movement of a row of type typ under; empty for types paygate does not
// post.
func movementRef(typ, mod string) (string, ledger.Kind) {
	switch typ {
	case RowSettled:
		return CaptureRef(mod), ledger.KindCapture
	case RowRefunded:
		return RefundRef(mod), ledger.KindRefund
	case RowRefundedReversed:
		return RefundReversalRef(mod), ledger.KindRefundReversal
	case RowChargeback:
		return ChargebackRef(mod), ledger.KindDisputeWithdrawal
	case RowSecondChargeback:
		return SecondChargebackRef(mod), ledger.KindDisputeWithdrawal
	case RowChargebackReversed:
		return ChargebackReversalRef(mod), ledger.KindDisputeReinstatement
	}
	return "", ""
}

// minorOf converts a signed amount in major units to the ledger's minor
// units of currency (whose exponent may differ from Adyen's: CLP).
func minorOf(d decimal.Decimal, currency string) (int64, error) {
	m, err := ledger.ToMinor(d.Abs(), currency)
	if err != nil {
		return 0, err
	}
	if d.IsNegative() {
		return -m, nil
	}
	return m, nil
}
