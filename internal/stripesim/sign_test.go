package stripesim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/paygate/paygate/internal/stripesim"
)

var verifyOpts = webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true}

func TestSignatureVerifiesWithStripeGo(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	p := sim.Pay(stripesim.PayOpts{Amount: 1999, Email: "x@example.com"})
	secret := sim.WebhookSecret()

	for _, ev := range sim.Events() {
		now := time.Now()
		header := stripesim.SignedRequest(ev.Payload, secret, now)
		require.Regexp(t, `^t=\d+,v1=[0-9a-f]{64}$`, header)
		require.Equal(t, webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
			Payload: ev.Payload, Secret: secret, Timestamp: now,
		}).Header, header, "same header stripe-go's own helper builds")

		got, err := webhook.ConstructEventWithOptions(ev.Payload, header, secret, verifyOpts)
		require.NoError(t, err)
		require.Equal(t, ev.ID, got.ID)
		require.Equal(t, string(ev.Type), string(got.Type))
		require.Equal(t, p.ID, ev.PaymentIntentID)

		_, err = webhook.ConstructEventWithOptions(ev.Payload, header, "whsec_other", verifyOpts)
		require.ErrorIs(t, err, webhook.ErrNoValidSignature)

		tampered := append([]byte(nil), ev.Payload...)
		tampered[len(tampered)-2] = ' '
		_, err = webhook.ConstructEventWithOptions(tampered, header, secret, verifyOpts)
		require.ErrorIs(t, err, webhook.ErrNoValidSignature, "the signature covers the raw bytes")

		stale := stripesim.SignedRequest(ev.Payload, secret, now.Add(-10*time.Minute))
		_, err = webhook.ConstructEventWithOptions(ev.Payload, stale, secret, verifyOpts)
		require.ErrorIs(t, err, webhook.ErrTooOld)
	}
}

func TestSignExtraSignatures(t *testing.T) {
	t.Parallel()
	payload := []byte(`{"id":"evt_1","object":"event"}`)
	now := time.Now()
	header := stripesim.Sign(payload, "whsec_old", now, &stripesim.SignOpts{ExtraSecrets: []string{"whsec_new"}, V0: true})
	require.Regexp(t, `^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64},v0=[0-9a-f]{64}$`, header)

	for _, secret := range []string{"whsec_old", "whsec_new"} {
		require.NoError(t, webhook.ValidatePayload(payload, header, secret), "rotation: either secret verifies")
	}
	require.ErrorIs(t, webhook.ValidatePayload(payload, header, "whsec_third"), webhook.ErrNoValidSignature)

	onlyV0 := stripesim.Sign(payload, "whsec_old", now, &stripesim.SignOpts{V0: true})
	require.NoError(t, webhook.ValidatePayload(payload, onlyV0, "whsec_old"), "the v0 is ignored")
}
