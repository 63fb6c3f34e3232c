package webhook_test

import (
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v79/webhook"
)

// The Stripe secrets the handler tests configure: two, as during a rotation.
const (
	secretA = "whsec_test_current"
	secretB = "whsec_test_previous"
)

// sign signs body as Stripe does, with stripe-go's own test signer.
func sign(t testing.TB, body []byte, secret string, at time.Time) string {
	t.Helper()
	return stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{
		Payload: body, Secret: secret, Timestamp: at,
	}).Header
}
