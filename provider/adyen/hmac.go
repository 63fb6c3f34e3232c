package adyen

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/paygate/paygate/provider"
)

// ErrInvalidConfig: an HMAC key or the Basic auth credentials given to
// ParseKeys or NewReceiver cannot be used. Its messages never hold a key
// or a password.
var ErrInvalidConfig = errors.New("invalid Adyen webhook configuration")

// KeyLength is the length of the HMAC keys Adyen's Customer Area
// generates: 32 bytes, shown as 64 hex digits.
const KeyLength = 32

// signatureField is the additionalData entry that carries an item's HMAC.
const signatureField = "hmacSignature"

// Sign returns the signature Adyen puts in an item's
// additionalData.hmacSignature: the base64 (standard, padded) HMAC-SHA256
// of it.SigningString() under key, the key's raw bytes (hex-decoded from
// what the Customer Area shows).
func Sign(it Item, key []byte) string {
	return base64.StdEncoding.EncodeToString(itemMAC(it.SigningString(), key))
}

func itemMAC(data string, key []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// Verify checks it's additionalData.hmacSignature against every key (more
// than one during a rotation). Every key is tried whatever matched before,
// and each comparison is constant-time, so the time taken does not tell
// which key matched or how much of a signature was right. Empty keys are
// skipped: anyone can compute an HMAC under an empty key.
//
// It fails with provider.ErrNotConfigured when no key is usable, and with
// an error wrapping provider.ErrUnauthenticated when the signature is
// missing, not a string, or matches no key.
func Verify(it Item, keys [][]byte) error {
	usable := 0
	for _, k := range keys {
		if len(k) > 0 {
			usable++
		}
	}
	if usable == 0 {
		return provider.ErrNotConfigured
	}
	sig, _ := it.AdditionalData[signatureField].(string)
	if sig == "" {
		return fmt.Errorf("%w: no additionalData.%s", provider.ErrUnauthenticated, signatureField)
	}
	data := it.SigningString()
	// Adyen's libraries compare the base64 text, so must we: decoding
	// first would accept other spellings of the same bytes.
	got := []byte(sig)
	want := make([]byte, base64.StdEncoding.EncodedLen(sha256.Size))
	matched := 0
	for _, k := range keys {
		if len(k) == 0 {
			continue
		}
		base64.StdEncoding.Encode(want, itemMAC(data, k))
		matched |= subtle.ConstantTimeCompare(want, got)
	}
	if matched != 1 {
		return fmt.Errorf("%w: additionalData.%s matches no configured key", provider.ErrUnauthenticated, signatureField)
	}
	return nil
}

// ParseKeys reads PAYGATE_ADYEN_HMAC_KEYS: comma-separated HMAC keys in
// hex, as the Customer Area shows them (either case, spaces around a key
// ignored), during a rotation the new and the old one. An empty or
// all-blank csv is no keys (nil): the receiver then answers every request
// provider.ErrNotConfigured.
//
// It fails with an error wrapping ErrInvalidConfig that names the key's
// position, never its text, when a key is empty (",,"), not hex, or not
// KeyLength bytes long (a key cut short when copied would match nothing,
// and the fault would only show as every webhook refused).
func ParseKeys(csv string) ([][]byte, error) {
	if strings.TrimSpace(csv) == "" {
		return nil, nil
	}
	parts := strings.Split(csv, ",")
	keys := make([][]byte, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		n := i + 1
		if p == "" {
			return nil, fmt.Errorf("%w: HMAC key %d of %d is empty", ErrInvalidConfig, n, len(parts))
		}
		key, err := hex.DecodeString(p)
		if err != nil {
			return nil, fmt.Errorf("%w: HMAC key %d of %d is not hex", ErrInvalidConfig, n, len(parts))
		}
		if len(key) != KeyLength {
			return nil, fmt.Errorf("%w: HMAC key %d of %d is %d bytes, not %d (%d hex digits)",
				ErrInvalidConfig, n, len(parts), len(key), KeyLength, 2*KeyLength)
		}
		keys = append(keys, key)
	}
	return keys, nil
}
