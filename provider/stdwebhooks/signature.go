package stdwebhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/paygate/paygate/provider"
)

// The headers of a Standard Webhooks request. Svix's own ("svix-id"…) are
// the same scheme under another brand; only these are read.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts every symmetric secret, as senders display them.
const SecretPrefix = "whsec_"

// maxSignatures bounds the entries read from one webhook-signature header,
// so a hostile header cannot make us compute thousands of comparisons. A
// sender puts one entry per key it signs with: two during a rotation.
const maxSignatures = 16

// ErrInvalidSecret: a configured secret is not "whsec_" followed by a
// non-empty key in padded standard base64.
var ErrInvalidSecret = errors.New("webhook secret is not whsec_ followed by standard base64")

// strictBase64 refuses non-zero padding bits, so a key or a signature has
// one spelling only.
var strictBase64 = base64.StdEncoding.Strict()

// ParseSecret returns the HMAC key of s, "whsec_<base64>".
//
// It fails with an error wrapping ErrInvalidSecret, which never shows s.
func ParseSecret(s string) ([]byte, error) {
	enc, ok := strings.CutPrefix(s, SecretPrefix)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: it does not start with %s", ErrInvalidSecret, SecretPrefix)
	case enc == "":
		return nil, fmt.Errorf("%w: nothing follows %s", ErrInvalidSecret, SecretPrefix)
	}
	// encoding/base64 silently skips CR and LF inside its input: a secret
	// pasted across lines would be accepted as some other key.
	for i := 0; i < len(enc); i++ {
		if !isBase64(enc[i]) {
			return nil, fmt.Errorf("%w: a character after %s is not in the base64 alphabet", ErrInvalidSecret, SecretPrefix)
		}
	}
	key, err := strictBase64.DecodeString(enc)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("%w: what follows %s is not padded standard base64", ErrInvalidSecret, SecretPrefix)
	}
	return key, nil
}

func isBase64(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '='
}

// Sign returns the webhook-signature header value, "v1,<base64>", that a
// sender holding secret puts on a request with webhook-id id,
// webhook-timestamp ts (in Unix seconds) and body.
//
// It fails with the errors of ParseSecret.
func Sign(id string, ts time.Time, body []byte, secret string) (string, error) {
	key, err := ParseSecret(secret)
	if err != nil {
		return "", err
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, strconv.FormatInt(ts.Unix(), 10), body)), nil
}

// mac is the HMAC-SHA256 of "<id>.<timestamp>.<body>": the id and the
// timestamp are signed with the body so that neither can be replayed with
// another.
func mac(key []byte, id, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	_, _ = io.WriteString(m, id)
	_, _ = io.WriteString(m, ".")
	_, _ = io.WriteString(m, timestamp)
	_, _ = io.WriteString(m, ".")
	_, _ = m.Write(body)
	return m.Sum(nil)
}

// Verify checks a request's three headers, id, timestamp and signature,
// against body, the raw body exactly as received, for every key of secrets
// (decoded with ParseSecret; several during a rotation). The timestamp must
// be within tolerance of now in both directions. It returns the timestamp.
//
// Every entry is compared with every key in constant time, with no early
// exit: how long a refusal takes says nothing about which key or entry came
// close. Entries of other versions (v1a, asymmetric) are skipped; a v1
// entry that is not 32 bytes of base64 can match nothing and is dropped, so
// another entry may still match.
//
// It fails with provider.ErrNotConfigured (no secrets),
// provider.ErrMissingSignature (a header empty), provider.ErrMalformedSignature
// (a timestamp that is not a non-negative decimal integer as strconv writes
// it, no v1 entry, more than 16 entries), provider.ErrStaleTimestamp,
// provider.ErrFutureTimestamp or provider.ErrInvalidSignature. The errors
// never show a header, a key or the body.
func Verify(id, timestamp, signature string, body []byte, secrets [][]byte, now time.Time, tolerance time.Duration) (time.Time, error) {
	if len(secrets) == 0 {
		return time.Time{}, provider.ErrNotConfigured
	}
	switch {
	case id == "":
		return time.Time{}, fmt.Errorf("%w: no %s", provider.ErrMissingSignature, HeaderID)
	case timestamp == "":
		return time.Time{}, fmt.Errorf("%w: no %s", provider.ErrMissingSignature, HeaderTimestamp)
	case strings.TrimSpace(signature) == "":
		return time.Time{}, fmt.Errorf("%w: no %s", provider.ErrMissingSignature, HeaderSignature)
	}
	ts, err := parseTimestamp(timestamp)
	if err != nil {
		return time.Time{}, err
	}
	sigs, err := parseSignatures(signature)
	if err != nil {
		return time.Time{}, err
	}
	switch age := now.Sub(ts); {
	case age > tolerance:
		return time.Time{}, provider.ErrStaleTimestamp
	case age < -tolerance:
		return time.Time{}, provider.ErrFutureTimestamp
	}
	matched := 0
	for _, key := range secrets {
		expected := mac(key, id, timestamp, body)
		for _, sig := range sigs {
			// No early exit: the time taken does not depend on which key or
			// which entry matched.
			matched |= subtle.ConstantTimeCompare(expected, sig)
		}
	}
	if matched != 1 {
		return time.Time{}, provider.ErrInvalidSignature
	}
	return ts, nil
}

// parseTimestamp reads webhook-timestamp. Only strconv's spelling is taken
// ("+1700000000" and "01700000000" are refused): the signed content holds
// the header's text, and a sender's library writes nothing else.
func parseTimestamp(s string) (time.Time, error) {
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 || strconv.FormatInt(sec, 10) != s {
		return time.Time{}, fmt.Errorf("%w: %s is not a decimal Unix time", provider.ErrMalformedSignature, HeaderTimestamp)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// parseSignatures returns the decoded v1 entries of a webhook-signature
// header, space-separated "<version>,<base64>" entries.
func parseSignatures(header string) ([][]byte, error) {
	var sigs [][]byte
	entries, sawV1 := 0, false
	for entry := range strings.FieldsSeq(header) {
		entries++
		if entries > maxSignatures {
			return nil, fmt.Errorf("%w: more than %d entries in %s", provider.ErrMalformedSignature, maxSignatures, HeaderSignature)
		}
		version, enc, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue // another scheme (v1a): not ours to check
		}
		sawV1 = true
		sig, err := strictBase64.DecodeString(enc)
		if err != nil || len(sig) != sha256.Size {
			continue // a garbled entry matches nothing; another may still match
		}
		sigs = append(sigs, sig)
	}
	if !sawV1 {
		return nil, fmt.Errorf("%w: no v1 entry in %s", provider.ErrMalformedSignature, HeaderSignature)
	}
	return sigs, nil
}
