// Package providertest is the conformance suite every provider's Receiver
// passes, as River's riverdrivertest is for its drivers: the same checks of
// authentication, key rotation, tampering, clocks, hostile bodies and the
// shape of what is filed, run against each provider through a small
// Harness that knows how that provider signs.
//
// It must never be imported by production code.
package providertest

import (
	"bytes"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider"
)

// Harness is what the suite needs to know of one provider.
type Harness struct {
	// New returns a Receiver configured with two keys (a rotation: key 0
	// and key 1); with configured false, one with no key at all, or nil
	// when the provider cannot be configured without one (a Standard
	// Webhooks source is a name and its secrets: without sources the
	// route itself answers 503, which package webhook tests).
	New func(t *testing.T, configured bool) provider.Receiver
	// Request returns a request that delivers one event, named after id,
	// signed with key 0 or 1 as the provider signs at time at; key -1 signs
	// with a key the Receiver does not know.
	Request func(t *testing.T, key int, id string, at time.Time) (http.Header, []byte)
	// Tamper changes one byte of what the signature covers, leaving the
	// request well-formed.
	Tamper func(t *testing.T, header http.Header, body []byte) (http.Header, []byte)
	// Unsigned removes the request's signature or credentials.
	Unsigned func(t *testing.T, header http.Header, body []byte) (http.Header, []byte)
	// SignBody signs an arbitrary body with key 0, when the provider signs
	// whole bodies; nil when its signature lives inside the body (Adyen),
	// where a hostile body is refused before any signature is found.
	SignBody func(t *testing.T, body []byte, at time.Time) http.Header
	// Timestamped: the signature covers a timestamp that must be within
	// provider.DefaultTolerance of now, both ways.
	Timestamped bool
}

// sentinels are the request errors a Receiver may fail with.
var sentinels = []error{
	provider.ErrNotConfigured, provider.ErrUnauthenticated, provider.ErrMissingSignature,
	provider.ErrMalformedSignature, provider.ErrStaleTimestamp, provider.ErrFutureTimestamp,
	provider.ErrInvalidSignature, provider.ErrNotAnEvent,
}

// requireRefused checks that err wraps exactly one request sentinel, one of
// want.
func requireRefused(t *testing.T, events []provider.Event, err error, what string, want ...error) {
	t.Helper()
	require.Error(t, err, what)
	require.Nil(t, events, "%s: a refused request delivers nothing", what)
	n := 0
	for _, s := range sentinels {
		if errors.Is(err, s) {
			n++
		}
	}
	require.Equal(t, 1, n, "%s: %v wraps exactly one request sentinel", what, err)
	matched := false
	for _, w := range want {
		matched = matched || errors.Is(err, w)
	}
	require.True(t, matched, "%s: %v is one of %v", what, err, want)
}

// Run runs the suite against h.
func Run(t *testing.T, h Harness) {
	now := time.Now().Truncate(time.Second)
	r := h.New(t, true)
	unknownKey := []error{provider.ErrInvalidSignature, provider.ErrUnauthenticated}

	t.Run("valid, with either key of a rotation", func(t *testing.T) {
		for key := range 2 {
			header, body := h.Request(t, key, "conform1", now)
			orig := bytes.Clone(body)
			events, err := r.Receive(header, body, now)
			require.NoError(t, err, "key %d", key)
			require.Equal(t, orig, body, "Receive leaves the body as it was")
			require.NotEmpty(t, events)
			for _, ev := range events {
				require.Equal(t, r.Name(), ev.Provider)
				require.NotEmpty(t, ev.ID)
				require.LessOrEqual(t, len(ev.ID), provider.MaxIDLength)
				require.Contains(t, ev.ID, "conform1", "the event is named after what the provider named it")
				require.True(t, bytes.Contains(body, ev.Payload), "the payload is bytes of the body, not a re-encoding")
				require.False(t, ev.Created.IsZero())
			}
			again, err := r.Receive(header, body, now)
			require.NoError(t, err)
			require.Equal(t, events, again, "the same request files the same events: the dedupe key is stable")
			answer := r.Acknowledge(events, make([]bool, len(events)))
			require.GreaterOrEqual(t, answer.Status, 200)
			require.Less(t, answer.Status, 300)
			require.NotEmpty(t, answer.ContentType)
		}
	})

	t.Run("an unknown key", func(t *testing.T) {
		header, body := h.Request(t, -1, "conform2", now)
		events, err := r.Receive(header, body, now)
		requireRefused(t, events, err, "unknown key", unknownKey...)
	})

	t.Run("tampered", func(t *testing.T) {
		header, body := h.Request(t, 0, "conform3", now)
		header, body = h.Tamper(t, header, body)
		events, err := r.Receive(header, body, now)
		requireRefused(t, events, err, "tampered", unknownKey...)
	})

	t.Run("unsigned", func(t *testing.T) {
		header, body := h.Request(t, 0, "conform4", now)
		header, body = h.Unsigned(t, header, body)
		events, err := r.Receive(header, body, now)
		requireRefused(t, events, err, "unsigned", provider.ErrMissingSignature, provider.ErrUnauthenticated)
	})

	if bare := h.New(t, false); bare != nil {
		t.Run("not configured", func(t *testing.T) {
			header, body := h.Request(t, 0, "conform5", now)
			events, err := bare.Receive(header, body, now)
			requireRefused(t, events, err, "no key configured", provider.ErrNotConfigured)
		})
	}

	// A provider that signs no timestamp (Adyen) has no clock to check:
	// its replays are deduped by id, for as long as the inbox keeps them.
	if h.Timestamped {
		t.Run("clock", func(t *testing.T) { clock(t, h, r, now) })
	}

	t.Run("hostile bodies", func(t *testing.T) { hostile(t, h, r, now) })
}

func clock(t *testing.T, h Harness, r provider.Receiver, now time.Time) {
	tol := provider.DefaultTolerance
	for _, tc := range []struct {
		offset time.Duration
		want   error
	}{
		{-tol, nil}, {tol, nil}, {-tol - time.Second, provider.ErrStaleTimestamp}, {tol + time.Second, provider.ErrFutureTimestamp},
	} {
		header, body := h.Request(t, 0, "conform6", now.Add(tc.offset))
		events, err := r.Receive(header, body, now)
		if tc.want == nil {
			require.NoError(t, err, "signed %s from now", tc.offset)
			continue
		}
		requireRefused(t, events, err, "signed "+tc.offset.String()+" from now", tc.want)
	}
}

func hostile(t *testing.T, h Harness, r provider.Receiver, now time.Time) {
	for _, body := range [][]byte{
		[]byte(`not json`), []byte(`[1,2]`), []byte(`{"a":1,"a":2}`), []byte("{\"a\":\"\xff\"}"),
		[]byte(`{"a":"\u0000"}`), bytes.Repeat([]byte("["), 10_000),
	} {
		header := http.Header{}
		if h.SignBody != nil {
			header = h.SignBody(t, body, now)
		} else {
			// Where the signature lives in the body, the credentials
			// around it still pass, so only the body is wrong.
			valid, _ := h.Request(t, 0, "conform7", now)
			header = valid
		}
		events, err := r.Receive(header, body, now)
		requireRefused(t, events, err, "body "+string(body[:min(len(body), 20)]), provider.ErrNotAnEvent)
	}
}
