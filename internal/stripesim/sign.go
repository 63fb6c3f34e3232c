package stripesim

import (
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"
)

// SignatureHeader is the header Stripe signs webhook deliveries in.
const SignatureHeader = "Stripe-Signature"

// v0Secret signs the v0 signature. Stripe adds a v0 to test-mode deliveries
// made with a secret nobody has, so a receiver must ignore it.
const v0Secret = "whsec_stripesim_v0_nobody_has_this"

// SignOpts shapes a Stripe-Signature header beyond its single v1.
type SignOpts struct {
	// ExtraSecrets adds one more v1 per secret, as Stripe does while an
	// endpoint's secret is being rolled and both are valid.
	ExtraSecrets []string
	// V0 appends the v0 signature Stripe sends with test-mode events.
	V0 bool
}

// SignedRequest returns the Stripe-Signature header value Stripe would send
// with payload at time at: "t=<unix>,v1=<hex HMAC-SHA256 of "t.payload">".
func SignedRequest(payload []byte, secret string, at time.Time) string {
	return Sign(payload, secret, at, nil)
}

// Sign is SignedRequest with the extra signatures opts asks for. The
// signature itself is stripe-go's webhook.ComputeSignature, so it matches
// what webhook.ConstructEvent verifies.
func Sign(payload []byte, secret string, at time.Time, opts *SignOpts) string {
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(strconv.FormatInt(at.Unix(), 10))
	v1 := func(secret string) {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(webhook.ComputeSignature(at, payload, secret)))
	}
	v1(secret)
	if opts != nil {
		for _, s := range opts.ExtraSecrets {
			v1(s)
		}
		if opts.V0 {
			b.WriteString(",v0=")
			b.WriteString(hex.EncodeToString(webhook.ComputeSignature(at, payload, v0Secret)))
		}
	}
	return b.String()
}
