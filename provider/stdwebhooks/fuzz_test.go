package stdwebhooks_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stdwebhooks"
	"github.com/paygate/paygate/strictjson"
)

// requestErrors are the errors a Receiver may fail with.
var requestErrors = []error{
	provider.ErrNotConfigured,
	provider.ErrUnauthenticated,
	provider.ErrMissingSignature,
	provider.ErrMalformedSignature,
	provider.ErrStaleTimestamp,
	provider.ErrFutureTimestamp,
	provider.ErrInvalidSignature,
	provider.ErrNotAnEvent,
}

// FuzzReceive: any request either fails with one of the provider's request
// errors, or yields exactly one event of the source whose id is the
// webhook-id header, whose payload is the body unchanged (and strictjson's
// object), and which verifies again. With resign set, the target signs
// the fuzzed id, timestamp and body itself (with HMAC written here, not the
// package's), so the fuzzer reaches the body's decoding; such a request
// must never fail on its signature.
func FuzzReceive(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	ts := unix(now)
	for _, seed := range []struct {
		id, timestamp string
		body          string
		resign        bool
	}{
		{msgID, ts, string(body), false},
		{msgID, ts, string(body), true},
		{vectorID, ts, vectorPayload, true},
		{"msg_1", ts, `{"type":"a","type":"b"}`, true},
		{"msg_1", ts, "{\"type\":\"\xff\"}", true},
		{"msg_1", ts, `{"type":"\u0000"}`, true},
		{"msg_1", ts, `[]`, true},
		{"msg_1", ts, `null`, true},
		{"msg_1", ts, `{"type":7}`, true},
		{"msg\x00", ts, `{}`, true},
		{"", ts, `{}`, true},
		{"msg_1", "0" + ts, `{}`, true},
		{"msg_1", "1", `{}`, true},
		{"msg_1", "abc", `{}`, false},
	} {
		sig := macHeader(seed.id, seed.timestamp, []byte(seed.body), secretA)
		if !seed.resign {
			sig = sign(f, seed.id, now, []byte(seed.body), secretB) + " v1a,AAAA " + sig
		}
		f.Add(seed.id, seed.timestamp, sig, []byte(seed.body), seed.resign)
	}
	r, err := stdwebhooks.NewReceiver(stdwebhooks.Source{Name: "polar", Secrets: []string{secretA, secretB}})
	if err != nil {
		f.Fatal(err)
	}
	ks := keys(f, secretA, secretB)
	f.Fuzz(func(t *testing.T, id, timestamp, signature string, body []byte, resign bool) {
		if resign {
			signature = macHeader(id, timestamp, body, secretB)
		}
		header := http.Header{}
		for k, v := range map[string]string{stdwebhooks.HeaderID: id, stdwebhooks.HeaderTimestamp: timestamp, stdwebhooks.HeaderSignature: signature} {
			if v != "" {
				header[http.CanonicalHeaderKey(k)] = []string{v}
			}
		}
		snapshot := bytes.Clone(body)
		events, err := r.Receive(header, body, now)
		if !bytes.Equal(snapshot, body) {
			t.Fatal("Receive changed the body")
		}
		if err != nil {
			if !isOneOf(err, requestErrors...) {
				t.Fatalf("error wraps no request error: %v", err)
			}
			if resign && errors.Is(err, provider.ErrInvalidSignature) {
				t.Fatalf("a correctly signed request failed its signature: %v", err)
			}
			if events != nil {
				t.Fatalf("events %v with error %v", events, err)
			}
			return
		}
		if len(events) != 1 {
			t.Fatalf("%d events", len(events))
		}
		ev := events[0]
		if ev.Provider != "polar" || ev.ID != id || !bytes.Equal(ev.Payload, body) {
			t.Fatalf("event %q/%q payload %q from id %q body %q", ev.Provider, ev.ID, ev.Payload, id, body)
		}
		if len(ev.ID) > provider.MaxIDLength || len(ev.Type) > provider.MaxIDLength || bytes.IndexByte([]byte(ev.ID+ev.Type), 0) >= 0 {
			t.Fatalf("unstorable id %q or type %q", ev.ID, ev.Type)
		}
		if ev.Created.Unix() < strictjson.MinUnix || ev.Created.Unix() >= strictjson.MaxUnix || unix(ev.Created) != timestamp {
			t.Fatalf("created %v from timestamp %q", ev.Created, timestamp)
		}
		var object map[string]any
		if err := strictjson.Unmarshal(ev.Payload, &object); err != nil || object == nil {
			t.Fatalf("payload %q is not strictjson's object: %v", ev.Payload, err)
		}
		at, err := stdwebhooks.Verify(ev.ID, timestamp, signature, ev.Payload, ks, now, provider.DefaultTolerance)
		if err != nil || !at.Equal(ev.Created) {
			t.Fatalf("event does not verify again: %v", err)
		}
	})
}

// macHeader is the scheme's v1 signature computed independently of Sign.
func macHeader(id, timestamp string, body []byte, secret string) string {
	key, err := base64.StdEncoding.DecodeString(secret[len(stdwebhooks.SecretPrefix):])
	if err != nil {
		panic(err)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + timestamp + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}
