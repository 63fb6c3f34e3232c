package adyen_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/statemachine"
)

// FuzzEffects: any stored item either maps to effects the state machine and
// the ledger accept, with Adyen refs of the payment it names, the same for
// the same JSON however it is spaced; or fails as ignored or permanent
// (poison), never with an error the worker would retry forever. It never
// panics.
func FuzzEffects(f *testing.F) {
	for _, code := range []string{"AUTHORISATION", "CAPTURE", "CAPTURE_FAILED", "CANCELLATION", "REFUND",
		"REFUND_FAILED", "REFUNDED_REVERSED", "CHARGEBACK", "CHARGEBACK_REVERSED", "SECOND_CHARGEBACK", "REPORT_AVAILABLE"} {
		original := payPSP
		if code == "AUTHORISATION" {
			original = ""
		}
		f.Add(item(code, "PSPFUZZ000000001", original, 1234, "EUR", true, map[string]any{"disputeStatus": "Lost"}))
		f.Add(item(code, "PSPFUZZ000000002", original, 0, "CLP", false, nil))
	}
	f.Add(item("CANCEL_OR_REFUND", refundPSP, payPSP, 100050, "CLP", true, map[string]any{"modification.action": "refund"}))
	f.Add(item("CAPTURE", capturePSP, payPSP, 9223372036854775807, "KWD", true, nil))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		fx, err := adyen.Effects(payload)
		if err != nil {
			if !errors.Is(err, provider.ErrPermanent) && !errors.Is(err, provider.ErrIgnored) {
				t.Fatalf("error neither permanent nor ignored: %v", err)
			}
			return
		}
		if fx.PaymentID == "" {
			t.Fatalf("effects without a payment: %+v", fx)
		}
		for _, fact := range fx.Facts {
			if err := statemachine.Validate(fact); err != nil {
				t.Fatalf("invalid fact %+v: %v", fact, err)
			}
		}
		for _, p := range fx.Postings {
			if err := p.Validate(); err != nil {
				t.Fatalf("posting the ledger would refuse %+v: %v", p, err)
			}
			if !strings.HasPrefix(p.Ref, adyen.Prefix) || p.PaymentID != fx.PaymentID {
				t.Fatalf("posting %s for payment %q in effects of payment %q", p.Ref, p.PaymentID, fx.PaymentID)
			}
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, payload); err == nil {
			again, err := adyen.Effects(compact.Bytes())
			if err != nil {
				t.Fatalf("compacted payload fails: %v", err)
			}
			if !reflect.DeepEqual(fx, again) {
				t.Fatalf("compacted payload maps differently:\n%+v\n%+v", fx, again)
			}
		}
	})
}
