package ledger

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// GLAccounts maps accounts of the chart to what the general ledger calls
// them (PAYGATE_GL_ACCOUNTS): a code for Xero ("4000"), a name for
// QuickBooks ("Sales:Online"). An account without one is exported under
// its own name.
type GLAccounts map[Account]string

// maxGLCode bounds a code: general ledgers allow tens of characters.
const maxGLCode = 100

// ParseGLAccounts reads a comma-separated list of account=code, such as
// "sales=4000,refunds=4010,fees=6100". Spaces around entries, accounts and
// codes are ignored; an empty value maps nothing. It fails with
// ErrInvalidGLAccounts, naming the entry at fault: one without "=", an
// account outside the chart, an account given twice, an empty code, or a
// code with control characters or longer than 100 characters.
func ParseGLAccounts(s string) (GLAccounts, error) {
	out := GLAccounts{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		name, code, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, fmt.Errorf("%w: entry %d (%q) is not account=code, such as sales=4000", ErrInvalidGLAccounts, i+1, entry)
		}
		account, code := Account(strings.TrimSpace(name)), strings.TrimSpace(code)
		switch {
		case !account.Valid():
			return nil, fmt.Errorf("%w: entry %d: %q is not an account of the chart (%s)", ErrInvalidGLAccounts, i+1, account, chartNames())
		case out[account] != "":
			return nil, fmt.Errorf("%w: entry %d: %s is given twice", ErrInvalidGLAccounts, i+1, account)
		case code == "":
			return nil, fmt.Errorf("%w: entry %d: the code of %s is empty", ErrInvalidGLAccounts, i+1, account)
		case utf8.RuneCountInString(code) > maxGLCode:
			return nil, fmt.Errorf("%w: entry %d: the code of %s is longer than %d characters", ErrInvalidGLAccounts, i+1, account, maxGLCode)
		case !utf8.ValidString(code) || strings.ContainsFunc(code, unicode.IsControl):
			return nil, fmt.Errorf("%w: entry %d: the code of %s holds a control character", ErrInvalidGLAccounts, i+1, account)
		}
		out[account] = code
	}
	return out, nil
}

// Code is what the general ledger calls a: its code, or its own name.
func (g GLAccounts) Code(a Account) string {
	if c := g[a]; c != "" {
		return c
	}
	return string(a)
}

func chartNames() string {
	names := make([]string, len(chart))
	for i, a := range chart {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}
