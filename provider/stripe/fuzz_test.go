package stripe_test

import (
	"testing"
	"time"

	"github.com/paygate/paygate/provider/stripe"
	"github.com/paygate/paygate/strictjson"
)

// FuzzParseSignatureHeader: any header either parses into a timestamp and at
// least one well-formed signature, or fails with a sentinel; it never panics.
func FuzzParseSignatureHeader(f *testing.F) {
	for _, seed := range []string{
		"", "t=1,v1=00", "t=1700000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd",
		"t=1700000000,v1=aa,v1=bb,v0=cc", "t=,v1=", "=,=", "t=1,t=2,v1=00", "v1=00",
		"t=99999999999999999999,v1=00", " t = 1 , v1 = 00 ",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		h, err := stripe.ParseSignatureHeader(header)
		if err != nil {
			return
		}
		if h.Timestamp.IsZero() {
			t.Fatalf("parsed %q without a timestamp", header)
		}
		for _, sig := range h.V1 {
			if len(sig) != 32 {
				t.Fatalf("parsed %q into a %d-byte signature", header, len(sig))
			}
		}
	})
}

// FuzzDecodeStripeEvent: any body either decodes into an event with an id and
// a type, keeping the raw bytes, or fails; it never panics.
func FuzzDecodeStripeEvent(f *testing.F) {
	for _, seed := range []string{
		`{"id":"evt_1","object":"event","type":"charge.succeeded","created":1700000000,"data":{"object":{}}}`,
		`{"id":"evt_1","object":"event","type":"charge.succeeded","created":1,"data":{"object":{}}}`,
		`{"id":"evt_1","ID":"evt_2","object":"event","type":"x","created":1700000000,"data":{"object":{}}}`,
		`{"id":"evt_1","object":"event","type":"x","data":{"object":[]}}`,
		`{}`, `null`, `[]`, `{"id":1}`, `{"object":"event","id":"","type":""}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := stripe.DecodeEvent(body)
		if err != nil {
			return
		}
		if ev.ID == "" || ev.Type == "" || string(ev.Payload) != string(body) ||
			ev.Created.Unix() < strictjson.MinUnix || ev.Created.Unix() >= strictjson.MaxUnix {
			t.Fatalf("decoded %q into %+v", body, ev)
		}
		_ = stripe.VerifySignature(body, "t=1,v1=00", []string{"whsec_x"}, time.Unix(1, 0), time.Second)
	})
}
