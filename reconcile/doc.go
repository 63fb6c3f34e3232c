// Package reconcile owns reconciliation: it compares a provider's statement
// with the ledger, posts the fees (and a settlement batch's payout) the
// ledger lacks, and keeps every run and its items, append-only, for finance
// (JSON and CSV reports), with finance's resolution of each exception
// (resolution.go: written once, audited; a write-off posts the difference
// as a ledger adjustment). A statement is either one UTC day of a
// provider's balance transactions, read from its API (Stripe: Provider),
// or one settlement batch, read from the report the provider wrote when
// the batch paid out (Adyen: Batches), whose file this package keeps as
// downloaded (StoreReportTx).
//
// It knows no provider: each supplies its statement, and derives the lines
// of each record of it (the ledger ref of the movement, the fee), through
// the seam (Provider, Batches, provider.StatementLine). The matcher, the
// item statuses, the postings, the runs and their reports are the same
// for every provider.
//
// It must never post to the ledger except through package ledger (fees are
// ledger.NewFee transactions keyed by the provider's ref, and write-offs
// adjustments keyed by the movement's, so posting is idempotent across
// re-runs), never know HTTP, and never apply an event
// itself: recovered events go through the normal ingest path (an Ingester,
// the same inbox insert + apply_events job the webhook handler commits).
//
// # Why it looks like this
//
// Providers deliver webhooks at least once, but "at least once" has holes:
// an endpoint that was down for longer than the provider retries, an event
// never created, a fee that no webhook ever reports, a bug that posted the
// wrong amount. The provider's statement is the record of what actually
// moved in the provider balance, so each of its records is matched by an
// exact key to the ledger transaction the worker derives for the same
// movement (provider/stripe and provider/adyen spell both sides).
//
// A day's run looks the ledger up by ref wherever it dated the movement (a
// capture posted at 23:59:59 from the charge's creation time can be on the
// provider's next day). Ledger transactions of the day that no provider
// record of the day claimed are looked for at the provider before they are
// reported missing_at_provider: first in its records of the hour past each
// edge of the day (Config.TimingWindow; one list, not a request each),
// then, for the few neither answers, by their source object or balance
// transaction. A record the provider booked on another day (a payout
// created before midnight and booked after it) is a timing difference,
// listed in the report and matched by that day's run, not an item of this
// one.
//
// A batch's run matches the batch's records the same way and checks each
// payout of the batch against the sum of the nets it paid out in its
// currency. A batch is not a period of the ledger, so nothing is
// missing_at_provider in it.
//
// A run costs the same number of queries, transactions and provider
// requests however large the day, but for the list pages (a request per
// 100 records) and a statement per thousand refs or events: the inbox
// statuses of the listed events, the ledger refs the records need, and the
// fees and conversions to post are each handled as one set. Rate limits
// are waited out by the provider's client.
//
// Amounts are decimals in the currency's major unit, converted from the
// provider's minor units with ledger.FromMinor; no floats.
package reconcile
