// Package ledger owns paygate's append-only, double-entry ledger: the
// ledger_transactions and ledger_entries tables and their invariants,
// posting, currency exponents, balances and the trial balance; and the
// books finance keeps over it: the periods it closes (ledger_books,
// ledger_periods), the balance snapshot the trial balance as of an instant
// reads (balance_snapshot.go), and the journal exports.
//
// It must never know about providers: it sees currencies, accounts, kinds of
// money movement and payment ids as opaque strings. Turning a provider's
// event into a Transaction is the worker's job; the constructors below exist
// so that the worker never writes entries by hand.
//
// # Why it looks like this
//
// Providers deliver events at least once and in any order, so the same money
// movement reaches PostTx more than once. Every Transaction carries a Ref,
// unique in the database, derived by the caller from the movement itself
// (not from the event that reported it). Posting is INSERT … ON CONFLICT DO
// NOTHING: the database, not a check-then-act in Go, decides which copy
// wins, and a later copy with the same content is a no-op. A later copy with
// different content is a bug or a provider inconsistency and is refused
// with ErrRefConflict rather than silently ignored.
//
// The ledger is append-only: triggers refuse UPDATE, DELETE and TRUNCATE on
// both tables, and a deferred constraint trigger refuses, at commit, a
// transaction whose entries do not balance per currency, that has no
// entries, or that gains entries after it was posted. A mistake is corrected
// by posting a new, reversing transaction. Go validates the same rules first
// so that the caller gets a sentinel error instead of a failed commit; the
// triggers are the backstop for anything that bypasses this package.
//
// Amounts are shopspring/decimal values in the currency's major unit (360.00
// USD, 1000 JPY, 1.234 KWD), stored as NUMERIC at the currency's scale.
// Providers speak minor units; FromMinor and ToMinor convert exactly with the
// currency's exponent. There are no floats anywhere.
//
// # Closed periods
//
// A transaction keeps OccurredAt, the date the money moved, and is posted
// at PostedAt: OccurredAt, unless that falls in a month finance closed,
// then the first instant of the first open month. Closes move one
// boundary (ledger_books.closed_through) forward, a month at a time; every
// posting reads it FOR SHARE and a close locks it FOR UPDATE before
// computing the month's trial balance, so a posting racing a close is in
// that balance or posted after the boundary. A trigger (ENABLE ALWAYS)
// refuses any row posted behind the boundary, whoever inserts it.
//
// # Chart of accounts
//
//	account             type           holds
//	provider_balance    asset          money held for us at the provider
//	payouts_in_transit  asset          money paid out by the provider, not yet confirmed by the bank
//	bank                asset          money settled in our bank account (posted by adjustment today)
//	sales               revenue        captured payments
//	refunds             contra-revenue money given back to customers
//	dispute_losses      expense        money withdrawn by disputes
//	fees                expense        the provider's fees
//	fx_clearing         clearing       conversions into the settlement currency, in both currencies
//	reconciliation_adjustments
//	                    gain or loss   differences with the provider's statement that finance wrote off
//
// An account's balance is debits − credits: positive for assets and
// expenses in the normal case, negative for revenue.
//
// # Posting rules
//
// Every kind except adjustment has exactly two entries of the same amount:
//
//	kind                   debit               credit
//	capture                provider_balance    sales
//	refund                 refunds             provider_balance
//	refund_reversal        provider_balance    refunds              (a refund that failed after succeeding)
//	dispute_withdrawal     dispute_losses      provider_balance
//	dispute_reinstatement  provider_balance    dispute_losses
//	payout                 payouts_in_transit  provider_balance
//	payout_reversal        provider_balance    payouts_in_transit   (payout failed)
//	fee                    fees                provider_balance
//	adjustment             the entries given, any accounts of the chart, balanced
//
// The New… constructors build a transaction by its kind's rule. They do not
// validate; PostTx (or Transaction.Validate) does, so a zero amount, which
// moves no money and is not a transaction, comes back as ErrInvalidAmount.
//
// A refund that fails after succeeding keeps its refund transaction and gains
// a refund_reversal; whichever report arrives first, both end up posted once.
//
// # Settlement in another currency
//
// A movement the provider books in its balance in another currency than the
// one it was presented in is converted by two adjustments (NewSettlement),
// one per currency and each balanced in its own: the presentment amount
// leaves provider_balance for fx_clearing, the settlement amount enters
// provider_balance from fx_clearing, both with the provider's ExchangeRate.
// provider_balance then holds each currency as the provider's balance does.
package ledger
