package stripe_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/paygate/paygate/internal/providertest"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
)

// TestConformance runs the providers' conformance suite against Stripe's
// Receiver: secrets secretA and secretB (a rotation).
func TestConformance(t *testing.T) {
	t.Parallel()
	secrets := map[int]string{0: secretA, 1: secretB, -1: "whsec_not_configured"}
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T, configured bool) provider.Receiver {
			if !configured {
				return stripe.NewReceiver(nil, 0)
			}
			return stripe.NewReceiver([]string{secretA, secretB}, 0)
		},
		Request: func(t *testing.T, key int, id string, at time.Time) (http.Header, []byte) {
			body := []byte(fmt.Sprintf(`{"id":"evt_%s","object":"event","type":"charge.succeeded","created":%d,"data":{"object":{"id":"ch_1"}}}`, id, at.Unix()))
			h := http.Header{}
			h.Set("Stripe-Signature", sign(t, body, secrets[key], at))
			return h, body
		},
		Tamper: func(t *testing.T, header http.Header, body []byte) (http.Header, []byte) {
			return header, bytes.Replace(body, []byte(`"ch_1"`), []byte(`"ch_2"`), 1)
		},
		Unsigned: func(t *testing.T, header http.Header, body []byte) (http.Header, []byte) {
			return http.Header{}, body
		},
		SignBody: func(t *testing.T, body []byte, at time.Time) http.Header {
			h := http.Header{}
			h.Set("Stripe-Signature", sign(t, body, secretA, at))
			return h
		},
		Timestamped: true,
	})
}
