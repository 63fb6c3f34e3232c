// Package csvtext keeps the text cells of paygate's CSV exports from being
// read as formulas: finance opens the exports in spreadsheets, and some of
// their text is the merchant's (order references, notes), which anyone
// able to pay can choose. It must never touch an amount: a negative amount
// ("-20.00", Xero's credits) is a number, not a formula.
package csvtext

// Cell returns s as a text cell is written: with a leading ' when it starts
// with a character a spreadsheet reads as the start of a formula (=, +, -,
// @, tab or carriage return), which makes the spreadsheet show it as the
// text it is (OWASP, "CSV Injection"). Any other s is returned as it is.
func Cell(s string) string {
	if s == "" {
		return s
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return "'" + s
	}
	return s
}
