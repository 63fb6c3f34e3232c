package stripe

import (
	"net/http"
	"time"

	"github.com/paygate/paygate/provider"
)

// Name is the inbox provider name of Stripe's events.
const Name = "stripe"

// Receiver authenticates Stripe's webhook requests (the Stripe-Signature
// header over the raw body) and decodes their one event each.
type Receiver struct {
	secrets   []string
	tolerance time.Duration
}

var _ provider.Receiver = (*Receiver)(nil)

// NewReceiver returns a Receiver accepting any of secrets (several during a
// rotation; none: every request fails with provider.ErrNotConfigured) with
// a timestamp within tolerance of now both ways (0: DefaultTolerance).
func NewReceiver(secrets []string, tolerance time.Duration) *Receiver {
	if tolerance <= 0 {
		tolerance = provider.DefaultTolerance
	}
	return &Receiver{secrets: secrets, tolerance: tolerance}
}

// Name implements provider.Receiver.
func (r *Receiver) Name() string { return Name }

// Receive implements provider.Receiver with VerifySignature, then
// DecodeEvent.
func (r *Receiver) Receive(header http.Header, body []byte, now time.Time) ([]provider.Event, error) {
	if err := VerifySignature(body, header.Get("Stripe-Signature"), r.secrets, now, r.tolerance); err != nil {
		return nil, err
	}
	ev, err := DecodeEvent(body)
	if err != nil {
		return nil, err
	}
	return []provider.Event{ev}, nil
}

// Acknowledgement is the body of Stripe's 200 answer.
type Acknowledgement = provider.Acknowledgement

// Acknowledge implements provider.Receiver: 200
// {"received":true,"duplicate":…}.
func (r *Receiver) Acknowledge(_ []provider.Event, duplicate []bool) provider.Answer {
	return provider.Acknowledge(duplicate)
}

// Mapper maps stored Stripe events with Effects (references under
// DefaultReferenceKey; NewMapper for another key).
var Mapper provider.Mapper = provider.MapperFunc(Effects)
