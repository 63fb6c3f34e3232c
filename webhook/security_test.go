package webhook_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/strictjson"
	"github.com/paygate/paygate/webhook"
)

// recordingIngester stores nothing and counts what it was given.
type recordingIngester struct {
	mu     sync.Mutex
	events []webhook.Event
}

func (r *recordingIngester) Ingest(_ context.Context, e webhook.Event) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return false, nil
}

func (r *recordingIngester) IngestAll(ctx context.Context, events []webhook.Event) ([]bool, error) {
	dup := make([]bool, len(events))
	for _, e := range events {
		if _, err := r.Ingest(ctx, e); err != nil {
			return nil, err
		}
	}
	return dup, nil
}

func (r *recordingIngester) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// TestTimestampWindowBothWays: at a fixed clock, through the HTTP handler,
// a signature exactly 300s old or 300s ahead is accepted and one second
// beyond either edge is refused before anything reaches the inbox.
func TestTimestampWindowBothWays(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	in := &recordingIngester{}
	e, _ := api.NewEcho(api.Config{})
	webhook.NewHandler(webhook.Config{Ingester: in, Receivers: []provider.Receiver{stripe.NewReceiver([]string{secretA}, 0)}, Now: func() time.Time { return now }}).Register(e)
	body := eventBody("evt_window")
	for _, tc := range []struct {
		offset time.Duration
		status int
	}{
		{-301 * time.Second, http.StatusBadRequest},
		{-300 * time.Second, http.StatusOK},
		{0, http.StatusOK},
		{300 * time.Second, http.StatusOK},
		{301 * time.Second, http.StatusBadRequest},
		{-24 * time.Hour, http.StatusBadRequest},
		{24 * time.Hour, http.StatusBadRequest},
	} {
		before := in.count()
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", bytes.NewReader(body))
		req.Header.Set("Stripe-Signature", sign(t, body, secretA, now.Add(tc.offset)))
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		require.Equal(t, tc.status, rec.Code, "signed %s from now: %s", tc.offset, rec.Body.String())
		if tc.status != http.StatusOK {
			require.Equal(t, before, in.count(), "a refused request reaches nothing")
		}
	}
}

// TestBodyLimitBeforeAnythingElse: a body over the limit is refused with 413
// whether it declares its length or streams it chunked, and whether or not
// it is signed: it is never read beyond the limit nor handed on.
func TestBodyLimitBeforeAnythingElse(t *testing.T) {
	t.Parallel()
	in := &recordingIngester{}
	e, _ := api.NewEcho(api.Config{})
	webhook.NewHandler(webhook.Config{Ingester: in, Receivers: []provider.Receiver{stripe.NewReceiver([]string{secretA}, 0)}, MaxBodyBytes: 2048}).Register(e)
	event := eventBody("evt_limit")
	padded := func(n int) []byte {
		return append(append([]byte(nil), event...), bytes.Repeat([]byte(" "), n-len(event))...)
	}
	for _, tc := range []struct {
		name    string
		body    []byte
		chunked bool
		signed  bool
		status  int
	}{
		{"at the limit", padded(2048), false, true, http.StatusOK},
		{"at the limit, chunked", padded(2048), true, true, http.StatusOK},
		{"one byte over", padded(2049), false, true, http.StatusRequestEntityTooLarge},
		{"one byte over, chunked", padded(2049), true, true, http.StatusRequestEntityTooLarge},
		{"far over, unsigned", bytes.Repeat([]byte("x"), 1<<20), false, false, http.StatusRequestEntityTooLarge},
		{"far over, unsigned, chunked", bytes.Repeat([]byte("x"), 1<<20), true, false, http.StatusRequestEntityTooLarge},
	} {
		before := in.count()
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", bytes.NewReader(tc.body))
		if tc.chunked {
			req.ContentLength = -1
			req.Body = io.NopCloser(struct{ io.Reader }{bytes.NewReader(tc.body)})
		}
		if tc.signed {
			req.Header.Set("Stripe-Signature", sign(t, tc.body, secretA, time.Now()))
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		require.Equal(t, tc.status, rec.Code, tc.name)
		if tc.status != http.StatusOK {
			require.Equal(t, before, in.count(), "%s: nothing handed on", tc.name)
		}
	}
}

// TestUnstorableIdentifiersAreRefused: an event whose id or type holds a NUL,
// invalid UTF-8 or a lone surrogate escape cannot be stored as the text
// other readers see (PostgreSQL refuses NUL; encoding/json alone turns the
// others into U+FFFD, so different ids became one); it is refused as not an
// event (400, the sender's error) instead of failing the commit as a 503 that
// a provider would retry forever, or being merged with another event.
func TestUnstorableIdentifiersAreRefused(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		body string
		want error
	}{
		"NUL in id":                {`{"id":"evt_\u0000x","object":"event","type":"charge.succeeded","created":1700000000,"data":{"object":{}}}`, strictjson.ErrNUL},
		"NUL in type":              {`{"id":"evt_1","object":"event","type":"charge.\u0000","created":1700000000,"data":{"object":{}}}`, strictjson.ErrNUL},
		"NUL in api_version":       {`{"id":"evt_1","object":"event","type":"x","api_version":"\u0000","created":1700000000,"data":{"object":{}}}`, strictjson.ErrNUL},
		"invalid UTF-8 in id":      {"{\"id\":\"evt_\xff\",\"object\":\"event\",\"type\":\"x\",\"created\":1700000000,\"data\":{\"object\":{}}}", strictjson.ErrInvalidUTF8},
		"lone surrogate in id":     {`{"id":"evt_\ud800","object":"event","type":"x","created":1700000000,"data":{"object":{}}}`, strictjson.ErrInvalidUTF8},
		"lone low surrogate in id": {`{"id":"evt_\udfff","object":"event","type":"x","created":1700000000,"data":{"object":{}}}`, strictjson.ErrInvalidUTF8},
		"lone surrogate in type":   {`{"id":"evt_1","object":"event","type":"x\udbff","created":1700000000,"data":{"object":{}}}`, strictjson.ErrInvalidUTF8},
		"surrogate as UTF-8 in id": {"{\"id\":\"evt_\xed\xa0\x80\",\"object\":\"event\",\"type\":\"x\",\"created\":1700000000,\"data\":{\"object\":{}}}", strictjson.ErrInvalidUTF8},
		"ID next to id":            {`{"id":"evt_1","ID":"evt_2","object":"event","type":"x","created":1700000000,"data":{"object":{}}}`, strictjson.ErrKeyCase},
		"id twice":                 {`{"id":"evt_1","id":"evt_2","object":"event","type":"x","created":1700000000,"data":{"object":{}}}`, strictjson.ErrDuplicateKey},
		"created past PostgreSQL":  {`{"id":"evt_1","object":"event","type":"x","created":10000000000000,"data":{"object":{}}}`, strictjson.ErrTimestampOutOfRange},
		"created int64 max":        {`{"id":"evt_1","object":"event","type":"x","created":9223372036854775807,"data":{"object":{}}}`, strictjson.ErrTimestampOutOfRange},
	} {
		_, err := stripe.DecodeEvent([]byte(tc.body))
		require.ErrorIs(t, err, webhook.ErrNotAnEvent, name)
		require.ErrorIs(t, err, tc.want, name)
	}
	ev, err := stripe.DecodeEvent([]byte(`{"id":"evt_\ud83d\ude00\ufffd","object":"event","type":"x","created":1700000000,"data":{"object":{}}}`))
	require.NoError(t, err, "a surrogate pair and a real U+FFFD are text")
	require.Equal(t, "evt_\U0001F600\uFFFD", ev.ID)
}
