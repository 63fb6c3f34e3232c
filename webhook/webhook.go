// Package webhook receives provider webhooks: it verifies their signatures on
// the raw body, decodes just enough of the event to file it, and commits the
// raw event to the inbox together with its processing job before anyone is
// told "received".
//
// Providers deliver at least once, retry for days and promise no order, so
// the inbox dedupes on (provider, event_id) with a unique key and the
// database decides which copy is new. This package must never touch the
// ledger: applying an event is the process_event job's work.
package webhook

import "errors"

// ProviderStripe is the provider name stored in the inbox for Stripe events.
const ProviderStripe = "stripe"

// Sentinel errors of verification and decoding. Each is a client error: the
// request is answered 400 and nothing is stored.
var (
	ErrMissingSignature   = errors.New("missing signature header")
	ErrMalformedSignature = errors.New("malformed signature header")
	ErrStaleTimestamp     = errors.New("signature timestamp too old")
	ErrFutureTimestamp    = errors.New("signature timestamp in the future")
	ErrInvalidSignature   = errors.New("no signature matches any configured secret")
	ErrNotAnEvent         = errors.New("body is not a provider event")
)

// Sentinel errors of the ingest path that are not the client's fault.
var (
	ErrNotConfigured = errors.New("no webhook secret configured")
	ErrBodyTooLarge  = errors.New("body too large")
	ErrUnavailable   = errors.New("inbox unavailable")
)
