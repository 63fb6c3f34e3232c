package stripe

import (
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v79/webhook"

	"github.com/paygate/paygate/provider"
)

// maxSignatures bounds the v1 entries read from one header, so a hostile
// header cannot make us compute thousands of comparisons.
const maxSignatures = 16

// SignatureHeader is a parsed Stripe-Signature header.
type SignatureHeader struct {
	Timestamp time.Time
	V1        [][]byte // every v1 signature, decoded from hex
}

// ParseSignatureHeader parses Stripe's "t=<unix>,v1=<hex>[,v1=<hex>…]" form.
// Unknown schemes (v0) are skipped, as Stripe's own libraries do.
//
// It fails with provider.ErrMissingSignature for an empty header and
// provider.ErrMalformedSignature when the timestamp or the v1 entries are missing.
// A v1 entry that is not 32 bytes of hex is dropped: it can match nothing.
func ParseSignatureHeader(header string) (SignatureHeader, error) {
	var h SignatureHeader
	if strings.TrimSpace(header) == "" {
		return h, provider.ErrMissingSignature
	}
	haveT, sawV1 := false, false
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return SignatureHeader{}, fmt.Errorf("%w: item without '='", provider.ErrMalformedSignature)
		}
		switch k {
		case "t":
			sec, err := strconv.ParseInt(v, 10, 64)
			if err != nil || sec <= 0 || haveT {
				return SignatureHeader{}, fmt.Errorf("%w: bad timestamp", provider.ErrMalformedSignature)
			}
			h.Timestamp, haveT = time.Unix(sec, 0), true
		case "v1":
			sawV1 = true
			if len(h.V1) == maxSignatures {
				return SignatureHeader{}, fmt.Errorf("%w: too many signatures", provider.ErrMalformedSignature)
			}
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != 32 {
				continue // a garbled entry matches nothing; another may still match
			}
			h.V1 = append(h.V1, sig)
		}
	}
	if !haveT {
		return SignatureHeader{}, fmt.Errorf("%w: no timestamp", provider.ErrMalformedSignature)
	}
	if !sawV1 {
		return SignatureHeader{}, fmt.Errorf("%w: no v1 signature", provider.ErrMalformedSignature)
	}
	return h, nil
}

// VerifySignature checks header against payload, the raw body exactly
// as received, for every secret (several during a rotation). The timestamp
// must be within tolerance of now in both directions: stripe-go only refuses
// old timestamps, but a future one is as much a replay risk. Comparisons are
// constant-time.
//
// It fails with the errors of ParseSignatureHeader, provider.ErrStaleTimestamp,
// provider.ErrFutureTimestamp, provider.ErrNotConfigured (no secrets) or provider.ErrInvalidSignature.
func VerifySignature(payload []byte, header string, secrets []string, now time.Time, tolerance time.Duration) error {
	if len(secrets) == 0 {
		return provider.ErrNotConfigured
	}
	h, err := ParseSignatureHeader(header)
	if err != nil {
		return err
	}
	switch age := now.Sub(h.Timestamp); {
	case age > tolerance:
		return provider.ErrStaleTimestamp
	case age < -tolerance:
		return provider.ErrFutureTimestamp
	}
	matched := false
	for _, secret := range secrets {
		expected := stripewebhook.ComputeSignature(h.Timestamp, payload, secret)
		for _, sig := range h.V1 {
			// No early exit: the time taken does not depend on which secret
			// or which signature matched.
			if hmac.Equal(expected, sig) {
				matched = true
			}
		}
	}
	if !matched {
		return provider.ErrInvalidSignature
	}
	return nil
}
