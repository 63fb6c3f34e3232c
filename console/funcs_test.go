package console

import "testing"

func TestMoney(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ amount, currency, want string }{
		{"360.00", "usd", "$360.00"},
		{"45.00", "eur", "€45.00"},
		{"500", "jpy", "¥500"},
		{"12.30", "GBP", "£12.30"},
		{"1234567.89", "usd", "$1,234,567.89"},
		{"-3610.25", "usd", "-$3,610.25"},
		{"-0.50", "eur", "-€0.50"},
		{"100", "jpy", "¥100"},
		{"1000", "jpy", "¥1,000"},
		{"360.00", "chf", "360.00 CHF"},
		{"-1234.567", "kwd", "-1,234.567 KWD"},
		{"0", "usd", "$0"},
		{"12.50", "", "12.50"},
		{"", "usd", "—"},
		{"1e3", "usd", "1e3 USD"}, // not the API's form: shown as it came
	} {
		if got := money(tc.amount, tc.currency); got != tc.want {
			t.Errorf("money(%q, %q) = %q, want %q", tc.amount, tc.currency, got, tc.want)
		}
	}
}
