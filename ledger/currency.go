package ledger

import (
	"fmt"
	"sort"

	"github.com/shopspring/decimal"
)

// exponents maps each lowercase ISO 4217 code we accept to the number of
// decimal places of its minor unit *as the payment provider counts it*.
// That is not always ISO's number: ISK is zero-decimal in ISO 4217 but stays
// two-decimal in Stripe's API (amounts are multiples of 100), and MGA/UGX
// are zero-decimal there. A wrong exponent here is a ledger off by a factor
// of 100, so the list is explicit rather than derived from a library.
var exponents = func() map[string]int32 {
	m := make(map[string]int32, 160)
	for _, c := range []string{
		"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga",
		"pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf",
	} {
		m[c] = 0
	}
	for _, c := range []string{"bhd", "jod", "kwd", "omr", "tnd"} {
		m[c] = 3
	}
	for _, c := range []string{
		"aed", "afn", "all", "amd", "ang", "aoa", "ars", "aud", "awg", "azn",
		"bam", "bbd", "bdt", "bgn", "bmd", "bnd", "bob", "brl", "bsd", "bwp",
		"byn", "bzd", "cad", "cdf", "chf", "cny", "cop", "crc", "cve", "czk",
		"dkk", "dop", "dzd", "egp", "etb", "eur", "fjd", "fkp", "gbp", "gel",
		"gip", "gmd", "gtq", "gyd", "hkd", "hnl", "hrk", "htg", "huf", "idr",
		"ils", "inr", "isk", "jmd", "kes", "kgs", "khr", "kyd", "kzt", "lak",
		"lbp", "lkr", "lrd", "lsl", "mad", "mdl", "mkd", "mmk", "mnt", "mop",
		"mro", "mur", "mvr", "mwk", "mxn", "myr", "mzn", "nad", "ngn", "nio",
		"nok", "npr", "nzd", "pab", "pen", "pgk", "php", "pkr", "pln", "qar",
		"ron", "rsd", "rub", "sar", "sbd", "scr", "sek", "sgd", "shp", "sle",
		"sll", "sos", "srd", "std", "szl", "thb", "tjs", "top", "try", "ttd",
		"twd", "tzs", "uah", "usd", "uyu", "uzs", "wst", "xcd", "yer", "zar",
		"zmw",
	} {
		m[c] = 2
	}
	return m
}()

// Exponent returns the number of decimal places of currency's minor unit:
// 0 for jpy, 2 for usd, 3 for kwd. Codes are lowercase, as providers send
// them; "USD" is unknown so that one currency never has two spellings in the
// ledger. It fails with ErrUnknownCurrency.
func Exponent(currency string) (int32, error) {
	exp, ok := exponents[currency]
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownCurrency, currency)
	}
	return exp, nil
}

// Currencies returns every currency code Exponent knows, sorted.
func Currencies() []string {
	out := make([]string, 0, len(exponents))
	for c := range exponents {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// FromMinor converts an amount in minor units (cents, yen, fils) to the
// currency's major unit, exactly and at the currency's scale: 36000 usd is
// 360.00, 1000 jpy is 1000, 1234 kwd is 1.234. It fails with
// ErrUnknownCurrency or ErrNegativeAmount: providers report direction by
// event type, never by sign.
func FromMinor(minor int64, currency string) (decimal.Decimal, error) {
	exp, err := Exponent(currency)
	if err != nil {
		return decimal.Decimal{}, err
	}
	if minor < 0 {
		return decimal.Decimal{}, fmt.Errorf("%w: %d %s", ErrNegativeAmount, minor, currency)
	}
	return decimal.New(minor, -exp), nil
}

// ToMinor converts an amount in the currency's major unit back to minor
// units. It fails with ErrUnknownCurrency, ErrNegativeAmount, or
// ErrInvalidAmount when the amount has more decimal places than the currency
// has (1.005 usd) or does not fit in an int64.
func ToMinor(amount decimal.Decimal, currency string) (int64, error) {
	exp, err := Exponent(currency)
	if err != nil {
		return 0, err
	}
	if amount.IsNegative() {
		return 0, fmt.Errorf("%w: %s %s", ErrNegativeAmount, amount, currency)
	}
	shifted := amount.Shift(exp)
	if !shifted.IsInteger() {
		return 0, fmt.Errorf("%w: %s has more than %d decimal places for %s", ErrInvalidAmount, amount, exp, currency)
	}
	minor := shifted.BigInt()
	if !minor.IsInt64() {
		return 0, fmt.Errorf("%w: %s %s overflows minor units", ErrInvalidAmount, amount, currency)
	}
	return minor.Int64(), nil
}

// Format renders amount with exactly the currency's number of decimal places
// ("360.00", "1000", "1.234"), the form the HTTP API and reports use. It
// never rounds: an amount with more places than the currency has, or an
// unknown currency, is rendered in full so that a bad value stays visible.
func Format(amount decimal.Decimal, currency string) string {
	exp, err := Exponent(currency)
	if err != nil || !amount.Shift(exp).IsInteger() {
		return amount.String()
	}
	return amount.StringFixed(exp)
}

// atScale returns amount with exactly exp decimal places, for amounts known
// to fit (validated or read from the ledger).
func atScale(amount decimal.Decimal, exp int32) decimal.Decimal {
	return amount.Round(exp)
}
