package jobs

import (
	"github.com/paygate/paygate/inbox"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/provider/stdwebhooks"
	"github.com/paygate/paygate/provider/stripe"
)

// Effects is what one stored event means for paygate (see provider.Effects).
type Effects = provider.Effects

// ErrPermanent marks a failure that no retry can fix (an impossible amount,
// an unknown currency, a ref conflict): the event becomes poison at once.
var ErrPermanent = provider.ErrPermanent

// Mappers are the providers whose events paygate maps, by inbox provider
// name. Any other name is a Standard Webhooks source without a mapping:
// its events are stored, shown to ops and ignored.
type Mappers map[string]provider.Mapper

// NewMappers are the mappers of paygate's providers; stripeReferenceKey
// is the metadata key of a Stripe payment's order reference
// (PAYGATE_STRIPE_REFERENCE_KEY; stripe.DefaultReferenceKey when empty).
func NewMappers(stripeReferenceKey string) Mappers {
	return Mappers{
		stripe.Name: stripe.NewMapper(stripeReferenceKey),
		adyen.Name:  adyen.Mapper,
	}
}

// effectsOf maps a stored event with its provider's Mapper, or as a
// Standard Webhooks source's.
func (mappers Mappers) effectsOf(ev inbox.Event) (Effects, error) {
	if mappers == nil {
		mappers = NewMappers("")
	}
	m, ok := mappers[ev.Provider]
	if !ok {
		m = stdwebhooks.Mapper
	}
	return m.Effects(ev.Payload)
}
