package adyen_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
	"github.com/paygate/paygate/strictjson"
)

var (
	testKey  = []byte("0123456789abcdef0123456789abcdef")
	oldKey   = []byte("fedcba9876543210fedcba9876543210")
	wrongKey = []byte("not-the-key-not-the-key-not-the!")
)

const (
	testUser  = "adyen-webhooks"
	testPass  = "s3cret-Pa55word"
	secretRef = "order-SECRET-REF-7781"
)

var now = time.Date(2026, 11, 3, 9, 20, 0, 0, time.UTC)

type testBundle struct {
	rc *adyen.Receiver
}

// setup builds a receiver with the current and the old key (a rotation in
// progress) and, with basicAuth, Basic auth in front.
func setup(t *testing.T, basicAuth bool) *testBundle {
	t.Helper()
	cfg := adyen.Config{HMACKeys: [][]byte{testKey, oldKey}}
	if basicAuth {
		cfg.BasicAuth = testUser + ":" + testPass
	}
	rc, err := adyen.NewReceiver(cfg)
	require.NoError(t, err)
	return &testBundle{rc: rc}
}

// baseItem is an AUTHORISATION as Adyen sends it, unsigned.
func baseItem() adyen.Item {
	it := mkItem("QFQTPCQ8HXSKGK82", "", "PaygateECOM", secretRef, int64p(1999), "EUR", "AUTHORISATION", "true")
	it.EventDate = "2026-11-03T10:15:30+01:00"
	it.Reason = "034286:1111:03/2030"
	it.PaymentMethod = "visa"
	it.AdditionalData = map[string]any{"authCode": "034286", "cardSummary": "1111", "expiryDate": "03/2030"}
	return it
}

// signed returns it, changed by edit, then signed with key.
func signed(key []byte, edit func(*adyen.Item)) adyen.Item {
	it := baseItem()
	if edit != nil {
		edit(&it)
	}
	return withSignature(it, adyen.Sign(it, key))
}

func itemJSON(t testing.TB, it adyen.Item) []byte {
	t.Helper()
	b, err := json.Marshal(it)
	require.NoError(t, err)
	return b
}

// batchBody wraps raw items, kept byte for byte, in Adyen's envelope.
func batchBody(live string, items ...[]byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"live":%q,"notificationItems":[`, live)
	for i, raw := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"NotificationRequestItem":`)
		b.Write(raw)
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return b.Bytes()
}

func basicHeader(user, pass string) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
	return h
}

// requireNoSecrets checks an error for what it must never hold.
func requireNoSecrets(t *testing.T, err error, secrets ...string) {
	t.Helper()
	msg := err.Error()
	for _, s := range append(secrets, testPass, secretRef,
		fmt.Sprintf("%x", testKey), fmt.Sprintf("%X", testKey), string(testKey), string(oldKey)) {
		require.NotContains(t, msg, s)
	}
}

func TestReceiveValidItem(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	raw := itemJSON(t, signed(testKey, nil))
	events, err := b.rc.Receive(http.Header{}, batchBody("false", raw), now)
	require.NoError(t, err)
	require.Len(t, events, 1)
	ev := events[0]
	require.Equal(t, "adyen", ev.Provider)
	require.Equal(t, "QFQTPCQ8HXSKGK82:AUTHORISATION:true", ev.ID)
	require.Equal(t, "AUTHORISATION", ev.Type)
	require.False(t, ev.Livemode)
	require.Empty(t, ev.APIVersion)
	require.Equal(t, time.Date(2026, 11, 3, 9, 15, 30, 0, time.UTC), ev.Created)
	require.Equal(t, raw, ev.Payload)

	events, err = b.rc.Receive(http.Header{}, batchBody("true", raw), now)
	require.NoError(t, err)
	require.True(t, events[0].Livemode)
	require.Equal(t, "adyen", b.rc.Name())
}

func TestReceivePayloadIsTheItemsBytes(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	// Adyen escapes '/' and its formatting is its own: the payload keeps
	// both, and whatever else the body says, exactly.
	items := [][]byte{
		itemJSON(t, signed(testKey, func(it *adyen.Item) { it.PspReference = "AAAAAAAAAAAAAAA1" })),
		[]byte(strings.ReplaceAll(string(itemJSON(t, signed(oldKey, func(it *adyen.Item) { it.PspReference = "AAAAAAAAAAAAAAA2" }))), "/", `\/`)),
		nil,
	}
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, itemJSON(t, signed(testKey, func(it *adyen.Item) {
		it.PspReference, it.EventCode, it.OriginalReference = "AAAAAAAAAAAAAAA3", "CAPTURE", "AAAAAAAAAAAAAAA1"
	})), "\t\t", "  "))
	items[2] = pretty.Bytes()
	body := batchBody("false", items...)
	body = bytes.Replace(body, []byte(`"notificationItems":[`), []byte("\"notificationItems\" : [\n  "), 1)

	events, err := b.rc.Receive(http.Header{}, body, now)
	require.NoError(t, err)
	require.Len(t, events, 3)
	for i, ev := range events {
		require.Equal(t, items[i], ev.Payload, "item %d", i)
		require.True(t, bytes.Contains(body, ev.Payload))
		require.Equal(t, fmt.Sprintf("AAAAAAAAAAAAAAA%d", i+1), strings.SplitN(ev.ID, ":", 2)[0], "batch order")
	}
	require.Equal(t, "CAPTURE", events[2].Type)

	// The payload is a copy: the caller may reuse the body's buffer.
	want := append([]byte(nil), events[0].Payload...)
	for i := range body {
		body[i] = 'x'
	}
	require.Equal(t, want, events[0].Payload)
}

func TestReceiveSignatureMatrix(t *testing.T) {
	t.Parallel()
	signedFields := map[string]func(*adyen.Item){
		"pspReference":        func(it *adyen.Item) { it.PspReference = "QFQTPCQ8HXSKGK83" },
		"originalReference":   func(it *adyen.Item) { it.OriginalReference = "QFQTPCQ8HXSKGK80" },
		"merchantAccountCode": func(it *adyen.Item) { it.MerchantAccountCode = "OtherECOM" },
		"merchantReference":   func(it *adyen.Item) { it.MerchantReference = "order-2" },
		"amount.value":        func(it *adyen.Item) { it.Amount.Value = int64p(1) },
		"amount.value absent": func(it *adyen.Item) { it.Amount.Value = nil },
		"amount.currency":     func(it *adyen.Item) { it.Amount.Currency = "USD" },
		"eventCode":           func(it *adyen.Item) { it.EventCode = "CAPTURE" },
		"success":             func(it *adyen.Item) { it.Success = "false" },
	}
	unsignedFields := map[string]func(*adyen.Item){
		"reason":         func(it *adyen.Item) { it.Reason = "Refused" },
		"eventDate":      func(it *adyen.Item) { it.EventDate = "2026-11-04T00:00:00+01:00" },
		"paymentMethod":  func(it *adyen.Item) { it.PaymentMethod = "mc" },
		"additionalData": func(it *adyen.Item) { it.AdditionalData["authCode"] = "999999" },
	}

	type tc struct {
		name string
		body []byte
		ok   bool
	}
	var cases []tc
	add := func(name string, ok bool, items ...adyen.Item) {
		raws := make([][]byte, len(items))
		for i, it := range items {
			raws[i] = itemJSON(t, it)
		}
		cases = append(cases, tc{name, batchBody("false", raws...), ok})
	}
	add("valid", true, signed(testKey, nil))
	add("rotated: the old key", true, signed(oldKey, nil))
	add("rotated: items under either key in one batch", true, signed(oldKey, nil), signed(testKey, nil))
	add("wrong key", false, signed(wrongKey, nil))
	for name, edit := range signedFields {
		it := signed(testKey, nil)
		edit(&it)
		add("tampered signed "+name, false, it)
	}
	for name, edit := range unsignedFields {
		it := signed(testKey, nil)
		edit(&it)
		add("tampered unsigned "+name+" still verifies", true, it)
	}
	unsignedItem := baseItem()
	add("no additionalData", false, unsignedItem)
	add("additionalData without hmacSignature", false, withSignature(unsignedItem, nil))
	add("empty hmacSignature", false, withSignature(unsignedItem, ""))
	add("hmacSignature not a string", false, withSignature(unsignedItem, 12345))
	other := signed(testKey, func(it *adyen.Item) { it.PspReference = "OTHER00000000000" })
	add("another item's signature", false, withSignature(baseItem(), other.AdditionalData["hmacSignature"]))
	cases = append(cases, tc{"live changed still verifies", batchBody("true", itemJSON(t, signed(testKey, nil))), true})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			events, err := setup(t, false).rc.Receive(http.Header{}, c.body, now)
			if c.ok {
				require.NoError(t, err)
				require.NotEmpty(t, events)
				return
			}
			require.ErrorIs(t, err, provider.ErrUnauthenticated)
			require.NotErrorIs(t, err, provider.ErrNotAnEvent)
			require.Nil(t, events)
			require.Contains(t, err.Error(), "item 0")
			requireNoSecrets(t, err, base64.StdEncoding.EncodeToString(testKey))
		})
	}
}

func TestReceiveBatchIsAllOrNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	good1 := signed(testKey, func(it *adyen.Item) { it.PspReference = "GOOD000000000001" })
	bad := signed(wrongKey, func(it *adyen.Item) { it.PspReference = "BAD0000000000002" })
	good3 := signed(oldKey, func(it *adyen.Item) { it.PspReference = "GOOD000000000003" })
	events, err := b.rc.Receive(http.Header{}, batchBody("false", itemJSON(t, good1), itemJSON(t, bad), itemJSON(t, good3)), now)
	require.ErrorIs(t, err, provider.ErrUnauthenticated)
	require.Nil(t, events)
	require.Contains(t, err.Error(), "item 1")
	sig, _ := bad.AdditionalData["hmacSignature"].(string)
	requireNoSecrets(t, err, sig, good1.AdditionalData["hmacSignature"].(string))

	// A bad signature is found even when another item's shape is wrong
	// too: nothing unauthenticated is looked at.
	badShape := signed(testKey, func(it *adyen.Item) { it.EventDate = "yesterday" })
	_, err = b.rc.Receive(http.Header{}, batchBody("false", itemJSON(t, badShape), itemJSON(t, bad)), now)
	require.ErrorIs(t, err, provider.ErrUnauthenticated)
	require.Contains(t, err.Error(), "item 1")
}

func TestReceiveBasicAuth(t *testing.T) {
	t.Parallel()
	body := batchBody("false", itemJSON(t, signed(testKey, nil)))
	raw := func(v ...string) http.Header { return http.Header{"Authorization": v} }
	for _, tc := range []struct {
		name       string
		configured bool
		header     http.Header
		ok         bool
	}{
		{"right", true, basicHeader(testUser, testPass), true},
		{"scheme in lower case", true, raw("basic " + base64.StdEncoding.EncodeToString([]byte(testUser+":"+testPass))), true},
		{"wrong password", true, basicHeader(testUser, testPass+"x"), false},
		{"wrong user", true, basicHeader("someone", testPass), false},
		{"password as user", true, basicHeader(testPass, testUser), false},
		{"missing", true, http.Header{}, false},
		{"empty", true, raw(""), false},
		{"not base64", true, raw("Basic !!!"), false},
		{"other scheme", true, raw("Bearer " + base64.StdEncoding.EncodeToString([]byte(testUser+":"+testPass))), false},
		{"twice", true, raw(basicHeader(testUser, testPass).Get("Authorization"), basicHeader(testUser, testPass).Get("Authorization")), false},
		{"not configured, none sent", false, http.Header{}, true},
		{"not configured, one sent", false, basicHeader("any", "thing"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			events, err := setup(t, tc.configured).rc.Receive(tc.header, body, now)
			if tc.ok {
				require.NoError(t, err)
				require.Len(t, events, 1)
				return
			}
			require.ErrorIs(t, err, provider.ErrUnauthenticated)
			require.Nil(t, events)
			requireNoSecrets(t, err, testUser+":"+testPass)
		})
	}

	// Basic auth comes first: a wrong one is refused before the body is
	// read at all.
	_, err := setup(t, true).rc.Receive(basicHeader(testUser, "nope"), []byte("not json"), now)
	require.ErrorIs(t, err, provider.ErrUnauthenticated)
}

func TestReceiveNotConfigured(t *testing.T) {
	t.Parallel()
	for _, cfg := range []adyen.Config{{}, {BasicAuth: testUser + ":" + testPass}} {
		rc, err := adyen.NewReceiver(cfg)
		require.NoError(t, err)
		for _, body := range [][]byte{batchBody("false", itemJSON(t, signed(testKey, nil))), []byte("junk")} {
			_, err := rc.Receive(basicHeader(testUser, testPass), body, now)
			require.ErrorIs(t, err, provider.ErrNotConfigured)
		}
	}
}

func TestNewReceiverRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []adyen.Config{
		{HMACKeys: [][]byte{testKey, {}}},
		{HMACKeys: [][]byte{testKey}, BasicAuth: testPass},
		{HMACKeys: [][]byte{testKey}, BasicAuth: ":" + testPass},
	} {
		_, err := adyen.NewReceiver(cfg)
		require.ErrorIs(t, err, adyen.ErrInvalidConfig)
		requireNoSecrets(t, err)
	}

	// The receiver keeps its own copy: a caller zeroing its key after the
	// fact changes nothing.
	key := append([]byte(nil), testKey...)
	rc, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{key}})
	require.NoError(t, err)
	clear(key)
	_, err = rc.Receive(http.Header{}, batchBody("false", itemJSON(t, signed(testKey, nil))), now)
	require.NoError(t, err)
}

// Bodies refused before any HMAC is checked: there is no item to check.
func TestReceiveHostileBodies(t *testing.T) {
	t.Parallel()
	good := string(itemJSON(t, signed(testKey, nil)))
	item := func(edit func(string) string) []byte { return batchBody("false", []byte(edit(good))) }
	for _, tc := range []struct {
		name     string
		body     []byte
		sentinel error // the strictjson sentinel also wrapped, if any
	}{
		{"empty", nil, strictjson.ErrSyntax},
		{"not JSON", []byte("live=false"), strictjson.ErrSyntax},
		{"truncated", batchBody("false", []byte(good))[:40], strictjson.ErrSyntax},
		{"trailing data", append(batchBody("false", []byte(good)), "{}"...), strictjson.ErrSyntax},
		{"an array", []byte("[" + good + "]"), strictjson.ErrInvalidValue},
		{"a bare item", []byte(good), nil},
		{"null", []byte("null"), nil},
		{"no items", []byte(`{"live":"false"}`), nil},
		{"empty items", []byte(`{"live":"false","notificationItems":[]}`), nil},
		{"items null", []byte(`{"live":"false","notificationItems":null}`), nil},
		{"items an object", []byte(`{"live":"false","notificationItems":{"NotificationRequestItem":` + good + `}}`), strictjson.ErrInvalidValue},
		{"an item a number", []byte(`{"live":"false","notificationItems":[5]}`), strictjson.ErrInvalidValue},
		{"an item null", []byte(`{"live":"false","notificationItems":[null]}`), nil},
		{"an item without its wrapper key", []byte(`{"live":"false","notificationItems":[{}]}`), nil},
		{"NotificationRequestItem a string", []byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":"x"}]}`), nil},
		{"NotificationRequestItem null", []byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":null}]}`), nil},
		{"NotificationRequestItem an array", []byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":[` + good + `]}]}`), nil},
		{"live a boolean", []byte(`{"live":false,"notificationItems":[{"NotificationRequestItem":` + good + `}]}`), strictjson.ErrInvalidValue},
		{"duplicate live", []byte(`{"live":"true","live":"false","notificationItems":[{"NotificationRequestItem":` + good + `}]}`), strictjson.ErrDuplicateKey},
		{"duplicate items", []byte(`{"live":"false","notificationItems":[],"notificationItems":[{"NotificationRequestItem":` + good + `}]}`), strictjson.ErrDuplicateKey},
		{"duplicate wrapper key", []byte(`{"live":"false","notificationItems":[{"NotificationRequestItem":{},"NotificationRequestItem":` + good + `}]}`), strictjson.ErrDuplicateKey},
		{"duplicate pspReference", item(func(s string) string {
			return strings.Replace(s, `"pspReference":`, `"pspReference":"OTHER","pspReference":`, 1)
		}), strictjson.ErrDuplicateKey},
		{"duplicate pspReference, escaped", item(func(s string) string {
			return strings.Replace(s, `"pspReference":`, `"psp\u0052eference":"OTHER","pspReference":`, 1)
		}), strictjson.ErrDuplicateKey},
		{"duplicate hmacSignature", item(func(s string) string {
			return strings.Replace(s, `"hmacSignature":`, `"hmacSignature":"x","hmacSignature":`, 1)
		}), strictjson.ErrDuplicateKey},
		{"field in another case", item(func(s string) string {
			return strings.Replace(s, `"pspReference":`, `"PspReference":"OTHER","pspReference":`, 1)
		}), strictjson.ErrKeyCase},
		{"only the field in another case", item(func(s string) string {
			return strings.Replace(s, `"pspReference":`, `"PSPReference":`, 1)
		}), strictjson.ErrKeyCase},
		{"envelope key in another case", []byte(`{"live":"false","notificationitems":[{"NotificationRequestItem":` + good + `}]}`), strictjson.ErrKeyCase},
		{"wrapper key in another case", []byte(`{"live":"false","notificationItems":[{"notificationRequestItem":` + good + `}]}`), strictjson.ErrKeyCase},
		{"amount.value in another case", item(func(s string) string { return strings.Replace(s, `"value":`, `"Value":`, 1) }), strictjson.ErrKeyCase},
		{"bad UTF-8", item(func(s string) string { return strings.Replace(s, "034286:", "0342\xff:", 1) }), strictjson.ErrInvalidUTF8},
		{"lone surrogate", item(func(s string) string { return strings.Replace(s, "034286:", `0342\ud800:`, 1) }), strictjson.ErrInvalidUTF8},
		{"NUL", item(func(s string) string { return strings.Replace(s, "QFQTPCQ8HXSKGK82", `QFQTPCQ8HXSKGK82\u0000`, 1) }), strictjson.ErrNUL},
		{"amount.value a string", item(func(s string) string { return strings.Replace(s, `"value":1999`, `"value":"1999"`, 1) }), strictjson.ErrInvalidValue},
		{"amount.value a fraction", item(func(s string) string { return strings.Replace(s, `"value":1999`, `"value":19.99`, 1) }), strictjson.ErrInvalidValue},
		{"amount.value an exponent", item(func(s string) string { return strings.Replace(s, `"value":1999`, `"value":1.999e3`, 1) }), strictjson.ErrInvalidValue},
		{"amount.value beyond int64", item(func(s string) string { return strings.Replace(s, `"value":1999`, `"value":9223372036854775808`, 1) }), strictjson.ErrInvalidValue},
		{"amount a string", item(func(s string) string {
			return strings.Replace(s, `"amount":{"value":1999,"currency":"EUR"}`, `"amount":"19.99 EUR"`, 1)
		}), strictjson.ErrInvalidValue},
		{"success a boolean", item(func(s string) string { return strings.Replace(s, `"success":"true"`, `"success":true`, 1) }), strictjson.ErrInvalidValue},
		{"additionalData an array", item(func(s string) string {
			return strings.Replace(strings.Replace(s, `"additionalData":{`, `"additionalData":[{`, 1), `},"amount"`, `}],"amount"`, 1)
		}), strictjson.ErrInvalidValue},
		{"too deep", item(func(s string) string {
			deep := strings.Repeat(`{"a":`, strictjson.MaxDepth) + "1" + strings.Repeat("}", strictjson.MaxDepth)
			return strings.Replace(s, `"additionalData":{`, `"additionalData":{"nest":`+deep+`,`, 1)
		}), strictjson.ErrTooDeep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			events, err := setup(t, false).rc.Receive(http.Header{}, tc.body, now)
			require.ErrorIs(t, err, provider.ErrNotAnEvent)
			require.NotErrorIs(t, err, provider.ErrUnauthenticated)
			require.Nil(t, events)
			if tc.sentinel != nil {
				require.ErrorIs(t, err, tc.sentinel)
			}
			requireNoSecrets(t, err, "QFQTPCQ8HXSKGK82", "034286")
		})
	}
}

// Items that are authentic but not of Adyen's shape: refused after the
// HMAC, as not an event.
func TestReceiveSignedButMalformed(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("P", provider.MaxIDLength+1)
	for _, tc := range []struct {
		name   string
		edit   func(*adyen.Item)
		live   string
		window bool // also wraps strictjson.ErrTimestampOutOfRange
	}{
		{name: "no pspReference", edit: func(it *adyen.Item) { it.PspReference = "" }},
		{name: "no eventCode", edit: func(it *adyen.Item) { it.EventCode = "" }},
		{name: "success empty", edit: func(it *adyen.Item) { it.Success = "" }},
		{name: "success TRUE", edit: func(it *adyen.Item) { it.Success = "TRUE" }},
		{name: "success yes", edit: func(it *adyen.Item) { it.Success = "yes" }},
		{name: "pspReference too long", edit: func(it *adyen.Item) { it.PspReference = long }},
		{name: "eventCode too long", edit: func(it *adyen.Item) { it.EventCode = long }},
		{name: "originalReference too long", edit: func(it *adyen.Item) { it.OriginalReference = long }},
		{name: "event id too long", edit: func(it *adyen.Item) { it.PspReference = long[:provider.MaxIDLength-10] }},
		{name: "pspReference with ':'", edit: func(it *adyen.Item) { it.PspReference = "QFQTPCQ8:HXSKGK82" }},
		{name: "eventCode with ':'", edit: func(it *adyen.Item) { it.EventCode = "AUTHORISATION:true" }},
		{name: "originalReference with ':'", edit: func(it *adyen.Item) { it.OriginalReference = "A:B" }},
		{name: "merchantAccountCode with ':'", edit: func(it *adyen.Item) { it.MerchantAccountCode = "Paygate:ECOM" }},
		{name: "currency with ':'", edit: func(it *adyen.Item) { it.Amount.Currency = "1999:EUR" }},
		{name: "currency lower case", edit: func(it *adyen.Item) { it.Amount.Currency = "eur" }},
		{name: "currency of four letters", edit: func(it *adyen.Item) { it.Amount.Currency = "EURO" }},
		{name: "no eventDate", edit: func(it *adyen.Item) { it.EventDate = "" }},
		{name: "eventDate without offset", edit: func(it *adyen.Item) { it.EventDate = "2026-11-03T10:15:30" }},
		{name: "eventDate a date", edit: func(it *adyen.Item) { it.EventDate = "2026-11-03" }},
		{name: "eventDate Unix seconds", edit: func(it *adyen.Item) { it.EventDate = "1793700930" }},
		{name: "eventDate out of range", edit: func(it *adyen.Item) { it.EventDate = "2026-13-03T10:15:30+01:00" }},
		{name: "eventDate before 2000", edit: func(it *adyen.Item) { it.EventDate = "1999-12-31T23:59:59Z" }, window: true},
		{name: "eventDate in 1970", edit: func(it *adyen.Item) { it.EventDate = "1970-01-01T00:00:00+00:00" }, window: true},
		{name: "eventDate from 2100", edit: func(it *adyen.Item) { it.EventDate = "2100-01-01T00:00:00Z" }, window: true},
		{name: "eventDate from 2100 by offset", edit: func(it *adyen.Item) { it.EventDate = "2100-01-01T00:30:00+00:29" }, window: true},
		{name: "live empty", live: `""`},
		{name: "live True", live: `"True"`},
		{name: "live 1", live: `"1"`},
		{name: "live missing", live: "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := itemJSON(t, signed(testKey, tc.edit))
			body := batchBody("false", itemJSON(t, signed(testKey, nil)), raw)
			switch tc.live {
			case "":
			case "-":
				body = bytes.Replace(body, []byte(`"live":"false",`), nil, 1)
			default:
				body = bytes.Replace(body, []byte(`"live":"false"`), []byte(`"live":`+tc.live), 1)
			}
			events, err := setup(t, false).rc.Receive(http.Header{}, body, now)
			require.ErrorIs(t, err, provider.ErrNotAnEvent)
			require.NotErrorIs(t, err, provider.ErrUnauthenticated)
			require.Nil(t, events)
			if tc.live == "" {
				require.Contains(t, err.Error(), "item 1")
			}
			if tc.window {
				require.ErrorIs(t, err, strictjson.ErrTimestampOutOfRange)
			}
			requireNoSecrets(t, err, "QFQTPCQ8", "HXSKGK82", "Paygate:ECOM", long[:20], "2026-11-03", "1999-12-31")
		})
	}
}

func TestReceiveEventDates(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	for date, want := range map[string]time.Time{
		"2026-11-03T10:15:30+01:00":     time.Date(2026, 11, 3, 9, 15, 30, 0, time.UTC),
		"2026-07-03T10:15:30+02:00":     time.Date(2026, 7, 3, 8, 15, 30, 0, time.UTC),
		"2019-09-21T11:45:24.637Z":      time.Date(2019, 9, 21, 11, 45, 24, 637_000_000, time.UTC),
		"2000-01-01T00:00:00Z":          time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		"2099-12-31T23:59:59.999-00:00": time.Date(2099, 12, 31, 23, 59, 59, 999_000_000, time.UTC),
	} {
		it := signed(testKey, func(it *adyen.Item) { it.EventDate = date })
		events, err := b.rc.Receive(http.Header{}, batchBody("false", itemJSON(t, it)), now)
		require.NoError(t, err, date)
		require.Equal(t, want, events[0].Created, date)
		require.Equal(t, time.UTC, events[0].Created.Location())
	}
}

// The real AUTHORISATION of Adyen's Java library's tests: a
// merchantReference with ':' and '\' is the merchant's own and is accepted
// (only the other signed fields must be free of ':').
func TestReceivePublishedItem(t *testing.T) {
	t.Parallel()
	// Fields from github.com/Adyen/adyen-java-api-library
	// src/test/resources/mocks/hmac-validation-webhook.json, additionalData
	// cut to a few entries (Adyen does not sign it).
	raw := []byte(`{
  "additionalData": {
    "authCode": "052095",
    "cardSummary": "1111",
    "expiryDate": "03/2030",
    "hmacSignature": "CZErGCNQaSsxbaQfZaJlakqo7KPP+mIa8a+wx3yNs9A=",
    "paymentMethod": "visa"
  },
  "amount": {
    "currency": "EUR",
    "value": 1000
  },
  "eventCode": "AUTHORISATION",
  "eventDate": "2023-01-10T13:42:29+01:00",
  "merchantAccountCode": "AntoniStroinski",
  "merchantReference": "\\:/\\/slashes are fun",
  "operations": [
    "CANCEL",
    "CAPTURE",
    "REFUND"
  ],
  "paymentMethod": "visa",
  "pspReference": "ZVWN7D3WSMK2WN82",
  "reason": "052095:1111:03/2030",
  "success": "true"
}`)
	rc, err := adyen.NewReceiver(adyen.Config{HMACKeys: [][]byte{mustHex(t, vectors[3].key)}})
	require.NoError(t, err)
	events, err := rc.Receive(http.Header{}, batchBody("false", raw), now)
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, "ZVWN7D3WSMK2WN82:AUTHORISATION:true", events[0].ID)
	require.Equal(t, raw, events[0].Payload)
	it, err := adyen.DecodeItem(events[0].Payload)
	require.NoError(t, err)
	require.Equal(t, `\:/\/slashes are fun`, it.MerchantReference)

	_, err = setup(t, false).rc.Receive(http.Header{}, batchBody("false", raw), now)
	require.ErrorIs(t, err, provider.ErrUnauthenticated, "under another key")
}

func TestAcknowledge(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	for _, dup := range []bool{false, true} {
		a := b.rc.Acknowledge([]provider.Event{{}}, []bool{dup})
		require.Equal(t, http.StatusOK, a.Status)
		require.Equal(t, "text/plain", a.ContentType)
		require.Equal(t, "[accepted]", string(a.Body))
	}
}

// requestSentinels are the errors a Receiver may fail with for Adyen.
var requestSentinels = []error{provider.ErrNotConfigured, provider.ErrUnauthenticated, provider.ErrNotAnEvent}

func wrapsOneSentinel(err error) bool {
	n := 0
	for _, s := range requestSentinels {
		if errors.Is(err, s) {
			n++
		}
	}
	return n == 1
}

// Adyen joins the signed fields with ':' and escapes nothing, so one
// signature fits every way of splitting the same text into fields. Only
// merchantReference may hold ':', which leaves one way.
func TestSigningStringCannotBeResplit(t *testing.T) {
	t.Parallel()
	b := setup(t, false)
	genuine := signed(testKey, func(it *adyen.Item) { it.MerchantReference = "order:5" })
	_, err := b.rc.Receive(http.Header{}, batchBody("false", itemJSON(t, genuine)), now)
	require.NoError(t, err, "a merchantReference with ':' is the merchant's own")

	for name, edit := range map[string]func(*adyen.Item){
		"amount moved into the currency": func(it *adyen.Item) {
			it.MerchantReference, it.Amount.Value, it.Amount.Currency = "order", int64p(5), "1999:EUR"
		},
		"account moved into originalReference": func(it *adyen.Item) {
			it.OriginalReference, it.MerchantAccountCode, it.MerchantReference = ":PaygateECOM", "order", "5"
		},
	} {
		forged := genuine
		edit(&forged)
		require.Equal(t, genuine.SigningString(), forged.SigningString(), name)
		require.NoError(t, adyen.Verify(forged, [][]byte{testKey}), "%s: the HMAC alone cannot tell", name)
		_, err := b.rc.Receive(http.Header{}, batchBody("false", itemJSON(t, forged)), now)
		require.ErrorIs(t, err, provider.ErrNotAnEvent, name)
	}
}
