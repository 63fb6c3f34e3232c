package stdwebhooks_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stdwebhooks"
)

// The published test vector of the Standard Webhooks libraries, from
// github.com/standard-webhooks/standard-webhooks, libraries/go/webhook_test.go
// (TestWebhookSign; the same values are in libraries/javascript/src/webhook.test.ts,
// libraries/python/tests/test_webhooks.py, libraries/ruby/spec/webhook_spec.rb,
// libraries/php/tests/WebhookTest.php and
// libraries/csharp/StandardWebhooks.Tests/WebhookTest.cs). The libraries also
// accept the secret without its whsec_ prefix; paygate does not.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = "1614265330"
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

var vectorTime = time.Unix(1614265330, 0)

func TestOfficialVectorSign(t *testing.T) {
	t.Parallel()
	sig, err := stdwebhooks.Sign(vectorID, vectorTime, []byte(vectorPayload), vectorSecret)
	require.NoError(t, err)
	require.Equal(t, vectorSignature, sig)
}

// TestOfficialVectorVerify replays the libraries' verification cases over
// the vector: the signature headers they send, and what they expect.
func TestOfficialVectorVerify(t *testing.T) {
	t.Parallel()
	key, err := stdwebhooks.ParseSecret(vectorSecret)
	require.NoError(t, err)
	keys := [][]byte{key}
	// The libraries' "invalid signature" entries, each from the file named.
	const (
		goInvalid     = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=" // libraries/go/webhook_test.go
		pyOneCharOff  = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA=" // libraries/python/tests/test_webhooks.py
		jsNotBase64   = "v1,dawfeoifkpqwoekfpqoekf"                       // libraries/javascript/src/webhook.test.ts
		rubyTruncated = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLawdd"  // libraries/ruby/spec/webhook_spec.rb
		goPartial     = "v1,"                                             // libraries/go/webhook_test.go
		goOtherScheme = "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=" // libraries/go/webhook_test.go
	)
	tests := []struct {
		name      string
		id        string
		timestamp string
		signature string
		want      error
	}{
		{"valid", vectorID, vectorTimestamp, vectorSignature, nil},
		{"multi-signature, one valid", vectorID, vectorTimestamp,
			goInvalid + " " + goOtherScheme + " " + vectorSignature + " " + goInvalid, nil},
		{"invalid signature", vectorID, vectorTimestamp, goInvalid, provider.ErrInvalidSignature},
		{"one character off", vectorID, vectorTimestamp, pyOneCharOff, provider.ErrInvalidSignature},
		{"not base64", vectorID, vectorTimestamp, jsNotBase64, provider.ErrInvalidSignature},
		{"truncated", vectorID, vectorTimestamp, rubyTruncated, provider.ErrInvalidSignature},
		{"partial signature", vectorID, vectorTimestamp, goPartial, provider.ErrInvalidSignature},
		{"timestamp changed to 2000-01-01", vectorID, "946684800", vectorSignature, provider.ErrInvalidSignature},
		{"missing id", "", vectorTimestamp, vectorSignature, provider.ErrMissingSignature},
		{"missing timestamp", vectorID, "", vectorSignature, provider.ErrMissingSignature},
		{"missing signature", vectorID, vectorTimestamp, "", provider.ErrMissingSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The libraries' clock is theirs; ours is the vector's, with the
			// tolerance large enough for the 2000-01-01 case to reach the MAC.
			ts, err := stdwebhooks.Verify(tt.id, tt.timestamp, tt.signature, []byte(vectorPayload), keys, vectorTime, 30*365*24*time.Hour)
			if tt.want == nil {
				require.NoError(t, err)
				require.True(t, vectorTime.Equal(ts))
				return
			}
			require.ErrorIs(t, err, tt.want)
		})
	}
}
