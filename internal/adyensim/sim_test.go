package adyensim_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
)

// winter is a Tuesday in November: Amsterdam is at +01:00.
var winter = time.Date(2026, 11, 3, 9, 15, 30, 0, time.UTC)

func newSim(t *testing.T) *adyensim.Sim {
	t.Helper()
	return adyensim.New(adyensim.Config{Seed: 42, Start: winter})
}

func keys(t *testing.T, sim *adyensim.Sim) [][]byte {
	t.Helper()
	k, err := adyen.ParseKeys(sim.HMACKeyHex())
	require.NoError(t, err, "the key as the Customer Area shows it is what paygate is configured with")
	return k
}

// scripted is what runScript did: the items of every lifecycle method, in
// order, and the references involved.
type scripted struct {
	items                                   []adyensim.Item
	payment, refused, capture, refund       string
	cancel, reversal, dispute, failedRefund string
}

func runScript(t *testing.T, sim *adyensim.Sim) scripted {
	t.Helper()
	var s scripted
	add := func(it adyensim.Item) { s.items = append(s.items, it); sim.Advance(time.Minute) }
	var it adyensim.Item
	s.payment, it = sim.Authorise(1999, "eur", "order-1", true)
	add(it)
	s.refused, it = sim.Authorise(500, "EUR", "order-2", false)
	add(it)
	s.capture, it = sim.Capture(s.payment, 1999)
	add(it)
	add(sim.CaptureFailed(s.payment, s.capture, 1999))
	s.refund, it = sim.Refund(s.payment, 500, true)
	add(it)
	add(sim.RefundFailed(s.payment, s.refund, 500))
	add(sim.RefundedReversed(s.payment, s.refund, 500))
	s.failedRefund, it = sim.Refund(s.payment, 700, false)
	add(it)
	s.dispute, it = sim.Chargeback(s.payment, 1999, "Undefended")
	add(it)
	add(sim.ChargebackReversed(s.payment, s.dispute, 1999))
	add(sim.SecondChargeback(s.payment, s.dispute, 1999))

	other, _ := sim.Authorise(3000, "USD", "order-3", true)
	s.cancel, it = sim.Cancel(other)
	add(it)
	third, _ := sim.Authorise(4000, "USD", "order-4", true)
	s.reversal, it = sim.CancelOrRefund(third, "refund")
	add(it)
	_, it = sim.CancelOrRefund(third, "cancel")
	add(it)
	return s
}

func decodeGeneric(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return m
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestItemsHaveAdyensShape(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	s := runScript(t, sim)

	body := decodeGeneric(t, sim.Batch(false, s.items...))
	require.Equal(t, []string{"live", "notificationItems"}, keysOf(body))
	require.Equal(t, "false", body["live"], "live is a string")
	wrapped := body["notificationItems"].([]any)
	require.Len(t, wrapped, len(s.items))

	wantCodes := []string{
		"AUTHORISATION", "AUTHORISATION", "CAPTURE", "CAPTURE_FAILED", "REFUND", "REFUND_FAILED",
		"REFUNDED_REVERSED", "REFUND", "CHARGEBACK", "CHARGEBACK_REVERSED", "SECOND_CHARGEBACK",
		"CANCELLATION", "CANCEL_OR_REFUND", "CANCEL_OR_REFUND",
	}
	for i, w := range wrapped {
		wm := w.(map[string]any)
		require.Equal(t, []string{"NotificationRequestItem"}, keysOf(wm))
		it := wm["NotificationRequestItem"].(map[string]any)
		code := it["eventCode"].(string)
		require.Equal(t, wantCodes[i], code, "item %d", i)

		require.Regexp(t, `^[0-9A-Z]{16}$`, it["pspReference"], "%s: pspReference", code)
		require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$`, it["eventDate"], "%s: eventDate", code)
		require.Equal(t, adyensim.DefaultMerchantAccount, it["merchantAccountCode"])
		require.Equal(t, "visa", it["paymentMethod"])
		require.Contains(t, []any{"true", "false"}, it["success"])
		require.Contains(t, it, "reason", "%s: reason is always sent, if empty", code)
		amount := it["amount"].(map[string]any)
		require.Equal(t, []string{"currency", "value"}, keysOf(amount))
		require.Regexp(t, `^[A-Z]{3}$`, amount["currency"])
		require.IsType(t, float64(0), amount["value"])
		ad := it["additionalData"].(map[string]any)
		require.Regexp(t, `^[A-Za-z0-9+/]{43}=$`, ad["hmacSignature"], "%s: signature", code)

		if code == "AUTHORISATION" {
			require.NotContains(t, it, "originalReference", "Adyen's AUTHORISATION has none")
		} else {
			require.Regexp(t, `^[0-9A-Z]{16}$`, it["originalReference"], code)
			require.NotEqual(t, it["pspReference"], it["originalReference"], code)
			require.NotContains(t, it, "operations", code)
		}
		switch code {
		case "CHARGEBACK", "CHARGEBACK_REVERSED", "SECOND_CHARGEBACK":
			require.Equal(t, s.dispute, it["pspReference"], "%s: a dispute's events all carry its pspReference", code)
			require.Equal(t, s.payment, it["originalReference"])
			require.Equal(t, "10.4", ad["chargebackReasonCode"])
			require.Equal(t, "visa", ad["chargebackSchemeCode"])
			require.Equal(t, map[string]string{"CHARGEBACK": "Undefended", "CHARGEBACK_REVERSED": "Won", "SECOND_CHARGEBACK": "Lost"}[code], ad["disputeStatus"])
		case "CANCEL_OR_REFUND":
			require.Contains(t, []any{"cancel", "refund"}, ad["modification.action"])
		}
	}

	auth := wrapped[0].(map[string]any)["NotificationRequestItem"].(map[string]any)
	require.Equal(t, []any{"CANCEL", "CAPTURE", "REFUND"}, auth["operations"])
	require.Regexp(t, `^\d{6}:1111:03/2030$`, auth["reason"])
	require.Equal(t, s.payment, auth["pspReference"])
	require.Equal(t, "EUR", auth["amount"].(map[string]any)["currency"], "currencies are upper case")
	refused := wrapped[1].(map[string]any)["NotificationRequestItem"].(map[string]any)
	require.Equal(t, "false", refused["success"])
	require.NotContains(t, refused, "operations")
	require.NotEmpty(t, refused["reason"])

	require.Equal(t, s.capture, s.items[3].PspReference, "CAPTURE_FAILED carries the capture's reference")
	require.Equal(t, "true", s.items[3].Success, "the failure is the event")
	require.Equal(t, s.refund, s.items[5].PspReference, "REFUND_FAILED carries the refund's reference")
	require.Equal(t, s.refund, s.items[6].PspReference, "REFUNDED_REVERSED carries the refund's reference")
	require.Equal(t, "false", s.items[7].Success)
	require.Equal(t, "refund", s.items[12].AdditionalData["modification.action"])
	require.Equal(t, "cancel", s.items[13].AdditionalData["modification.action"])
	require.Equal(t, "2026-11-17T10:23:30+01:00", s.items[8].AdditionalData["defensePeriodEndsAt"], "fourteen days after the chargeback")
}

func TestEveryItemDecodesAndVerifies(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	s := runScript(t, sim)
	k := keys(t, sim)
	seen := map[string]bool{}
	for _, it := range s.items {
		raw, err := json.Marshal(it)
		require.NoError(t, err)
		got, err := adyen.DecodeItem(raw)
		require.NoError(t, err, "%s", raw)
		require.NoError(t, adyen.Verify(got, k), it.EventCode)
		require.Equal(t, it.AdditionalData["hmacSignature"], adyen.Sign(got, k[0]), "the simulator and paygate sign alike")

		id := adyen.EventID(got)
		require.False(t, seen[id], "event id %s twice", id)
		seen[id] = true

		wrong := append([]byte(nil), k[0]...)
		wrong[0] ^= 1
		require.ErrorIs(t, adyen.Verify(got, [][]byte{wrong}), provider.ErrUnauthenticated)
	}
}

// The simulator's signer against the published vectors paygate's are
// checked with: an item of Adyen's Java library's tests
// (github.com/Adyen/adyen-java-api-library,
// src/test/resources/mocks/hmac-validation-webhook.json with the key of
// src/test/java/com/adyen/util/HMACValidatorTest.java) and of its Go
// library's (github.com/Adyen/adyen-go-api-library,
// src/hmacvalidator/hmacvalidator_test.go).
func TestSignMatchesPublishedVectors(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		key  string
		item adyensim.Item
		sig  string
	}{
		{
			key: "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174",
			item: adyensim.Item{
				PspReference: "ZVWN7D3WSMK2WN82", MerchantAccountCode: "AntoniStroinski", MerchantReference: `\:/\/slashes are fun`,
				Amount: adyensim.Amount{Currency: "EUR", Value: 1000}, EventCode: "AUTHORISATION", Success: "true",
			},
			sig: "CZErGCNQaSsxbaQfZaJlakqo7KPP+mIa8a+wx3yNs9A=",
		},
		{
			key: "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00",
			item: adyensim.Item{
				PspReference: "pspReference", OriginalReference: "originalReference", MerchantAccountCode: "merchantAccount",
				MerchantReference: "reference", Amount: adyensim.Amount{Currency: "EUR", Value: 1000}, EventCode: "EVENT", Success: "true",
			},
			sig: "ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc=",
		},
	} {
		key, err := hex.DecodeString(v.key)
		require.NoError(t, err)
		require.Equal(t, v.sig, adyensim.Sign(v.item, key))
		sim := adyensim.New(adyensim.Config{HMACKey: key})
		require.Equal(t, v.sig, sim.Sign(v.item).AdditionalData["hmacSignature"])
	}
}

func TestReferencesAreUniqueAndReproducible(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	seen := map[string]bool{}
	fresh := func(psp string) {
		require.Regexp(t, `^[0-9A-Z]{16}$`, psp)
		require.False(t, seen[psp], "reference %s handed out twice", psp)
		seen[psp] = true
	}
	for i := range 300 {
		p, _ := sim.Authorise(int64(100+i), "EUR", fmt.Sprintf("order-%d", i), true)
		fresh(p)
		c, _ := sim.Capture(p, 50)
		fresh(c)
		r, _ := sim.Refund(p, 10, true)
		fresh(r)
		d, _ := sim.Chargeback(p, 40, "Pending")
		fresh(d)
		x, _ := sim.Cancel(p)
		fresh(x)
	}

	same := func(seed int64) []byte {
		sim := adyensim.New(adyensim.Config{Seed: seed, Start: winter})
		return sim.Batch(false, runScript(t, sim).items...)
	}
	require.Equal(t, same(7), same(7), "same seed, same script: same bytes")
	require.NotEqual(t, same(7), same(8))
	require.NotEqual(t, adyensim.New(adyensim.Config{}).Seed(), int64(0), "a random seed is drawn, and told")
}

func TestClockDatesItems(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	require.Equal(t, winter, sim.Now())
	p, it := sim.Authorise(1000, "EUR", "order-1", true)
	require.Equal(t, "2026-11-03T10:15:30+01:00", it.EventDate, "Amsterdam in winter")

	sim.Advance(90*time.Minute + 400*time.Millisecond)
	_, it = sim.Capture(p, 1000)
	require.Equal(t, "2026-11-03T11:45:30+01:00", it.EventDate, "to the second")

	sim.SetNow(time.Date(2027, 7, 1, 22, 30, 0, 0, time.UTC))
	_, it = sim.Refund(p, 100, true)
	require.Equal(t, "2027-07-02T00:30:00+02:00", it.EventDate, "Amsterdam in summer, the next day")

	sim.SetNow(winter)
	_, it = sim.Refund(p, 100, true)
	require.Equal(t, "2026-11-03T10:15:30+01:00", it.EventDate, "the clock may go back")

	utc := adyensim.New(adyensim.Config{Start: winter, Location: time.UTC})
	_, it = utc.Authorise(1000, "EUR", "order-1", true)
	require.Equal(t, "2026-11-03T09:15:30+00:00", it.EventDate, "an offset, never Z")

	got, err := adyen.DecodeItem(mustJSON(t, it))
	require.NoError(t, err)
	created, err := got.EventTime()
	require.NoError(t, err)
	require.Equal(t, winter, created)
}

func mustJSON(t *testing.T, it adyensim.Item) []byte {
	t.Helper()
	b, err := json.Marshal(it)
	require.NoError(t, err)
	return b
}

func TestRedeliver(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	_, first := sim.Authorise(1000, "EUR", "order-1", true)
	sim.Advance(3 * time.Hour)
	again := sim.Redeliver(first)
	require.Equal(t, "2026-11-03T13:15:30+01:00", again.EventDate)
	require.Equal(t, "2026-11-03T10:15:30+01:00", first.EventDate, "the original is untouched")
	require.Equal(t, first.AdditionalData["hmacSignature"], again.AdditionalData["hmacSignature"], "same signed fields, same signature")

	again.Reason = "a different reason"
	again.AdditionalData["authCode"] = "000000"
	require.NotEqual(t, "000000", first.AdditionalData["authCode"], "the copy shares no map")

	k := keys(t, sim)
	a, err := adyen.DecodeItem(mustJSON(t, first))
	require.NoError(t, err)
	b, err := adyen.DecodeItem(mustJSON(t, again))
	require.NoError(t, err)
	require.NoError(t, adyen.Verify(b, k), "unsigned fields changed: still authentic")
	require.Equal(t, adyen.EventID(a), adyen.EventID(b), "and the same event")
	require.NotEqual(t, mustJSON(t, first), mustJSON(t, again))
}

func TestSignAfterTampering(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	_, it := sim.Authorise(1000, "EUR", "order-1", true)
	it.Amount.Value = 1
	k := keys(t, sim)
	tampered, err := adyen.DecodeItem(mustJSON(t, it))
	require.NoError(t, err)
	require.ErrorIs(t, adyen.Verify(tampered, k), provider.ErrUnauthenticated)

	resigned, err := adyen.DecodeItem(mustJSON(t, sim.Sign(it)))
	require.NoError(t, err)
	require.NoError(t, adyen.Verify(resigned, k))
}

func TestScriptBugsPanic(t *testing.T) {
	t.Parallel()
	sim := newSim(t)
	paid, _ := sim.Authorise(1000, "EUR", "order-1", true)
	refused, _ := sim.Authorise(1000, "EUR", "order-2", false)
	capture, _ := sim.Capture(paid, 1000)
	refund, _ := sim.Refund(paid, 100, true)
	dispute, _ := sim.Chargeback(paid, 1000, "Undefended")
	other, _ := sim.Authorise(1000, "EUR", "order-3", true)

	for name, f := range map[string]func(){
		"unknown payment":           func() { sim.Capture("NOPE000000000000", 1) },
		"capture a refused payment": func() { sim.Capture(refused, 1000) },
		"refund a refused payment":  func() { sim.Refund(refused, 1000, true) },
		"zero value":                func() { sim.Capture(paid, 0) },
		"negative value":            func() { sim.Authorise(-1, "EUR", "x", true) },
		"bad currency":              func() { sim.Authorise(1, "EURO", "x", true) },
		"capture failed of a refund": func() {
			sim.CaptureFailed(paid, refund, 1000)
		},
		"capture of another payment":  func() { sim.CaptureFailed(other, capture, 1000) },
		"refund failed of a capture":  func() { sim.RefundFailed(paid, capture, 100) },
		"reversal of another dispute": func() { sim.ChargebackReversed(other, dispute, 1000) },
		"second chargeback of none":   func() { sim.SecondChargeback(paid, refund, 1000) },
		"unknown action":              func() { sim.CancelOrRefund(paid, "void") },
		"unknown dispute status":      func() { sim.Chargeback(paid, 1000, "Open") },
	} {
		require.Panics(t, f, name)
	}
}
