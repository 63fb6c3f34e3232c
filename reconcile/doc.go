// Package reconcile owns the daily reconciliation: it compares one UTC day
// of the provider's balance transactions with the ledger, recovers the
// provider's events that never reached the inbox, posts the provider fees the
// ledger lacks, and keeps every run and its items, append-only, for finance
// (JSON and CSV reports).
//
// It must never post to the ledger except through package ledger (fees are
// ledger.NewFee transactions keyed by the balance transaction id, so posting
// is idempotent across re-runs), never know HTTP, and never apply an event
// itself: recovered events go through the normal ingest path (an Ingester,
// the same inbox insert + apply_events job the webhook handler commits).
//
// # Why it looks like this
//
// Stripe delivers webhooks at least once, but "at least once" has holes: an
// endpoint that was down for longer than Stripe retries, an event Stripe
// never created, a fee that no webhook ever reports, a bug that posted the
// wrong amount. The provider's balance transactions are the record of what
// actually moved in the provider balance, so each one is matched by an exact
// key to the ledger transaction the worker derives for the same movement:
//
//	balance transaction (type / reporting_category)   ledger ref
//	charge (charge, payment)                          stripe:charge:<source>:capture
//	refund (refund, payment_refund)                   stripe:refund:<source>
//	refund_failure                                    stripe:refund:<source>:reversal
//	dispute (adjustment)                              stripe:dispute:<source>:withdrawal
//	dispute_reversal (adjustment)                     stripe:dispute:<source>:reinstatement
//	payout                                            stripe:payout:<source>
//	payout_reversal (payout_failure)                  stripe:payout:<source>:reversal
//	fee (stripe_fee), and the fee of any of the above stripe:fee:<balance transaction id>
//
// The ledger is looked up by ref wherever it dated the movement (a capture
// posted at 23:59:59 from the charge's creation time can be on the provider's
// next day). Ledger transactions of the day that no provider record of the
// day claimed are looked for at the provider before they are reported
// missing_at_provider: first in its records of the hour past each edge of
// the day (Config.TimingWindow; one list, not a request each), then, for
// the few neither answers, by their source object or balance transaction.
// A record the provider booked on another day (a payout created before
// midnight and booked after it) is a timing difference, listed in the
// report and matched by that day's run, not an item of this one.
//
// A run costs the same number of queries, transactions and provider
// requests however large the day, but for the list pages (a request per
// 100 records) and a statement per thousand refs or events: the inbox
// statuses of the listed events, the ledger refs the records need, and the
// fees and conversions to post are each handled as one set. Stripe's rate
// limits are waited out by the provider's client (provider/stripe).
//
// Amounts are decimals in the currency's major unit, converted from the
// provider's minor units with ledger.FromMinor; no floats.
package reconcile
