package stripe_test

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripewebhook "github.com/stripe/stripe-go/v79/webhook"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
)

const (
	secretA = "whsec_test_current"
	secretB = "whsec_test_previous"
)

var payload = []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","created":1700000000,"data":{"object":{"id":"pi_1"}}}`)

func sign(t testing.TB, body []byte, secret string, at time.Time) string {
	t.Helper()
	return stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{
		Payload: body, Secret: secret, Timestamp: at,
	}).Header
}

func TestVerifyStripeSignature(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	sigHex := func(secret string, at time.Time, body []byte) string {
		return hex.EncodeToString(stripewebhook.ComputeSignature(at, body, secret))
	}
	reserialized := []byte(`{"id": "evt_1", "object": "event", "type": "payment_intent.succeeded", "created": 1700000000, "data": {"object": {"id": "pi_1"}}}`)

	tests := []struct {
		name    string
		body    []byte
		header  string
		secrets []string
		want    error
	}{
		{"valid", payload, sign(t, payload, secretA, now), []string{secretA}, nil},
		{"rotated: first secret signs", payload, sign(t, payload, secretA, now), []string{secretA, secretB}, nil},
		{"rotated: second secret signs", payload, sign(t, payload, secretB, now), []string{secretA, secretB}, nil},
		{"wrong secret", payload, sign(t, payload, "whsec_other", now), []string{secretA, secretB}, provider.ErrInvalidSignature},
		{"tampered body", []byte(string(payload[:len(payload)-2]) + " }"), sign(t, payload, secretA, now), []string{secretA}, provider.ErrInvalidSignature},
		{"re-serialized JSON", reserialized, sign(t, payload, secretA, now), []string{secretA}, provider.ErrInvalidSignature},
		{"stale", payload, sign(t, payload, secretA, now.Add(-301*time.Second)), []string{secretA}, provider.ErrStaleTimestamp},
		{"edge of tolerance, past", payload, sign(t, payload, secretA, now.Add(-300*time.Second)), []string{secretA}, nil},
		{"future", payload, sign(t, payload, secretA, now.Add(301*time.Second)), []string{secretA}, provider.ErrFutureTimestamp},
		{"edge of tolerance, future", payload, sign(t, payload, secretA, now.Add(300*time.Second)), []string{secretA}, nil},
		{"missing header", payload, "", []string{secretA}, provider.ErrMissingSignature},
		{"malformed: no timestamp", payload, "v1=" + sigHex(secretA, now, payload), []string{secretA}, provider.ErrMalformedSignature},
		{"malformed: garbage", payload, "garbage", []string{secretA}, provider.ErrMalformedSignature},
		{"malformed: bad timestamp", payload, "t=abc,v1=" + sigHex(secretA, now, payload), []string{secretA}, provider.ErrMalformedSignature},
		{"malformed: no v1", payload, fmt.Sprintf("t=%d,v0=%s", now.Unix(), sigHex(secretA, now, payload)), []string{secretA}, provider.ErrMalformedSignature},
		{"v1 not hex", payload, fmt.Sprintf("t=%d,v1=zz", now.Unix()), []string{secretA}, provider.ErrInvalidSignature},
		{"several v1, the last matches", payload,
			fmt.Sprintf("t=%d,v1=%s,v1=%s", now.Unix(), sigHex("whsec_old", now, payload), sigHex(secretA, now, payload)),
			[]string{secretA}, nil},
		{"several v1, none matches", payload,
			fmt.Sprintf("t=%d,v1=%s,v1=%s", now.Unix(), sigHex("whsec_x", now, payload), sigHex("whsec_y", now, payload)),
			[]string{secretA}, provider.ErrInvalidSignature},
		{"signed for another timestamp", payload,
			fmt.Sprintf("t=%d,v1=%s", now.Unix(), sigHex(secretA, now.Add(-time.Second), payload)),
			[]string{secretA}, provider.ErrInvalidSignature},
		{"no secrets configured", payload, sign(t, payload, secretA, now), nil, provider.ErrNotConfigured},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := stripe.VerifySignature(tt.body, tt.header, tt.secrets, now, provider.DefaultTolerance)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
		})
	}
}

func TestDecodeStripeEvent(t *testing.T) {
	t.Parallel()
	ev, err := stripe.DecodeEvent([]byte(`{"id":"evt_9","object":"event","api_version":"2019-02-19","created":1700000000,"livemode":true,"type":"charge.succeeded","data":{"object":{"id":"ch_1","unknown_future_field":[1,2]}},"extra":{}}`))
	require.NoError(t, err)
	require.Equal(t, "evt_9", ev.ID)
	require.Equal(t, "charge.succeeded", ev.Type)
	require.Equal(t, "2019-02-19", ev.APIVersion, "an old API version is accepted as is")
	require.True(t, ev.Livemode)
	require.Equal(t, time.Unix(1700000000, 0).UTC(), ev.Created)

	for name, body := range map[string]string{
		"not json":          `not json`,
		"array":             `[]`,
		"not an event":      `{"id":"ch_1","object":"charge","type":"x","data":{"object":{}}}`,
		"missing id":        `{"object":"event","type":"x","data":{"object":{}}}`,
		"missing type":      `{"id":"evt_1","object":"event","data":{"object":{}}}`,
		"missing data":      `{"id":"evt_1","object":"event","type":"x"}`,
		"data.object array": `{"id":"evt_1","object":"event","type":"x","data":{"object":[]}}`,
		"id wrong type":     `{"id":7,"object":"event","type":"x","data":{"object":{}}}`,
		"created missing":   `{"id":"evt_1","object":"event","type":"x","data":{"object":{}}}`,
		"created in 1970":   `{"id":"evt_1","object":"event","type":"x","created":1,"data":{"object":{}}}`,
		"created a string":  `{"id":"evt_1","object":"event","type":"x","created":"1700000000","data":{"object":{}}}`,
		"ID, not id":        `{"ID":"evt_1","object":"event","type":"x","created":1700000000,"data":{"object":{}}}`,
	} {
		_, err := stripe.DecodeEvent([]byte(body))
		require.ErrorIs(t, err, provider.ErrNotAnEvent, name)
	}
}

func BenchmarkVerifyStripeSignature(b *testing.B) {
	now := time.Now()
	header := sign(b, payload, secretB, now)
	secrets := []string{secretA, secretB}
	b.ReportAllocs()
	for b.Loop() {
		if err := stripe.VerifySignature(payload, header, secrets, now, provider.DefaultTolerance); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeStripeEvent(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := stripe.DecodeEvent(payload); err != nil {
			b.Fatal(err)
		}
	}
}
