package adyen_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/paygate/paygate/provider/adyen"
)

// FuzzReceive feeds Receive arbitrary bodies, starting from valid signed
// batches (whose unsigned fields, whitespace and escapes the fuzzer can
// change and still be let through). Whatever the body, Receive either
// fails with exactly one of the request sentinels, or returns one event per
// item whose payload is that item's bytes in the body, decodes with
// DecodeItem to the event's id and re-verifies under the keys.
func FuzzReceive(f *testing.F) {
	one := itemJSON(f, signed(testKey, nil))
	capture := itemJSON(f, signed(oldKey, func(it *adyen.Item) {
		it.PspReference, it.OriginalReference, it.EventCode, it.Reason = "CAPT000000000001", "QFQTPCQ8HXSKGK82", "CAPTURE", ""
	}))
	noAmount := itemJSON(f, signed(testKey, func(it *adyen.Item) {
		it.Amount.Value, it.Amount.Currency, it.EventCode = nil, "", "REPORT_AVAILABLE"
	}))
	refused := itemJSON(f, signed(testKey, func(it *adyen.Item) {
		it.Success, it.Reason, it.AdditionalData = "false", "Refused", map[string]any{"refusalReasonRaw": "DECLINED"}
	}))
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, batchBody("true", one, capture), "", "  ")
	for _, seed := range [][]byte{
		batchBody("false", one),
		batchBody("true", one, capture, noAmount, refused),
		pretty.Bytes(),
		bytes.ReplaceAll(batchBody("false", capture), []byte("/"), []byte(`\/`)),
		batchBody("false", itemJSON(f, signed(wrongKey, nil))),
		batchBody("false", one, one),
		batchBody("false"),
		[]byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":null}]}`),
		[]byte(`{"live":"false","live":"true"}`),
		nil,
	} {
		f.Add(seed)
	}
	keys := [][]byte{testKey, oldKey}
	rc, err := adyen.NewReceiver(adyen.Config{HMACKeys: keys})
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, body []byte) {
		orig := append([]byte(nil), body...)
		events, err := rc.Receive(http.Header{}, body, now)
		if !bytes.Equal(orig, body) {
			t.Fatalf("Receive changed the body")
		}
		if err != nil {
			if !wrapsOneSentinel(err) {
				t.Fatalf("%q: error %v wraps not exactly one request sentinel", body, err)
			}
			if events != nil {
				t.Fatalf("%q: events with an error", body)
			}
			return
		}

		// Count the items the way any JSON reader would.
		var env struct {
			NotificationItems []json.RawMessage `json:"notificationItems"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			t.Fatalf("%q accepted, but encoding/json refuses it: %v", body, err)
		}
		if len(events) == 0 || len(events) != len(env.NotificationItems) {
			t.Fatalf("%q: %d events for %d items", body, len(events), len(env.NotificationItems))
		}
		for i, ev := range events {
			if !bytes.Contains(body, ev.Payload) {
				t.Fatalf("%q: event %d's payload %q is not bytes of the body", body, i, ev.Payload)
			}
			var wrapper struct {
				NotificationRequestItem json.RawMessage `json:"NotificationRequestItem"`
			}
			if err := json.Unmarshal(env.NotificationItems[i], &wrapper); err != nil || !bytes.Equal(bytes.TrimSpace(wrapper.NotificationRequestItem), ev.Payload) {
				t.Fatalf("%q: event %d's payload %q is not item %d (%v)", body, i, ev.Payload, i, err)
			}
			it, err := adyen.DecodeItem(ev.Payload)
			if err != nil {
				t.Fatalf("%q: event %d's payload does not decode: %v", body, i, err)
			}
			if err := adyen.Verify(it, keys); err != nil {
				t.Fatalf("%q: event %d's payload does not verify: %v", body, i, err)
			}
			if ev.ID != adyen.EventID(it) || ev.Type != it.EventCode || ev.Provider != adyen.Name {
				t.Fatalf("%q: event %d is %+v, its item says %s", body, i, ev, adyen.EventID(it))
			}
			if created, _ := it.EventTime(); !created.Equal(ev.Created) {
				t.Fatalf("%q: event %d created %v, its item says %v", body, i, ev.Created, created)
			}
		}
	})
}
