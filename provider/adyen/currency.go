package adyen

import (
	"fmt"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
)

// Adyen counts minor units by ISO 4217 with four exceptions of its own
// (docs.adyen.com/development-resources/currency-codes): CLP has two
// decimals (ISO: none), CVE none (ISO: two), IDR none (ISO: two) and ISK two
// (ISO: none). Read with another provider's exponents, a CLP amount would be
// booked a hundred times too large. The list is explicit, as the ledger's
// is: a wrong exponent is a ledger off by a factor of 100.
var (
	zeroDecimal = set("bif", "cve", "djf", "gnf", "idr", "jpy", "kmf", "krw",
		"pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf")
	threeDecimal = set("bhd", "iqd", "jod", "kwd", "lyd", "omr", "tnd")
)

func set(codes ...string) map[string]bool {
	m := make(map[string]bool, len(codes))
	for _, c := range codes {
		m[c] = true
	}
	return m
}

// Exponent returns the number of decimals of currency's minor unit as Adyen
// counts them; currency is lowercase ("clp": 2). Every other currency the
// ledger knows has two.
//
// It fails with ledger.ErrUnknownCurrency for a currency the ledger does not
// know: nothing in it could be booked.
func Exponent(currency string) (int32, error) {
	if _, err := ledger.Exponent(currency); err != nil {
		return 0, err
	}
	switch {
	case zeroDecimal[currency]:
		return 0, nil
	case threeDecimal[currency]:
		return 3, nil
	}
	return 2, nil
}

// FromMinor converts an Adyen amount (value in Adyen's minor units, the
// currency as Adyen writes it, "EUR") to the ledger's major unit at the
// ledger's scale for that currency: 150000 CLP is 1500 (Adyen counts
// centavos; the ledger books whole pesos), 500 CVE is 500.00.
//
// It fails with an error wrapping provider.ErrPermanent for a missing or
// negative value, an unknown currency, or a value the ledger cannot hold
// exactly (CLP centavos that are not whole pesos).
func FromMinor(value *int64, currency, what string) (decimal.Decimal, string, error) {
	if value == nil {
		return decimal.Decimal{}, "", fmt.Errorf("%w: %s: missing amount", provider.ErrPermanent, what)
	}
	cur := strings.ToLower(currency)
	exp, err := Exponent(cur)
	if err != nil {
		return decimal.Decimal{}, "", fmt.Errorf("%w: %s: %w", provider.ErrPermanent, what, err)
	}
	if *value < 0 {
		return decimal.Decimal{}, "", fmt.Errorf("%w: %s: %w", provider.ErrPermanent, what, ledger.ErrNegativeAmount)
	}
	minor, err := ledger.ToMinor(decimal.New(*value, -exp), cur)
	if err != nil {
		return decimal.Decimal{}, "", fmt.Errorf("%w: %s: %w", provider.ErrPermanent, what, err)
	}
	amount, err := ledger.FromMinor(minor, cur)
	if err != nil {
		return decimal.Decimal{}, "", fmt.Errorf("%w: %s: %w", provider.ErrPermanent, what, err)
	}
	return amount, cur, nil
}

// ToMinor converts amount, in the ledger's major unit of currency (any
// case), to Adyen's minor units: 1500 CLP is 150000 (Adyen counts
// centavos), 12.345 KWD is 12345, 500 JPY is 500.
//
// It fails with ledger.ErrUnknownCurrency for a currency the ledger does
// not know, and with an error for an amount that is negative or not a whole
// number of Adyen's minor units (IDR cents, which Adyen does not count).
func ToMinor(amount decimal.Decimal, currency string) (int64, error) {
	cur := strings.ToLower(currency)
	exp, err := Exponent(cur)
	if err != nil {
		return 0, err
	}
	if amount.IsNegative() {
		return 0, ledger.ErrNegativeAmount
	}
	minor := amount.Shift(exp)
	if !minor.Equal(minor.Truncate(0)) {
		return 0, fmt.Errorf("%s %s is not a whole number of Adyen's minor units (%d decimals)", amount, strings.ToUpper(cur), exp)
	}
	if !minor.LessThanOrEqual(decimal.NewFromInt(1 << 53)) {
		return 0, fmt.Errorf("%s %s is too large", amount, strings.ToUpper(cur))
	}
	return minor.IntPart(), nil
}
