package stdwebhooks_test

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stdwebhooks"
)

var (
	// Keys as senders generate them: 24 random bytes.
	secretA = "whsec_" + base64.StdEncoding.EncodeToString([]byte("paygate-test-secret-AAAA"))
	secretB = "whsec_" + base64.StdEncoding.EncodeToString([]byte("paygate-test-secret-BBBB"))
	secretC = "whsec_" + base64.StdEncoding.EncodeToString([]byte("paygate-test-secret-CCCC"))
)

var body = []byte(`{"type":"payment.succeeded","timestamp":"2027-01-15T08:00:00Z","data":{"id":"pay_1","amount":1000}}`)

const msgID = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"

func sign(t testing.TB, id string, at time.Time, body []byte, secret string) string {
	t.Helper()
	sig, err := stdwebhooks.Sign(id, at, body, secret)
	require.NoError(t, err)
	return sig
}

func keys(t testing.TB, secrets ...string) [][]byte {
	t.Helper()
	out := make([][]byte, 0, len(secrets))
	for _, s := range secrets {
		k, err := stdwebhooks.ParseSecret(s)
		require.NoError(t, err)
		out = append(out, k)
	}
	return out
}

func unix(at time.Time) string { return strconv.FormatInt(at.Unix(), 10) }

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	ts := unix(now)
	valid := sign(t, msgID, now, body, secretA)
	garbage := "v1,!!not-base64!!"
	v1a := "v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg=="
	tooMany := strings.TrimSpace(strings.Repeat(sign(t, msgID, now, body, secretC)+" ", 16) + valid)
	sixteen := strings.TrimSpace(strings.Repeat(sign(t, msgID, now, body, secretC)+" ", 15) + valid)

	tests := []struct {
		name      string
		id        string
		timestamp string
		signature string
		body      []byte
		secrets   []string
		want      error
	}{
		{"valid", msgID, ts, valid, body, []string{secretA}, nil},
		{"rotated: first secret signs", msgID, ts, valid, body, []string{secretA, secretB}, nil},
		{"rotated: second secret signs", msgID, ts, sign(t, msgID, now, body, secretB), body, []string{secretA, secretB}, nil},
		{"several entries, the last valid", msgID, ts, sign(t, msgID, now, body, secretC) + " " + valid, body, []string{secretA}, nil},
		{"several entries, the first valid", msgID, ts, valid + " " + sign(t, msgID, now, body, secretC), body, []string{secretA}, nil},
		{"sender rotating: both keys sign", msgID, ts, sign(t, msgID, now, body, secretB) + " " + valid, body, []string{secretA}, nil},
		{"v1a entry skipped, v1 valid", msgID, ts, v1a + " " + valid, body, []string{secretA}, nil},
		{"garbage base64 next to a valid entry", msgID, ts, garbage + " " + valid, body, []string{secretA}, nil},
		{"extra blanks between entries", msgID, ts, "  " + garbage + "   " + valid + " ", body, []string{secretA}, nil},
		{"sixteen entries, the last valid", msgID, ts, sixteen, body, []string{secretA}, nil},
		{"wrong key", msgID, ts, sign(t, msgID, now, body, secretC), body, []string{secretA, secretB}, provider.ErrInvalidSignature},
		{"tampered body", msgID, ts, valid, []byte(strings.Replace(string(body), "1000", "9000", 1)), []string{secretA}, provider.ErrInvalidSignature},
		{"re-serialized body", msgID, ts, valid, []byte(strings.ReplaceAll(string(body), ":", ": ")), []string{secretA}, provider.ErrInvalidSignature},
		{"tampered id", msgID + "x", ts, valid, body, []string{secretA}, provider.ErrInvalidSignature},
		{"tampered timestamp", msgID, unix(now.Add(time.Second)), valid, body, []string{secretA}, provider.ErrInvalidSignature},
		// The same signed bytes split elsewhere: only a timestamp a tenth
		// of the real one can result, far out of tolerance.
		{"id and timestamp split at another dot", msgID + "." + ts[:1], ts[1:], valid, body, []string{secretA}, provider.ErrStaleTimestamp},
		{"stale", msgID, unix(now.Add(-301 * time.Second)), sign(t, msgID, now.Add(-301*time.Second), body, secretA), body, []string{secretA}, provider.ErrStaleTimestamp},
		{"just within, past", msgID, unix(now.Add(-300 * time.Second)), sign(t, msgID, now.Add(-300*time.Second), body, secretA), body, []string{secretA}, nil},
		{"future", msgID, unix(now.Add(301 * time.Second)), sign(t, msgID, now.Add(301*time.Second), body, secretA), body, []string{secretA}, provider.ErrFutureTimestamp},
		{"just within, future", msgID, unix(now.Add(300 * time.Second)), sign(t, msgID, now.Add(300*time.Second), body, secretA), body, []string{secretA}, nil},
		{"stale, even unsigned", msgID, "1", valid, body, []string{secretA}, provider.ErrStaleTimestamp},
		{"missing id", "", ts, valid, body, []string{secretA}, provider.ErrMissingSignature},
		{"missing timestamp", msgID, "", valid, body, []string{secretA}, provider.ErrMissingSignature},
		{"missing signature", msgID, ts, "", body, []string{secretA}, provider.ErrMissingSignature},
		{"blank signature", msgID, ts, "   ", body, []string{secretA}, provider.ErrMissingSignature},
		{"timestamp not a number", msgID, "abc", valid, body, []string{secretA}, provider.ErrMalformedSignature},
		{"timestamp with a fraction", msgID, ts + ".0", valid, body, []string{secretA}, provider.ErrMalformedSignature},
		{"timestamp in milliseconds, overflowing", msgID, "99999999999999999999", valid, body, []string{secretA}, provider.ErrMalformedSignature},
		{"timestamp with a sign", msgID, "+" + ts, valid, body, []string{secretA}, provider.ErrMalformedSignature},
		{"timestamp with a leading zero", msgID, "0" + ts, valid, body, []string{secretA}, provider.ErrMalformedSignature},
		{"timestamp negative", msgID, "-" + ts, valid, body, []string{secretA}, provider.ErrMalformedSignature},
		{"timestamp with blanks", msgID, " " + ts, valid, body, []string{secretA}, provider.ErrMalformedSignature},
		{"only non-v1 entries", msgID, ts, v1a + " v2," + strings.TrimPrefix(valid, "v1,"), body, []string{secretA}, provider.ErrMalformedSignature},
		{"version in another case", msgID, ts, "V1," + strings.TrimPrefix(valid, "v1,"), body, []string{secretA}, provider.ErrMalformedSignature},
		{"entries without a version", msgID, ts, strings.TrimPrefix(valid, "v1,"), body, []string{secretA}, provider.ErrMalformedSignature},
		{"too many entries, a valid one last", msgID, ts, tooMany, body, []string{secretA}, provider.ErrMalformedSignature},
		{"only garbage v1 entries", msgID, ts, garbage + " v1,", body, []string{secretA}, provider.ErrInvalidSignature},
		{"signature of the key, not the MAC", msgID, ts, "v1," + strings.TrimPrefix(secretA, "whsec_"), body, []string{secretA}, provider.ErrInvalidSignature},
		{"no secrets configured", msgID, ts, valid, body, nil, provider.ErrNotConfigured},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := stdwebhooks.Verify(tt.id, tt.timestamp, tt.signature, tt.body, keys(t, tt.secrets...), now, provider.DefaultTolerance)
			if tt.want == nil {
				require.NoError(t, err)
				require.Equal(t, tt.timestamp, unix(got))
				require.Equal(t, time.UTC, got.Location())
				return
			}
			require.ErrorIs(t, err, tt.want)
			requireNoLeak(t, err.Error(), append([]string{tt.signature, string(tt.body), tt.id}, tt.secrets...)...)
		})
	}
}

// requireNoLeak fails when msg shows any of secrets, or a part of one that
// is long enough to be recognised: a key without its prefix, one entry of
// a signature header.
func requireNoLeak(t *testing.T, msg string, secrets ...string) {
	t.Helper()
	var parts []string
	for _, s := range secrets {
		parts = append(parts, s, strings.TrimPrefix(s, stdwebhooks.SecretPrefix))
		for _, f := range strings.Fields(s) {
			if _, after, ok := strings.Cut(f, ","); ok {
				parts = append(parts, after)
			}
		}
	}
	for _, p := range parts {
		if len(p) >= 8 {
			require.NotContains(t, msg, p, "the error shows a secret, a signature or the payload")
		}
	}
}

func TestSign(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_800_000_000, 0)
	sig := sign(t, msgID, at, body, secretA)
	require.True(t, strings.HasPrefix(sig, "v1,"))
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sig, "v1,"))
	require.NoError(t, err)
	require.Len(t, raw, 32)
	require.NotEqual(t, sig, sign(t, msgID, at, body, secretB), "the key is signed")
	require.NotEqual(t, sig, sign(t, msgID, at.Add(time.Second), body, secretA), "the timestamp is signed")
	require.NotEqual(t, sig, sign(t, msgID+"x", at, body, secretA), "the id is signed")
	require.Equal(t, sig, sign(t, msgID, at.Add(999*time.Millisecond), body, secretA), "only whole seconds are signed")

	_, err = stdwebhooks.Sign(msgID, at, body, "not-a-secret")
	require.ErrorIs(t, err, stdwebhooks.ErrInvalidSecret)
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	key, err := stdwebhooks.ParseSecret(secretA)
	require.NoError(t, err)
	require.Equal(t, []byte("paygate-test-secret-AAAA"), key)

	for name, s := range map[string]string{
		"empty":                      "",
		"prefix only":                "whsec_",
		"no prefix":                  "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"prefix in another case":     "WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"Stripe-style, not base64":   "whsec_test_current_secret",
		"URL-safe alphabet":          "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa-_",
		"unpadded":                   "whsec_" + base64.RawStdEncoding.EncodeToString([]byte("paygate-test-secret-AAAAA")),
		"padding bits set":           "whsec_YR==",
		"newline inside":             "whsec_MfKQ9r8GKYqr\nTwjUPD8ILPZIo2LaLaSw",
		"blank inside":               "whsec_MfKQ9r8GKYqr TwjUPD8ILPZIo2LaLaSw",
		"padding only":               "whsec_====",
		"asymmetric key, not ours":   "whsk_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"trailing garbage after pad": "whsec_YQ==YQ==",
	} {
		_, err := stdwebhooks.ParseSecret(s)
		require.ErrorIs(t, err, stdwebhooks.ErrInvalidSecret, name)
		requireNoLeak(t, err.Error(), s)
	}
}

func BenchmarkVerify(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	header := sign(b, msgID, now, body, secretB)
	ks := keys(b, secretA, secretB)
	ts := unix(now)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := stdwebhooks.Verify(msgID, ts, header, body, ks, now, provider.DefaultTolerance); err != nil {
			b.Fatal(err)
		}
	}
}
