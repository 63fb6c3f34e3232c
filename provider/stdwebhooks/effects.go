package stdwebhooks

import (
	"fmt"

	"github.com/paygate/paygate/provider"
)

// Effects implements provider.Mapper for every source: a generic sender's
// payload says nothing paygate can trust about payments or money, so each
// event is kept in the inbox, visible to ops, and ignored.
//
// It always fails with an error wrapping provider.ErrIgnored.
func Effects(payload []byte) (provider.Effects, error) {
	return provider.Effects{}, fmt.Errorf("%w: Standard Webhooks sources are stored, not mapped", provider.ErrIgnored)
}

// Mapper maps stored events of any source with Effects.
var Mapper provider.Mapper = provider.MapperFunc(Effects)
