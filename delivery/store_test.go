package delivery_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/delivery"
)

// signedBy counts the webhook-signature entries of r that verify under
// secret, by the Standard Webhooks scheme computed here from scratch:
// "v1," and the base64 HMAC-SHA256 of "<id>.<timestamp>.<body>" under the
// secret's base64-decoded bytes.
func signedBy(t *testing.T, secret string, r request) int {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(r.ID + "." + r.Timestamp + "."))
	mac.Write(r.Body)
	want := mac.Sum(nil)
	n := 0
	for _, entry := range strings.Split(r.Signature, " ") {
		sig, ok := strings.CutPrefix(entry, "v1,")
		require.True(t, ok, "entry %q", entry)
		got, err := base64.StdEncoding.DecodeString(sig)
		require.NoError(t, err)
		if hmac.Equal(got, want) {
			n++
		}
	}
	return n
}

func verifies(t *testing.T, secret string, r request) bool { return signedBy(t, secret, r) > 0 }

// TestCreateValidates: an endpoint is created only with known types (the
// wildcard swallowing the rest), a description within bounds and a URL the
// guard accepts; the secret is a whsec_ of 32 random bytes.
func TestCreateValidates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	strict := delivery.NewStore(b.pool, delivery.GuardConfig{})
	ctx := t.Context()

	for _, tc := range []struct {
		name  string
		n     delivery.NewEndpoint
		store *delivery.Store
		err   error
	}{
		{"no types", delivery.NewEndpoint{URL: "https://example.com/h"}, b.store, delivery.ErrInvalidEndpoint},
		{"unknown type", delivery.NewEndpoint{URL: "https://example.com/h", EventTypes: []string{"payment.succeeded", "payment.exploded"}}, b.store, delivery.ErrInvalidEndpoint},
		{"description too long", delivery.NewEndpoint{URL: "https://example.com/h", EventTypes: []string{"*"}, Description: strings.Repeat("é", 501)}, b.store, delivery.ErrInvalidEndpoint},
		{"relative url", delivery.NewEndpoint{URL: "/hooks", EventTypes: []string{"*"}}, b.store, delivery.ErrInvalidURL},
		{"ftp", delivery.NewEndpoint{URL: "ftp://example.com/h", EventTypes: []string{"*"}}, b.store, delivery.ErrInvalidURL},
		{"credentials", delivery.NewEndpoint{URL: "https://u:p@example.com/h", EventTypes: []string{"*"}}, b.store, delivery.ErrInvalidURL},
		{"http loopback", delivery.NewEndpoint{URL: "http://127.0.0.1:8080/h", EventTypes: []string{"*"}}, strict, delivery.ErrForbiddenURL},
		{"http localhost", delivery.NewEndpoint{URL: "http://localhost/h", EventTypes: []string{"*"}}, strict, delivery.ErrForbiddenURL},
		{"https loopback", delivery.NewEndpoint{URL: "https://127.0.0.1/h", EventTypes: []string{"*"}}, strict, delivery.ErrForbiddenURL},
		{"https localhost", delivery.NewEndpoint{URL: "https://localhost/h", EventTypes: []string{"*"}}, strict, delivery.ErrForbiddenURL},
		{"https private", delivery.NewEndpoint{URL: "https://10.1.2.3/h", EventTypes: []string{"*"}}, strict, delivery.ErrForbiddenURL},
	} {
		_, err := tc.store.Create(ctx, tc.n)
		require.ErrorIs(t, err, tc.err, tc.name)
	}
	eps, _, err := delivery.ListEndpoints(ctx, b.pool, "", 10)
	require.NoError(t, err)
	require.Empty(t, eps, "nothing stored for a refused endpoint")

	wild, err := b.store.Create(ctx, delivery.NewEndpoint{URL: "http://127.0.0.1:9/h",
		EventTypes: []string{"payment.succeeded", "*", "payment.refunded"}, Description: "  " + strings.Repeat("é", 500) + " "})
	require.NoError(t, err)
	require.Equal(t, []string{"*"}, wild.EventTypes)
	require.Equal(t, strings.Repeat("é", 500), wild.Description, "500 characters, trimmed")
	require.Equal(t, delivery.StatusEnabled, wild.Status)
	require.Regexp(t, `^ep_[a-z2-7]{24}$`, wild.ID)

	two, err := b.store.Create(ctx, delivery.NewEndpoint{URL: "http://127.0.0.1:9/h",
		EventTypes: []string{"payment.refunded", "payment.refunded"}})
	require.NoError(t, err)
	require.Equal(t, []string{"payment.refunded"}, two.EventTypes)

	for _, e := range []delivery.Endpoint{wild, two} {
		key, ok := strings.CutPrefix(e.Secret, "whsec_")
		require.True(t, ok, e.Secret)
		raw, err := base64.StdEncoding.DecodeString(key)
		require.NoError(t, err)
		require.Len(t, raw, 32)
		stored := b.getEndpoint(t, e.ID)
		require.Equal(t, e.Secret, stored.Secret)
		require.Equal(t, e.EventTypes, stored.EventTypes)
	}
	require.NotEqual(t, wild.Secret, two.Secret)
	require.NotEqual(t, wild.ID, two.ID)

	_, err = b.store.Create(ctx, delivery.NewEndpoint{URL: "https://93.184.215.14/h", EventTypes: []string{"*"}})
	require.NoError(t, err, "a public address passes the strict guard too")
}

// TestListEndpointsPages: pages follow each other by cursor, oldest first,
// without loss or repetition, and the last says so.
func TestListEndpointsPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var want []string
	for range 5 {
		want = append(want, b.endpoint(t, "http://127.0.0.1:9/h").ID)
	}
	var (
		got    []string
		cursor string
		pages  int
	)
	for {
		eps, next, err := delivery.ListEndpoints(t.Context(), b.pool, cursor, 2)
		require.NoError(t, err)
		require.LessOrEqual(t, len(eps), 2)
		for _, e := range eps {
			got = append(got, e.ID)
		}
		pages++
		if next == "" {
			break
		}
		require.Less(t, pages, 5, "cursors loop")
		cursor = next
	}
	require.Equal(t, want, got)
	require.Equal(t, 3, pages)

	_, _, err := delivery.ListEndpoints(t.Context(), b.pool, "ep_nosuchendpoint", 2)
	require.ErrorIs(t, err, delivery.ErrInvalidCursor)
}

// TestUpdateEnablingResumes: disabling holds an endpoint's queue; enabling
// it makes what waited due now, on a fresh schedule, while a message held
// behind its predecessor stays held, and they then go in order.
func TestUpdateEnablingResumes(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *delivery.DispatcherConfig) { c.Schedule = []time.Duration{time.Hour, time.Hour} })
	rcv := newReceiver(t)
	rcv.setAnswer(status(http.StatusServiceUnavailable))
	e := b.endpoint(t, rcv.URL)
	m1, m2 := message(t, "pi_u", 1, "payment.processing"), message(t, "pi_u", 2, "payment.succeeded")
	b.write(t, m1, m2)
	b.step(t)
	require.Equal(t, 1, b.dispatch(t, e.ID))
	d1 := b.delivery(t, e.ID, m1.ID)
	require.NotNil(t, d1.NextAttemptAt)
	require.Greater(t, time.Until(*d1.NextAttemptAt), 50*time.Minute)
	require.Nil(t, b.delivery(t, e.ID, m2.ID).NextAttemptAt, "held behind m1")

	disabled, enabled := delivery.StatusDisabled, delivery.StatusEnabled
	e, err := b.store.Update(t.Context(), e.ID, delivery.Patch{Status: &disabled})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDisabled, e.Status)
	require.Equal(t, "disabled by an operator", e.DisabledReason)

	e, err = b.store.Update(t.Context(), e.ID, delivery.Patch{Status: &enabled})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusEnabled, e.Status)
	require.Empty(t, e.DisabledReason)
	require.Nil(t, e.FailingSince)
	d1 = b.delivery(t, e.ID, m1.ID)
	require.NotNil(t, d1.NextAttemptAt)
	require.WithinDuration(t, time.Now(), *d1.NextAttemptAt, time.Second, "due now")
	var series int
	require.NoError(t, b.pool.QueryRow(t.Context(),
		`SELECT series_attempts FROM deliveries WHERE endpoint_id = $1 AND message_id = $2`, e.ID, m1.ID).Scan(&series))
	require.Zero(t, series, "a fresh schedule")
	require.Nil(t, b.delivery(t, e.ID, m2.ID).NextAttemptAt, "still held behind m1")

	rcv.setAnswer(status(http.StatusOK))
	require.Equal(t, 2, b.dispatch(t, e.ID))
	got := rcv.requests()
	require.Len(t, got, 3)
	require.Equal(t, []string{m1.ID, m1.ID, m2.ID}, []string{got[0].ID, got[1].ID, got[2].ID})

	// Enabling an enabled endpoint changes nothing; a bad patch nothing at all.
	_, err = b.store.Update(t.Context(), e.ID, delivery.Patch{Status: &enabled})
	require.NoError(t, err)
	bogus := delivery.Status("paused")
	_, err = b.store.Update(t.Context(), e.ID, delivery.Patch{Status: &bogus})
	require.ErrorIs(t, err, delivery.ErrInvalidEndpoint)
	_, err = b.store.Update(t.Context(), "ep_nosuchendpoint", delivery.Patch{Status: &enabled})
	require.ErrorIs(t, err, delivery.ErrEndpointNotFound)
}

// TestRotateSecret: after a rotation each request carries two signatures,
// one under the new secret and one under the old, until the overlap ends;
// then only the new one signs.
func TestRotateSecret(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t)
	e := b.endpoint(t, rcv.URL)
	old := e.Secret

	fresh, err := b.store.RotateSecret(t.Context(), e.ID)
	require.NoError(t, err)
	require.NotEqual(t, old, fresh)
	stored := b.getEndpoint(t, e.ID)
	require.Equal(t, fresh, stored.Secret)
	require.Equal(t, old, stored.PreviousSecret)
	require.NotNil(t, stored.PreviousSecretUntil)
	require.WithinDuration(t, time.Now().Add(delivery.SecretOverlap), *stored.PreviousSecretUntil, 5*time.Second)

	b.write(t, message(t, "pi_rot", 1, "payment.processing"))
	b.step(t)
	require.Equal(t, 1, b.dispatch(t, e.ID))
	got := rcv.requests()
	require.Len(t, got, 1)
	require.Len(t, strings.Split(got[0].Signature, " "), 2, got[0].Signature)
	require.Equal(t, 1, signedBy(t, fresh, got[0]), "one signature under the new secret")
	require.Equal(t, 1, signedBy(t, old, got[0]), "one under the old")

	_, err = b.pool.Exec(t.Context(), `UPDATE endpoints SET previous_secret_until = now() - interval '1 second' WHERE id = $1`, e.ID)
	require.NoError(t, err)
	b.write(t, message(t, "pi_rot", 2, "payment.succeeded"))
	b.step(t)
	require.Equal(t, 1, b.dispatch(t, e.ID))
	got = rcv.requests()
	require.Len(t, got, 2)
	require.Len(t, strings.Split(got[1].Signature, " "), 1, got[1].Signature)
	require.Equal(t, 1, signedBy(t, fresh, got[1]))
	require.Zero(t, signedBy(t, old, got[1]), "the overlap is over")

	_, err = b.store.RotateSecret(t.Context(), "ep_nosuchendpoint")
	require.ErrorIs(t, err, delivery.ErrEndpointNotFound)
}
