package delivery

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// secretPrefix marks a Standard Webhooks symmetric secret, so a merchant
// (and a secret scanner) can tell what the string is.
const secretPrefix = "whsec_"

// The Standard Webhooks spec bounds HMAC secrets to 24..64 bytes; shorter
// is guessable, longer buys nothing over SHA-256's block.
const (
	minSecretBytes = 24
	maxSecretBytes = 64
	newSecretBytes = 32
)

var (
	// ErrInvalidSecret is returned for a signing secret that is not
	// "whsec_" followed by the standard base64 of 24 to 64 bytes.
	ErrInvalidSecret = errors.New("invalid signing secret")
	// ErrInvalidMessageID is returned for a message id the signature
	// scheme cannot carry unambiguously.
	ErrInvalidMessageID = errors.New("invalid message id")
)

// NewSecret returns a fresh signing secret: "whsec_" and the standard
// base64 of 32 random bytes. It fails only if the system's random source
// does.
func NewSecret() (string, error) {
	b := make([]byte, newSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("read random secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// DecodeSecret returns the HMAC key a "whsec_" secret carries. It returns
// ErrInvalidSecret for a missing prefix, bad base64, or a key shorter than
// 24 or longer than 64 bytes. The error never repeats the secret.
func DecodeSecret(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: missing %q prefix", ErrInvalidSecret, secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		// base64's error quotes an offset, not the input, so it is safe to keep.
		return nil, fmt.Errorf("%w: %w", ErrInvalidSecret, err)
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return nil, fmt.Errorf("%w: %d bytes, want %d to %d",
			ErrInvalidSecret, len(key), minSecretBytes, maxSecretBytes)
	}
	return key, nil
}

// Sign returns the webhook-signature header value for one message: a
// "v1,<base64 HMAC-SHA256>" entry per secret over "<msgID>.<unix
// seconds>.<body>", separated by single spaces. Pass the current secret
// first and the previous ones after it while a rotation is under way, so
// receivers holding either secret verify.
//
// It returns ErrInvalidSecret when secrets is empty or one does not
// decode, and ErrInvalidMessageID when msgID is empty, contains a '.'
// (the spec's delimiter, which would make two different messages sign the
// same content) or anything but visible ASCII (it travels in a header).
func Sign(secrets []string, msgID string, ts time.Time, body []byte) (string, error) {
	if err := checkMessageID(msgID); err != nil {
		return "", err
	}
	if len(secrets) == 0 {
		return "", fmt.Errorf("%w: no secrets", ErrInvalidSecret)
	}
	prefix := msgID + "." + strconv.FormatInt(ts.Unix(), 10) + "."
	sigs := make([]string, 0, len(secrets))
	for i, s := range secrets {
		key, err := DecodeSecret(s)
		if err != nil {
			return "", fmt.Errorf("decode secret %d: %w", i, err)
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(prefix))
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " "), nil
}

func checkMessageID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty", ErrInvalidMessageID)
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c == '.':
			return fmt.Errorf("%w: contains '.'", ErrInvalidMessageID)
		case c <= ' ' || c > '~':
			return fmt.Errorf("%w: byte %#x at %d is not visible ASCII", ErrInvalidMessageID, c, i)
		}
	}
	return nil
}
