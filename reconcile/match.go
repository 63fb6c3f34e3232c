package reconcile

import (
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/provider"
)

// TypeFee is the Type of the line that carries a record's fee (and of a
// ledger-only fee transaction).
const TypeFee = "fee"

// Line is one thing a provider record asks of the ledger (its movement, or
// its fee) with the record it comes from. The provider derived it from the
// record alone (see provider.StatementLine).
type Line struct {
	BT BalanceTransaction
	provider.StatementLine
}

// LinesOf pairs a record with the lines the provider derived from it.
func LinesOf(bt BalanceTransaction, lines []provider.StatementLine) []Line {
	out := make([]Line, len(lines))
	for i, l := range lines {
		out[i] = Line{BT: bt, StatementLine: l}
	}
	return out
}

// fee reports a line that carries a fee: posted from the provider's data
// when missing, and never the movement a fee belongs to.
func (l Line) fee() bool { return l.Post && l.Kind == ledger.KindFee }

// money converts signed minor units to a decimal at the currency's scale. A
// currency the ledger does not know is kept in minor units, so the value
// stays visible rather than guessed.
func money(minor int64, currency string) decimal.Decimal {
	abs := minor
	if abs < 0 {
		abs = -abs
	}
	d, err := ledger.FromMinor(abs, currency)
	if err != nil {
		d = decimal.New(abs, 0)
	}
	if minor < 0 {
		return d.Neg()
	}
	return d
}

// Effect is a ledger transaction's effect on provider_balance (debits −
// credits): the provider's sign convention, positive when money comes into
// the provider balance. A transaction that does not touch provider_balance
// reports its Amount().
func Effect(tx ledger.Transaction) decimal.Decimal {
	sum, touched := decimal.Zero, false
	for _, e := range tx.Entries {
		if e.Account == ledger.AccountProviderBalance {
			sum = sum.Add(e.Debit).Sub(e.Credit)
			touched = true
		}
	}
	if !touched {
		return tx.Amount()
	}
	return sum
}

func ptr(d decimal.Decimal) *decimal.Decimal { return &d }

// Compare judges one line against the ledger transaction with its ref (nil
// when the ledger has none). A missing fee comes back as
// StatusMissingInLedger like anything else; the runner posts it and turns
// the item into StatusFeePosted.
func Compare(l Line, tx *ledger.Transaction) Item {
	it := Item{
		ProviderTxnID:     l.BT.ID,
		SourceID:          l.BT.SourceID,
		Ref:               l.Ref,
		Type:              l.Type,
		ReportingCategory: l.BT.ReportingCategory,
		Currency:          l.BT.Currency,
		ProviderAmount:    ptr(money(l.Amount, l.BT.Currency)),
	}
	if l.FeeColumn != nil {
		it.ProviderFee = ptr(money(*l.FeeColumn, l.BT.Currency))
	}
	if tx == nil || l.Ref == "" {
		it.Status = StatusMissingInLedger
		return it
	}
	it.LedgerCurrency = tx.Currency
	it.LedgerAmount = ptr(Effect(*tx))
	it.PaymentID = tx.PaymentID
	switch {
	case tx.Currency != l.BT.Currency:
		it.Status = StatusCurrencyMismatch
	case !it.ProviderAmount.Abs().Equal(tx.Amount()):
		it.Status = StatusAmountMismatch
	default:
		it.Status = StatusMatched
	}
	return it
}

// FeeTransaction is the ledger transaction that records a fee line the
// ledger lacks: a fee (Dr fees, Cr provider_balance) when the provider
// charged it, an adjustment the other way round when it refunded it (a won
// dispute returns its fee). paymentID ties it to the payment of the movement
// it belongs to, when the ledger knows that movement; postedBy (PostedBy of
// the run) goes where a webhook's posting keeps its event id, so the ledger
// says which run booked the fee.
func FeeTransaction(l Line, paymentID, postedBy string) ledger.Transaction {
	amount := money(l.Amount, l.BT.Currency)
	if amount.IsNegative() {
		return ledger.NewFee(l.Ref, paymentID, postedBy, l.BT.Currency, amount.Neg(), l.BT.Created)
	}
	return ledger.Transaction{
		Ref: l.Ref, Kind: ledger.KindAdjustment, Currency: l.BT.Currency, OccurredAt: l.BT.Created,
		PaymentID: paymentID, EventID: postedBy,
		Entries: []ledger.Entry{
			ledger.Debit(ledger.AccountProviderBalance, amount),
			ledger.Credit(ledger.AccountFees, amount),
		},
	}
}

// Posting is the ledger transaction that records a line the ledger lacks
// and learns from the statement alone (Line.Post): a fee (FeeTransaction),
// or a settlement batch's payout from the provider balance to the bank
// (or its reversal, money the bank sent back).
func Posting(l Line, paymentID, postedBy string) ledger.Transaction {
	amount := money(l.Amount, l.BT.Currency).Abs()
	switch l.Kind {
	case ledger.KindPayout:
		return ledger.NewPayout(l.Ref, postedBy, l.BT.Currency, amount, l.BT.Created)
	case ledger.KindPayoutReversal:
		return ledger.NewPayoutReversal(l.Ref, postedBy, l.BT.Currency, amount, l.BT.Created)
	}
	return FeeTransaction(l, paymentID, postedBy)
}

// PostedBy is the mark a run leaves on the fees it posts (in the ledger
// transaction's event id): a retried attempt of the run recognises the fees
// its earlier attempt posted and still reports them fee_posted.
func PostedBy(runID int64) string { return fmt.Sprintf("reconciliation_run:%d", runID) }

// categoryOfKind is the reporting category a ledger-only transaction falls
// under in the report.
func categoryOfKind(tx ledger.Transaction) string {
	switch tx.Kind {
	case ledger.KindCapture:
		return "charge"
	case ledger.KindRefund:
		return "refund"
	case ledger.KindRefundReversal:
		return "refund_failure"
	case ledger.KindDisputeWithdrawal:
		return "dispute"
	case ledger.KindDisputeReinstatement:
		return "dispute_reversal"
	case ledger.KindPayout:
		return "payout"
	case ledger.KindPayoutReversal:
		return "payout_reversal"
	case ledger.KindFee:
		return "fee"
	}
	for _, e := range tx.Entries {
		if e.Account == ledger.AccountFees {
			return "fee" // a refunded fee (see FeeTransaction)
		}
	}
	return "other_adjustment"
}

// LedgerOnly is the item of a ledger transaction no provider record claims.
// Its Type is the ledger kind ("fee" for fees), since there is no provider
// record to name one.
func LedgerOnly(tx ledger.Transaction) Item {
	return Item{
		Status:            StatusMissingAtProvider,
		Ref:               tx.Ref,
		Type:              string(tx.Kind),
		ReportingCategory: categoryOfKind(tx),
		Currency:          tx.Currency,
		LedgerCurrency:    tx.Currency,
		LedgerAmount:      ptr(Effect(tx)),
		PaymentID:         tx.PaymentID,
	}
}

// TimingDifference is a ledger transaction of the day whose provider record
// is on another day: not an item of this run (the provider's day matches
// it), but listed so that the day's ledger totals can be explained.
type TimingDifference struct {
	Ref              string    `json:"ref"`
	LedgerOccurredAt time.Time `json:"ledger_occurred_at"`
	ProviderTxnID    string    `json:"provider_txn_id"`
	ProviderCreated  time.Time `json:"provider_created"`
}
