package ledger

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Account is an account of the chart (see the package documentation). Its
// value is stored in the database; never rename one.
type Account string

// The chart of accounts.
const (
	AccountProviderBalance  Account = "provider_balance"
	AccountPayoutsInTransit Account = "payouts_in_transit"
	AccountBank             Account = "bank"
	AccountSales            Account = "sales"
	AccountRefunds          Account = "refunds"
	AccountDisputeLosses    Account = "dispute_losses"
	AccountFees             Account = "fees"
	// AccountFXClearing is where a conversion between currencies passes:
	// the presentment amount enters it in one currency and the settlement
	// amount leaves it in the other (see NewSettlement).
	AccountFXClearing Account = "fx_clearing"
	// AccountReconciliationAdjustments is where finance writes off a
	// difference reconciliation found between the provider's statement
	// and the ledger: what the provider holds beyond the ledger is
	// credited to it, what it lacks debited.
	AccountReconciliationAdjustments Account = "reconciliation_adjustments"
)

// chart lists the accounts in presentation order: assets, revenue, contra
// revenue, expenses, clearing, write-offs. Trial balances are sorted by it.
var chart = []Account{
	AccountProviderBalance, AccountPayoutsInTransit, AccountBank,
	AccountSales, AccountRefunds, AccountDisputeLosses, AccountFees, AccountFXClearing,
	AccountReconciliationAdjustments,
}

// Accounts returns the chart of accounts in presentation order.
func Accounts() []Account { return slices.Clone(chart) }

// Valid reports whether a is in the chart of accounts.
func (a Account) Valid() bool { return slices.Contains(chart, a) }

func (a Account) rank() int { return slices.Index(chart, a) }

// Kind is the kind of money movement a transaction records. Its value is
// stored in the database and appears in the HTTP API; never rename one.
type Kind string

// The kinds of transaction.
const (
	KindCapture              Kind = "capture"
	KindRefund               Kind = "refund"
	KindRefundReversal       Kind = "refund_reversal"
	KindDisputeWithdrawal    Kind = "dispute_withdrawal"
	KindDisputeReinstatement Kind = "dispute_reinstatement"
	KindPayout               Kind = "payout"
	KindPayoutReversal       Kind = "payout_reversal"
	KindFee                  Kind = "fee"
	KindAdjustment           Kind = "adjustment"
)

// rule is a kind's posting rule: one debit and one credit of the same amount.
type rule struct{ debit, credit Account }

// rules holds every kind but adjustment, whose entries are free.
var rules = map[Kind]rule{
	KindCapture:              {AccountProviderBalance, AccountSales},
	KindRefund:               {AccountRefunds, AccountProviderBalance},
	KindRefundReversal:       {AccountProviderBalance, AccountRefunds},
	KindDisputeWithdrawal:    {AccountDisputeLosses, AccountProviderBalance},
	KindDisputeReinstatement: {AccountProviderBalance, AccountDisputeLosses},
	KindPayout:               {AccountPayoutsInTransit, AccountProviderBalance},
	KindPayoutReversal:       {AccountProviderBalance, AccountPayoutsInTransit},
	KindFee:                  {AccountFees, AccountProviderBalance},
}

// Valid reports whether k is one of the kinds.
func (k Kind) Valid() bool {
	_, ok := rules[k]
	return ok || k == KindAdjustment
}

// Transaction is one balanced money movement. Ref identifies the movement
// (not the event that reported it) and is unique in the ledger; posting the
// same Ref twice with the same content is a no-op.
type Transaction struct {
	Ref        string
	Kind       Kind
	Currency   string // lowercase ISO code; every entry is in it
	OccurredAt time.Time
	// PostedAt is when the transaction counts in the books: OccurredAt,
	// unless that fell in a period closed when it was posted, then the
	// first instant of the first open period. The database sets it at
	// posting (whatever a caller puts here is ignored); reads fill it in.
	PostedAt  time.Time
	PaymentID string // empty for movements without a payment (payouts)
	EventID   string // the event that first reported it; informational
	// ExchangeRate is the provider's rate (major units of the settlement
	// currency per major unit of the presentment currency) on the legs of
	// a conversion; not Valid on every other transaction.
	ExchangeRate decimal.NullDecimal
	Entries      []Entry
}

// Entry is one line of a transaction. Exactly one of Debit and Credit is
// positive; the other is zero.
type Entry struct {
	Account Account
	Debit   decimal.Decimal
	Credit  decimal.Decimal
}

// Debit returns an entry debiting amount to account.
func Debit(account Account, amount decimal.Decimal) Entry {
	return Entry{Account: account, Debit: amount, Credit: decimal.Zero}
}

// Credit returns an entry crediting amount to account.
func Credit(account Account, amount decimal.Decimal) Entry {
	return Entry{Account: account, Debit: decimal.Zero, Credit: amount}
}

func newByRule(kind Kind, ref, paymentID, eventID, currency string, amount decimal.Decimal, at time.Time) Transaction {
	r := rules[kind]
	return Transaction{
		Ref: ref, Kind: kind, Currency: currency, OccurredAt: at,
		PaymentID: paymentID, EventID: eventID,
		Entries: []Entry{Debit(r.debit, amount), Credit(r.credit, amount)},
	}
}

// NewCapture records a captured payment: Dr provider_balance, Cr sales.
func NewCapture(ref, paymentID, eventID, currency string, amount decimal.Decimal, at time.Time) Transaction {
	return newByRule(KindCapture, ref, paymentID, eventID, currency, amount, at)
}

// NewCaptureReversal records a capture that did not bring the money in
// after all (Adyen's CAPTURE_FAILED): Dr sales, Cr provider_balance. It is
// an adjustment, the correction of a posted capture, whose own transaction
// stays.
func NewCaptureReversal(ref, paymentID, eventID, currency string, amount decimal.Decimal, at time.Time) Transaction {
	return Transaction{
		Ref: ref, Kind: KindAdjustment, Currency: currency, OccurredAt: at,
		PaymentID: paymentID, EventID: eventID,
		Entries: []Entry{Debit(AccountSales, amount), Credit(AccountProviderBalance, amount)},
	}
}

// NewRefund records a refund that succeeded: Dr refunds, Cr provider_balance.
func NewRefund(ref, paymentID, eventID, currency string, amount decimal.Decimal, at time.Time) Transaction {
	return newByRule(KindRefund, ref, paymentID, eventID, currency, amount, at)
}

// NewRefundReversal records a refund that failed after succeeding: Dr
// provider_balance, Cr refunds. The refund's own transaction stays.
func NewRefundReversal(ref, paymentID, eventID, currency string, amount decimal.Decimal, at time.Time) Transaction {
	return newByRule(KindRefundReversal, ref, paymentID, eventID, currency, amount, at)
}

// NewDisputeWithdrawal records funds withdrawn for a dispute: Dr
// dispute_losses, Cr provider_balance.
func NewDisputeWithdrawal(ref, paymentID, eventID, currency string, amount decimal.Decimal, at time.Time) Transaction {
	return newByRule(KindDisputeWithdrawal, ref, paymentID, eventID, currency, amount, at)
}

// NewDisputeReinstatement records funds returned after a dispute: Dr
// provider_balance, Cr dispute_losses.
func NewDisputeReinstatement(ref, paymentID, eventID, currency string, amount decimal.Decimal, at time.Time) Transaction {
	return newByRule(KindDisputeReinstatement, ref, paymentID, eventID, currency, amount, at)
}

// NewPayout records a payout leaving the provider: Dr payouts_in_transit, Cr
// provider_balance. Payouts belong to no payment.
func NewPayout(ref, eventID, currency string, amount decimal.Decimal, at time.Time) Transaction {
	return newByRule(KindPayout, ref, "", eventID, currency, amount, at)
}

// NewPayoutReversal records a failed payout coming back: Dr
// provider_balance, Cr payouts_in_transit.
func NewPayoutReversal(ref, eventID, currency string, amount decimal.Decimal, at time.Time) Transaction {
	return newByRule(KindPayoutReversal, ref, "", eventID, currency, amount, at)
}

// NewFee records the provider's fee: Dr fees, Cr provider_balance. paymentID
// may be empty for fees not tied to a payment.
func NewFee(ref, paymentID, eventID, currency string, amount decimal.Decimal, at time.Time) Transaction {
	return newByRule(KindFee, ref, paymentID, eventID, currency, amount, at)
}

// Money is a signed amount in a currency, positive when it enters the
// provider balance.
type Money struct {
	Amount   decimal.Decimal
	Currency string
}

// NewSettlement records that the provider booked a movement presented in
// one currency in its balance in another: presented is the movement's
// effect on provider_balance as the ledger posted it (positive for a
// capture, negative for a refund), settled the provider's booking of it in
// the balance's currency, rate the provider's exchange rate. It returns two
// adjustments, one per currency, each balanced in its own: presented
// leaves provider_balance for fx_clearing, and settled enters
// provider_balance from fx_clearing. After both, provider_balance holds the
// movement in the settlement currency only, as the provider's balance
// does, and fx_clearing holds the conversion, at the rate, in both. ref
// names each leg by its currency: one prefix followed by the currency
// code, which is how the journal exports in the books currency find the
// other leg of a conversion.
func NewSettlement(ref func(currency string) string, paymentID, eventID string, presented, settled Money, rate decimal.Decimal, at time.Time) [2]Transaction {
	leg := func(m Money, out bool) Transaction {
		// A leg moves m out of provider_balance (the presentment side) or
		// into it (the settlement side); a negative m moves the other way.
		from, to := AccountFXClearing, AccountProviderBalance
		if out == m.Amount.IsPositive() {
			from, to = to, from
		}
		amount := m.Amount.Abs()
		return Transaction{
			Ref: ref(m.Currency), Kind: KindAdjustment, Currency: m.Currency, OccurredAt: at,
			PaymentID: paymentID, EventID: eventID, ExchangeRate: decimal.NewNullDecimal(rate),
			Entries: []Entry{Debit(to, amount), Credit(from, amount)},
		}
	}
	return [2]Transaction{leg(presented, true), leg(settled, false)}
}

// Amount is what the transaction moves: the sum of its debits.
func (t Transaction) Amount() decimal.Decimal {
	sum := decimal.Zero
	for _, e := range t.Entries {
		sum = sum.Add(e.Debit)
	}
	return sum
}

// Validate checks t against the ledger's rules without touching the
// database. It fails with ErrInvalidTransaction, ErrInvalidKind,
// ErrUnknownCurrency, ErrInvalidEntries, ErrInvalidAccount, ErrInvalidAmount
// (also ErrNegativeAmount for a negative one) or ErrUnbalanced.
func (t Transaction) Validate() error {
	if strings.TrimSpace(t.Ref) == "" {
		return fmt.Errorf("%w: empty ref", ErrInvalidTransaction)
	}
	if t.OccurredAt.IsZero() {
		return fmt.Errorf("%w: %s: no occurrence time", ErrInvalidTransaction, t.Ref)
	}
	if !t.Kind.Valid() {
		return fmt.Errorf("%w: %q", ErrInvalidKind, t.Kind)
	}
	if t.ExchangeRate.Valid && !t.ExchangeRate.Decimal.IsPositive() {
		return fmt.Errorf("%w: %s: exchange rate %s is not positive", ErrInvalidTransaction, t.Ref, t.ExchangeRate.Decimal)
	}
	exp, err := Exponent(t.Currency)
	if err != nil {
		return err
	}
	if len(t.Entries) == 0 {
		return fmt.Errorf("%w: no entries", ErrInvalidEntries)
	}
	debits, credits := decimal.Zero, decimal.Zero
	for i, e := range t.Entries {
		if !e.Account.Valid() {
			return fmt.Errorf("%w: entry %d: %q", ErrInvalidAccount, i, e.Account)
		}
		if e.Debit.IsNegative() || e.Credit.IsNegative() {
			return fmt.Errorf("%w: %w: entry %d", ErrInvalidAmount, ErrNegativeAmount, i)
		}
		if e.Debit.IsPositive() == e.Credit.IsPositive() {
			return fmt.Errorf("%w: entry %d must have exactly one positive side, has debit %s credit %s", ErrInvalidAmount, i, e.Debit, e.Credit)
		}
		for _, side := range []decimal.Decimal{e.Debit, e.Credit} {
			if !side.Shift(exp).IsInteger() {
				return fmt.Errorf("%w: entry %d: %s is finer than %s's minor unit", ErrInvalidAmount, i, side, t.Currency)
			}
		}
		debits, credits = debits.Add(e.Debit), credits.Add(e.Credit)
	}
	if !debits.Equal(credits) {
		return fmt.Errorf("%w: %s: debits %s, credits %s %s", ErrUnbalanced, t.Ref, debits, credits, t.Currency)
	}
	if r, ok := rules[t.Kind]; ok {
		if len(t.Entries) != 2 || t.Entries[0].Account != r.debit || !t.Entries[0].Debit.IsPositive() ||
			t.Entries[1].Account != r.credit || !t.Entries[1].Credit.IsPositive() {
			return fmt.Errorf("%w: %s must be Dr %s, Cr %s", ErrInvalidEntries, t.Kind, r.debit, r.credit)
		}
	}
	return nil
}

// sameContent reports how stored and posted differ in what the ledger means
// by "the same money movement": kind, currency, payment and entries, in any
// order, amounts compared by value. OccurredAt, PostedAt and EventID are
// deliberately not compared: a second event reporting the same movement is
// the normal duplicate. It returns "" when they are the same.
func sameContent(stored, posted Transaction) string {
	switch {
	case stored.Kind != posted.Kind:
		return fmt.Sprintf("kind: stored %s, posted %s", stored.Kind, posted.Kind)
	case stored.Currency != posted.Currency:
		return fmt.Sprintf("currency: stored %s, posted %s", stored.Currency, posted.Currency)
	case stored.PaymentID != posted.PaymentID:
		return fmt.Sprintf("payment: stored %q, posted %q", stored.PaymentID, posted.PaymentID)
	case stored.ExchangeRate.Valid != posted.ExchangeRate.Valid ||
		stored.ExchangeRate.Valid && !stored.ExchangeRate.Decimal.Equal(posted.ExchangeRate.Decimal):
		return fmt.Sprintf("exchange rate: stored %s, posted %s", rateText(stored), rateText(posted))
	}
	a, b := sortedEntries(stored.Entries), sortedEntries(posted.Entries)
	same := len(a) == len(b)
	for i := 0; same && i < len(a); i++ {
		same = a[i].Account == b[i].Account && a[i].Debit.Equal(b[i].Debit) && a[i].Credit.Equal(b[i].Credit)
	}
	if !same {
		return fmt.Sprintf("entries: stored %s, posted %s", describe(stored), describe(posted))
	}
	return ""
}

func sortedEntries(es []Entry) []Entry {
	out := slices.Clone(es)
	slices.SortFunc(out, func(x, y Entry) int {
		if c := strings.Compare(string(x.Account), string(y.Account)); c != 0 {
			return c
		}
		if c := x.Debit.Cmp(y.Debit); c != 0 {
			return c
		}
		return x.Credit.Cmp(y.Credit)
	})
	return out
}

func describe(t Transaction) string {
	parts := make([]string, 0, len(t.Entries))
	for _, e := range t.Entries {
		if e.Debit.IsPositive() {
			parts = append(parts, fmt.Sprintf("Dr %s %s", e.Account, Format(e.Debit, t.Currency)))
		} else {
			parts = append(parts, fmt.Sprintf("Cr %s %s", e.Account, Format(e.Credit, t.Currency)))
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func rateText(t Transaction) string {
	if !t.ExchangeRate.Valid {
		return "none"
	}
	return t.ExchangeRate.Decimal.String()
}
