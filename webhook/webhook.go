// Package webhook is the ingest path every provider's webhooks share: it
// reads the raw body within its bound, has the provider's Receiver
// authenticate and decode it, and commits the raw events to the inbox
// together with their processing jobs before anyone is told "received".
//
// Providers deliver at least once, retry for days and promise no order, so
// the inbox dedupes on (provider, event_id) with a unique key and the
// database decides which copy is new. This package must never know a
// provider's payload (package provider/… does) nor touch the ledger:
// applying an event is the work of its job (jobs: apply_events).
package webhook

import (
	"errors"

	"github.com/paygate/paygate/provider"
)

// Event is one provider event as the inbox files it.
type Event = provider.Event

// DefaultTolerance is how far a signed timestamp may be from now, in
// either direction.
const DefaultTolerance = provider.DefaultTolerance

// Sentinel errors of authentication and decoding, as the providers' Receivers
// return them. Each is a client error: nothing is stored.
var (
	ErrMissingSignature   = provider.ErrMissingSignature
	ErrMalformedSignature = provider.ErrMalformedSignature
	ErrStaleTimestamp     = provider.ErrStaleTimestamp
	ErrFutureTimestamp    = provider.ErrFutureTimestamp
	ErrInvalidSignature   = provider.ErrInvalidSignature
	ErrUnauthenticated    = provider.ErrUnauthenticated
	ErrNotAnEvent         = provider.ErrNotAnEvent
)

// Sentinel errors of the ingest path that are not the client's fault, or
// not about its body.
var (
	ErrNotConfigured = provider.ErrNotConfigured
	ErrUnknownSource = errors.New("no Standard Webhooks source of that name is configured")
	ErrBodyTooLarge  = errors.New("body too large")
	ErrUnavailable   = errors.New("inbox unavailable")
)
