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

// mappers are the providers whose events paygate maps, by inbox provider
// name. Any other name is a Standard Webhooks source without a mapping:
// its events are stored, shown to ops and ignored.
var mappers = map[string]provider.Mapper{
	stripe.Name: stripe.Mapper,
	adyen.Name:  adyen.Mapper,
}

// effectsOf maps a stored event with its provider's Mapper, or as a
// Standard Webhooks source's.
func effectsOf(ev inbox.Event) (Effects, error) {
	m, ok := mappers[ev.Provider]
	if !ok {
		m = stdwebhooks.Mapper
	}
	return m.Effects(ev.Payload)
}
