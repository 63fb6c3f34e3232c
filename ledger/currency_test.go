package ledger_test

import (
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/ledger"
)

func TestExponent(t *testing.T) {
	t.Parallel()
	for want, codes := range map[int32][]string{
		0: {"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"},
		3: {"bhd", "jod", "kwd", "omr", "tnd"},
		2: {"usd", "eur", "gbp", "cad", "aud", "chf", "sek", "nok", "dkk", "pln", "czk", "huf", "ron", "bgn", "hrk",
			"isk", "try", "brl", "mxn", "ars", "cop", "pen", "inr", "idr", "myr", "php", "sgd", "hkd", "nzd", "thb",
			"twd", "zar", "aed", "sar", "ils", "egp", "ngn", "kes", "cny", "uah", "xcd", "zmw"},
	} {
		for _, c := range codes {
			got, err := ledger.Exponent(c)
			require.NoError(t, err, c)
			require.Equal(t, want, got, c)
		}
	}
	for _, c := range []string{"", "USD", "Usd", "xxx", "usdc", "eek", " usd"} {
		_, err := ledger.Exponent(c)
		require.ErrorIs(t, err, ledger.ErrUnknownCurrency, "%q", c)
	}
	require.Greater(t, len(ledger.Currencies()), 130, "the whole list Stripe supports, not a sample")
}

func TestFromMinorIsExact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor    int64
		currency string
		want     string
	}{
		{0, "usd", "0.00"},
		{5, "usd", "0.05"},
		{36000, "usd", "360.00"},
		{999999999999, "usd", "9999999999.99"},
		{9223372036854775807, "usd", "92233720368547758.07"},
		{1000, "jpy", "1000"},
		{1, "jpy", "1"},
		{999999999999, "jpy", "999999999999"},
		{9223372036854775807, "krw", "9223372036854775807"},
		{1234, "kwd", "1.234"},
		{1, "bhd", "0.001"},
		{999999999999, "kwd", "999999999.999"},
		{9223372036854775807, "kwd", "9223372036854775.807"},
		{500, "isk", "5.00"}, // Stripe keeps ISK two-decimal
		{500, "ugx", "500"},
	} {
		got, err := ledger.FromMinor(tc.minor, tc.currency)
		require.NoError(t, err)
		require.Equal(t, tc.want, ledger.Format(got, tc.currency), "%d %s", tc.minor, tc.currency)
		require.True(t, got.Equal(decimal.RequireFromString(tc.want)), "%d %s = %s", tc.minor, tc.currency, got)

		back, err := ledger.ToMinor(got, tc.currency)
		require.NoError(t, err)
		require.Equal(t, tc.minor, back)
	}
}

func TestConversionErrors(t *testing.T) {
	t.Parallel()
	_, err := ledger.FromMinor(-1, "usd")
	require.ErrorIs(t, err, ledger.ErrNegativeAmount)
	_, err = ledger.FromMinor(100, "USD")
	require.ErrorIs(t, err, ledger.ErrUnknownCurrency)
	_, err = ledger.FromMinor(100, "xyz")
	require.ErrorIs(t, err, ledger.ErrUnknownCurrency)

	for _, tc := range []struct {
		amount, currency string
		want             error
	}{
		{"1.005", "usd", ledger.ErrInvalidAmount},
		{"1.5", "jpy", ledger.ErrInvalidAmount},
		{"0.0001", "kwd", ledger.ErrInvalidAmount},
		{"-0.01", "usd", ledger.ErrNegativeAmount},
		{"92233720368547758.08", "usd", ledger.ErrInvalidAmount}, // one past int64
		{"1.00", "xyz", ledger.ErrUnknownCurrency},
	} {
		_, err := ledger.ToMinor(decimal.RequireFromString(tc.amount), tc.currency)
		require.ErrorIs(t, err, tc.want, "%s %s", tc.amount, tc.currency)
	}

	// Trailing zeros beyond the exponent are not extra precision.
	minor, err := ledger.ToMinor(decimal.RequireFromString("360.0000"), "usd")
	require.NoError(t, err)
	require.Equal(t, int64(36000), minor)
}

func TestFormat(t *testing.T) {
	t.Parallel()
	d := decimal.RequireFromString
	require.Equal(t, "360.00", ledger.Format(d("360"), "usd"))
	require.Equal(t, "0.00", ledger.Format(decimal.Zero, "usd"))
	require.Equal(t, "0", ledger.Format(decimal.Zero, "jpy"))
	require.Equal(t, "1.230", ledger.Format(d("1.23"), "kwd"))
	require.Equal(t, "-51.80", ledger.Format(d("-51.8"), "usd"))
	// Never rounds a value the currency cannot hold: it stays visible.
	require.Equal(t, "1.005", ledger.Format(d("1.005"), "usd"))
	require.Equal(t, "12.5", ledger.Format(d("12.5"), "nope"))
}

func TestMinorRoundTripProperty(t *testing.T) {
	t.Parallel()
	currencies := ledger.Currencies()
	rapid.Check(t, func(t *rapid.T) {
		currency := rapid.SampledFrom(currencies).Draw(t, "currency")
		minor := rapid.OneOf(rapid.Int64Range(0, 1_000_000), rapid.Int64Min(0)).Draw(t, "minor")
		exp, err := ledger.Exponent(currency)
		if err != nil {
			t.Fatalf("Exponent(%q): %v", currency, err)
		}

		amount, err := ledger.FromMinor(minor, currency)
		if err != nil {
			t.Fatalf("FromMinor(%d, %s): %v", minor, currency, err)
		}
		back, err := ledger.ToMinor(amount, currency)
		if err != nil {
			t.Fatalf("ToMinor(%s, %s): %v", amount, currency, err)
		}
		if back != minor {
			t.Fatalf("%d %s -> %s -> %d", minor, currency, amount, back)
		}

		s := ledger.Format(amount, currency)
		parsed, err := decimal.NewFromString(s)
		if err != nil || !parsed.Equal(amount) || -parsed.Exponent() != exp {
			t.Fatalf("Format(%d %s) = %q: not the same value at scale %d", minor, currency, s, exp)
		}

		if _, err := ledger.FromMinor(-minor-1, currency); err == nil {
			t.Fatalf("FromMinor(%d, %s) accepted a negative amount", -minor-1, currency)
		}
	})
}
