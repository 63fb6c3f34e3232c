package ledger

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/shopspring/decimal"
)

// TrialBalanceReport totals the whole ledger. In a healthy ledger every currency
// is Balanced; the triggers make anything else impossible, so an unbalanced
// currency here means the database was tampered with below them.
type TrialBalanceReport struct {
	Currencies []CurrencyTotal  // sorted by currency
	Accounts   []AccountBalance // sorted by currency, then chart order
}

// CurrencyTotal is the sum of all debits and all credits in one currency.
type CurrencyTotal struct {
	Currency string
	Debits   decimal.Decimal
	Credits  decimal.Decimal
	Balanced bool // Debits equal Credits
}

// AccountBalance is one account's totals in one currency. Balance is
// Debits − Credits: positive for assets and expenses, negative for revenue.
type AccountBalance struct {
	Account  Account
	Currency string
	Debits   decimal.Decimal
	Credits  decimal.Decimal
	Balance  decimal.Decimal
}

// TrialBalance reads the totals of every account in every currency that has
// entries, from one snapshot (one statement), at each currency's scale. An
// empty ledger gives empty, non-nil lists.
func TrialBalance(ctx context.Context, q Querier) (TrialBalanceReport, error) {
	rows, err := q.Query(ctx, `
		SELECT account, currency, sum(debit)::text, sum(credit)::text
		FROM ledger_entries GROUP BY account, currency`)
	if err != nil {
		return TrialBalanceReport{}, fmt.Errorf("read trial balance: %w", err)
	}
	defer rows.Close()

	tb := TrialBalanceReport{Currencies: []CurrencyTotal{}, Accounts: []AccountBalance{}}
	for rows.Next() {
		var a AccountBalance
		var account, debits, credits string
		if err := rows.Scan(&account, &a.Currency, &debits, &credits); err != nil {
			return TrialBalanceReport{}, fmt.Errorf("read trial balance: %w", err)
		}
		a.Account = Account(account)
		if a.Debits, err = decimal.NewFromString(debits); err != nil {
			return TrialBalanceReport{}, fmt.Errorf("read trial balance: parse %q: %w", debits, err)
		}
		if a.Credits, err = decimal.NewFromString(credits); err != nil {
			return TrialBalanceReport{}, fmt.Errorf("read trial balance: parse %q: %w", credits, err)
		}
		tb.Accounts = append(tb.Accounts, a)
	}
	if err := rows.Err(); err != nil {
		return TrialBalanceReport{}, fmt.Errorf("read trial balance: %w", err)
	}

	slices.SortFunc(tb.Accounts, func(x, y AccountBalance) int {
		return cmp.Or(cmp.Compare(x.Currency, y.Currency), cmp.Compare(x.Account.rank(), y.Account.rank()))
	})
	for i := range tb.Accounts {
		a := &tb.Accounts[i]
		a.Balance = present(a.Debits.Sub(a.Credits), a.Currency)
		if n := len(tb.Currencies); n == 0 || tb.Currencies[n-1].Currency != a.Currency {
			tb.Currencies = append(tb.Currencies, CurrencyTotal{Currency: a.Currency, Debits: decimal.Zero, Credits: decimal.Zero})
		}
		c := &tb.Currencies[len(tb.Currencies)-1]
		c.Debits, c.Credits = c.Debits.Add(a.Debits), c.Credits.Add(a.Credits)
		a.Debits, a.Credits = present(a.Debits, a.Currency), present(a.Credits, a.Currency)
	}
	for i := range tb.Currencies {
		c := &tb.Currencies[i]
		c.Balanced = c.Debits.Equal(c.Credits)
		c.Debits, c.Credits = present(c.Debits, c.Currency), present(c.Credits, c.Currency)
	}
	return tb, nil
}
