// Package provider is the seam between paygate's core and the payment
// providers that send it events. Each provider is one package below this one
// (provider/stripe, provider/adyen, provider/stdwebhooks) that owns
// everything specific to it: how its requests are authenticated, how its
// envelope is decoded into events and their dedupe keys, how its events map
// to facts and ledger postings, its currency exponents and its API calls.
//
// The core calls two small interfaces: the ingest path (package webhook)
// calls a Receiver to turn an HTTP request into events, and the worker
// (package jobs) calls a Mapper to turn a stored event into Effects. Neither
// the inbox, the state machine nor the ledger knows which provider an event
// came from beyond its name.
//
// This package must never know a provider's payload, nor import the inbox,
// the jobs or the HTTP layers.
package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/paygate/paygate/ledger"
	"github.com/paygate/paygate/statemachine"
)

// Event is one provider event as the inbox files it. The payload is kept
// byte for byte as received (for a batch, the bytes of its own item);
// everything else is decoded from the request.
type Event struct {
	// Provider is the inbox's provider name: "stripe", "adyen", or a
	// Standard Webhooks source's configured name.
	Provider string
	// ID is the dedupe key within Provider: the inbox keeps one event per
	// (Provider, ID), whatever the number of deliveries.
	ID         string
	Type       string
	Livemode   bool
	APIVersion string
	Created    time.Time
	Payload    []byte
	// Source is how the event reached paygate: empty (SourceWebhook) for
	// a delivered webhook, SourceAPI for one read from the provider's API
	// (the sweep's, reconciliation's), trusted by the authenticated call
	// rather than a signature.
	Source string
}

// The sources of an event, as the inbox stores them.
const (
	SourceWebhook = "webhook"
	SourceAPI     = "api"
)

// MaxIDLength bounds identifiers the inbox stores and indexes (event ids,
// types, versions). Providers' own are well under it.
const MaxIDLength = 255

// Answer is the body a provider expects once its events are committed.
type Answer struct {
	Status      int
	ContentType string
	Body        []byte
}

// Acknowledgement is the JSON body of a 200 answer that reports whether
// the event was new (Stripe's and Standard Webhooks' answer).
type Acknowledgement struct {
	Received  bool `json:"received"`
	Duplicate bool `json:"duplicate"`
}

// acknowledgements are the two JSON answers, encoded once: every webhook
// gets one of them.
var acknowledgements = func() (out [2][]byte) {
	for i, dup := range []bool{false, true} {
		body, _ := json.Marshal(Acknowledgement{Received: true, Duplicate: dup})
		out[i] = append(body, '\n')
	}
	return out
}()

// Acknowledge answers a one-event request 200
// {"received":true,"duplicate":…}.
func Acknowledge(duplicate []bool) Answer {
	body := acknowledgements[0]
	if len(duplicate) > 0 && duplicate[0] {
		body = acknowledgements[1]
	}
	return Answer{Status: http.StatusOK, ContentType: "application/json", Body: body}
}

// EventLister is a provider whose API lists the events it created, for
// the sweep that ingests those whose webhooks never arrived (Stripe's
// events list; PayPal's webhook events would be another). It is optional:
// a provider without such an API (Adyen) has none.
type EventLister interface {
	// Name is the inbox provider name of the events it lists.
	Name() string
	// Retention is how far back the list goes: a query from earlier
	// finds nothing more.
	Retention() time.Duration
	// ListEvents returns one page of the events created in [q.From,
	// q.To), newest first: one API request. Each event is decoded as the
	// inbox files it, with Source SourceAPI. It fails with an error
	// wrapping ErrAPI (and ErrAPIRefused when retrying cannot help).
	ListEvents(ctx context.Context, q EventQuery) (EventPage, error)
}

// EventQuery asks for one page of a provider's events list.
type EventQuery struct {
	// From and To bound the events' creation, [From, To), to the second.
	From, To time.Time
	// After is the cursor of the page before (EventPage.Next); empty for
	// the first page.
	After string
}

// EventPage is one page of a provider's events list.
type EventPage struct {
	Events []Event
	// Unreadable are the listed items the provider's decoding refused (as
	// the webhook path would refuse them), by id, with why: not stored.
	Unreadable []UnreadableEvent
	// Next is the cursor of the following page; empty on the last one.
	Next string
}

// UnreadableEvent is a listed item that is not an event paygate can store.
type UnreadableEvent struct {
	ID  string
	Err error
}

// Receiver authenticates and decodes the webhook requests of one provider
// (or one Standard Webhooks source). It is pure: no I/O, the clock given.
type Receiver interface {
	// Name is the inbox provider name of the events it returns.
	Name() string
	// Receive authenticates a request whose headers are header and whose
	// raw body, read whole, is body, and returns the events it delivers:
	// at least one, all of which must be committed together before the
	// request is answered (an Adyen batch is all or nothing).
	//
	// It fails with an error wrapping one of the request errors below:
	// ErrNotConfigured, ErrUnauthenticated, the signature errors, or
	// ErrNotAnEvent. Nothing is stored for a failed request.
	Receive(header http.Header, body []byte, now time.Time) ([]Event, error)
	// Acknowledge is the answer once every event is committed;
	// duplicate[i] reports that events[i] was already in the inbox.
	Acknowledge(events []Event, duplicate []bool) Answer
}

// Request errors: what a Receiver fails with. The HTTP layer's one error
// table answers them (400, 401 or 503), and nothing is stored.
var (
	// ErrNotConfigured: no secret or key is configured to check the
	// request with. The provider retries; the operator must configure one.
	ErrNotConfigured = errors.New("no webhook secret configured")
	// ErrUnauthenticated: the request's credentials (an Adyen item's HMAC,
	// its Basic auth) are missing or match no configured key.
	ErrUnauthenticated = errors.New("request not authenticated")
	// The signature errors of providers that sign the whole body with a
	// timestamp (Stripe, Standard Webhooks).
	ErrMissingSignature   = errors.New("missing signature header")
	ErrMalformedSignature = errors.New("malformed signature header")
	ErrStaleTimestamp     = errors.New("signature timestamp too old")
	ErrFutureTimestamp    = errors.New("signature timestamp in the future")
	ErrInvalidSignature   = errors.New("no signature matches any configured secret")
	// ErrNotAnEvent: the body is authentic (or not yet checked) but is not
	// an envelope of the provider's shape.
	ErrNotAnEvent = errors.New("body is not a provider event")
)

// DefaultTolerance is how far a signed timestamp may be from now, in either
// direction, for providers that sign one.
const DefaultTolerance = 300 * time.Second

// Effects is what one stored provider event means for paygate: the payment
// it concerns, the facts it reports and the money movements to post.
//
// The same money movement reported by two events (Stripe's
// payment_intent.succeeded and charge.succeeded; Adyen's REFUND and
// REFUND_FAILED) derives the same ledger ref from the provider's object ids,
// so it is posted once.
type Effects struct {
	PaymentID string // empty for movements that belong to no payment (payouts)
	Facts     []statemachine.Fact
	Postings  []ledger.Transaction
	// ReceiptEmail is where the customer's emails go. ReceiptEmailKnown is
	// set when the event carries the whole truth about the address (a
	// Stripe charge), or an address: only then is an empty address a known
	// "none".
	ReceiptEmail      string
	ReceiptEmailKnown bool
	// Details are the merchant's words about the payment the event
	// carries (statemachine.Reported: bounded, stamped with the event),
	// zero when it carries none.
	Details statemachine.Details
	// Refunds are the outcomes the event reports of refunds, for the
	// refund requests paygate made (named by the refund's metadata, or by
	// the refund id a request recorded).
	Refunds []RefundReport
	// Reports are the settlement reports the event announces, to be
	// downloaded and reconciled (Adyen's REPORT_AVAILABLE).
	Reports []ReportNotice
}

// ReportNotice is an event's word that a settlement batch's report can be
// downloaded: its file name (unique per provider), URL and batch.
type ReportNotice struct {
	FileName string
	URL      string
	Batch    int64
}

// RefundReport is an event's word on one refund's outcome.
type RefundReport struct {
	// Reference is the request id the refund carries under
	// RefundReferenceKey; empty when it carries none.
	Reference        string
	ProviderRefundID string
	Succeeded        bool // else failed
	FailureReason    string
}

// Mapper maps events, as stored in the inbox, to their effects. It is pure:
// no clock, no I/O, the same effects for the same payload every time.
type Mapper interface {
	// Effects fails with an error wrapping ErrIgnored for an event paygate
	// does not use, and with one wrapping ErrPermanent for data that can
	// never be applied (unreadable, missing ids or amounts, unknown
	// currencies).
	Effects(payload []byte) (Effects, error)
}

// MapperFunc adapts a function to Mapper.
type MapperFunc func(payload []byte) (Effects, error)

// Effects implements Mapper.
func (f MapperFunc) Effects(payload []byte) (Effects, error) { return f(payload) }

// Errors of a Mapper.
var (
	// ErrIgnored: an event type paygate does not use. The inbox marks it
	// ignored; it stays visible to ops.
	ErrIgnored = errors.New("event type not used")
	// ErrPermanent: a failure no retry can fix (an impossible amount, an
	// unknown currency, a ref conflict): the event becomes poison at once.
	ErrPermanent = errors.New("permanent failure")
)

// Validate checks effects as the state machine and the ledger will: a fact
// or a movement either would refuse can never be applied, so it is an
// error wrapping ErrPermanent here, where the mapping's contract promises
// it. Every Mapper calls it on what it returns.
func Validate(fx Effects) error {
	for _, f := range fx.Facts {
		if err := statemachine.Validate(f); err != nil {
			return fmt.Errorf("%w: %w", ErrPermanent, err)
		}
	}
	for _, t := range fx.Postings {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrPermanent, err)
		}
	}
	return nil
}

// StringValues keeps the string values of a JSON object, as its values'
// bytes: metadata whose values are strings by the provider's contract, of
// which nothing else is kept (and nothing refused).
func StringValues(obj map[string]json.RawMessage) map[string]string {
	var out map[string]string
	for k, raw := range obj {
		s, ok := JSONString(raw)
		if !ok {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(obj))
		}
		out[k] = s
	}
	return out
}

// JSONString reads a JSON value's bytes as a string; false when they are
// not one. Without escapes the text is the bytes between the quotes.
func JSONString(raw json.RawMessage) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}
