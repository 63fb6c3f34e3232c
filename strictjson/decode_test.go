package strictjson_test

import (
	"encoding/json"
	"errors"
	mrand "math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/paygate/paygate/internal/adyensim"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/strictjson"
)

// The shapes decodings take: every kind the decoder fills itself, and the
// ones it hands to encoding/json, side by side.
type (
	decodeInner struct {
		ID   string            `json:"id"`
		N    *int64            `json:"n"`
		Tags []string          `json:"tags"`
		Any  any               `json:"any"`
		M    map[string]string `json:"m"`
	}
	decodeName string
	decodeWide struct {
		ID      string           `json:"id"`
		Created int64            `json:"created"`
		Small   int8             `json:"small"`
		U       uint16           `json:"u"`
		Big     uint64           `json:"big"`
		OK      bool             `json:"ok"`
		P       *bool            `json:"p"`
		F       float64          `json:"f"`
		Raw     json.RawMessage  `json:"raw"`
		PRaw    *json.RawMessage `json:"praw"`
		Items   []decodeInner    `json:"items"`
		Ptrs    []*decodeInner   `json:"ptrs"`
		Obj     *decodeInner     `json:"obj"`
		Val     decodeInner      `json:"val"`
		Bytes   []byte           `json:"bytes"`
		T       time.Time        `json:"t"`
		Named   decodeName       `json:"named"`
		Matrix  [][]int          `json:"matrix"`
		Array   [2]string        `json:"array"`
		NoTag   string
		Skipped string `json:"-"`
		hidden  string
	}
	decodeEmbedded struct {
		decodeInner
		Extra string `json:"extra"`
	}
	decodeQuoted struct {
		N int64 `json:"n,string"`
	}
	decodeSelf struct {
		ID       string        `json:"id"`
		Children []*decodeSelf `json:"children"`
	}
)

// decodeTargets makes a fresh value of each target type.
var decodeTargets = []func() any{
	func() any { return new(decodeWide) },
	func() any { return new(decodeInner) },
	func() any { return new(decodeEmbedded) },
	func() any { return new(decodeQuoted) },
	func() any { return new(decodeSelf) },
	func() any { return new([]decodeWide) },
	func() any { return new(*decodeWide) },
	func() any { return new(any) },
	func() any { return new(map[string]any) },
	func() any { return new(map[string]string) },
	func() any { return new(map[decodeName]*decodeInner) },
	func() any { return new(string) },
	func() any { return new(int32) },
}

// sameAsEncodingJSON checks that, for a body strictjson accepts, it fills
// each target exactly as encoding/json does, and that a value encoding/json
// refuses is refused, as an invalid value, by strictjson too.
func sameAsEncodingJSON(t *testing.T, body []byte) {
	t.Helper()
	if strictjson.Valid(body) != nil {
		return
	}
	for _, fresh := range decodeTargets {
		got, want := fresh(), fresh()
		err := strictjson.Unmarshal(body, got)
		jerr := json.Unmarshal(body, want)
		switch {
		case errors.Is(err, strictjson.ErrKeyCase):
			continue // refused before any decoding: encoding/json would fill the field
		case jerr != nil && err == nil:
			t.Fatalf("%q into %T: strictjson decoded what encoding/json refuses (%v)", body, got, jerr)
		case jerr == nil && err != nil:
			t.Fatalf("%q into %T: strictjson refused what encoding/json decodes: %v", body, got, err)
		case err != nil && !errors.Is(err, strictjson.ErrInvalidValue):
			t.Fatalf("%q into %T: %v, not an invalid value", body, got, err)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("%q into %T:\n got %#v\nwant %#v", body, got, reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem())
		}
	}
}

var decodeCases = []string{
	`{}`, `null`, `[]`, `"x"`, `7`, `-2147483648`, `2147483648`, `true`,
	`{"id":"a","created":1700000000,"small":-128,"u":65535,"big":18446744073709551615,"ok":true,"p":false,"f":1.5}`,
	`{"small":128}`, `{"small":-129}`, `{"u":-0}`, `{"u":65536}`, `{"big":18446744073709551616}`,
	`{"created":9223372036854775807}`, `{"created":-9223372036854775808}`, `{"created":9223372036854775808}`,
	`{"created":-0}`, `{"created":1.0}`, `{"created":1e3}`, `{"created":"1"}`, `{"created":null}`,
	`{"id":null,"ok":null,"p":null,"obj":null,"items":null,"raw":null,"praw":null,"val":null,"t":null}`,
	`{"id":1}`, `{"id":true}`, `{"id":{}}`, `{"ok":"true"}`, `{"ok":1}`, `{"p":true}`,
	`{"id":"tab\there \"quoted\" back\\slash \/ \b\f\n\r \u00e9 \ud83d\ude00 \u2028"}`,
	`{"i\u0064":"escaped key","\u0063reated":5}`, `{"unknown":{"deep":[1,{"x":"}]"}]},"id":"after"}`,
	`{"raw":{"a":[1,2,{"b":"c\"}"}]},"praw":[ 1 , 2 ]}`, `{"raw":"str","praw":7}`,
	`{"items":[],"ptrs":[],"matrix":[]}`, `{"items":[{"id":"a","n":1,"tags":["x","y"],"any":{"k":[1,"2",null]},"m":{"a":"b"}},{}]}`,
	`{"ptrs":[null,{"id":"p"}],"obj":{"n":null},"val":{"id":"v","tags":null}}`,
	`{"items":{}}`, `{"items":[1]}`, `{"obj":[]}`, `{"val":"x"}`, `{"m":{"a":1}}`,
	`{"m":{}}`, `{"m":null}`, `{"m":{"a":null,"b":"c","\u00e9":"d"}}`, `{"m":[]}`, `{"m":"x"}`, `{"a":"b","c":{"id":"x"}}`,
	`{"bytes":"aGVsbG8=","t":"2026-12-03T06:00:00Z","named":"n","matrix":[[1,2],[],[3]],"array":["a","b","c"]}`,
	`{"bytes":"not base64!","t":"yesterday"}`, `{"NoTag":"n","Skipped":"s","hidden":"h","-":"dash"}`,
	`{"extra":"e","id":"promoted","tags":["t"]}`, `{"n":"42"}`, `{"n":42}`,
	`{"id":"root","children":[{"id":"c","children":[{"id":"g","children":null}]},null]}`,
	` [ {"id":"a"} , {"created":2} ] `, "\t{\n\"id\" :\r\"spaced\" }\n",
}

func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, body := range decodeCases {
		sameAsEncodingJSON(t, []byte(body))
	}
}

// TestDecodeMatchesEncodingJSONOnProviderShapes: the simulators' bodies,
// Stripe's events and Adyen's notification batches as sent, decoded into
// the same targets as encoding/json decodes them.
func TestDecodeMatchesEncodingJSONOnProviderShapes(t *testing.T) {
	stripe := stripesim.New(stripesim.Config{Seed: 3})
	var bodies [][]byte
	for _, ev := range stripe.PayMix(mrand.New(mrand.NewPCG(3, 3)), 20, 0.5) {
		bodies = append(bodies, ev.Payload)
	}
	adyen := adyensim.New(adyensim.Config{MerchantAccount: "PaygateECOM", Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)})
	psp, auth := adyen.Authorise(1999, "EUR", "order-1", true)
	_, refund := adyen.Refund(psp, 500, true)
	_, chargeback := adyen.Chargeback(psp, 1999, "Undefended")
	bodies = append(bodies, adyen.Batch(false, auth, refund, chargeback))
	for _, body := range bodies {
		sameAsEncodingJSON(t, body)
	}
}

// TestDecodeMatchesEncodingJSONWithUnknownFieldsRefused: the requests'
// decoding (Opts.DisallowUnknownFields) agrees with a Decoder that
// disallows them, unknown keys nested in values decoded by encoding/json
// included.
func TestDecodeMatchesEncodingJSONWithUnknownFieldsRefused(t *testing.T) {
	type request struct {
		Amount *int64          `json:"amount"`
		Reason string          `json:"reason"`
		Meta   json.RawMessage `json:"meta"`
		Inner  *decodeInner    `json:"inner"`
		Embed  decodeEmbedded  `json:"embed"`
	}
	opts := &strictjson.Opts{DisallowUnknownFields: true}
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{`{"amount":100,"reason":"duplicate","meta":{"anything":1},"inner":{"id":"i"}}`, true},
		{`{"embed":{"extra":"e","id":"x"}}`, true},
		{`{"amount":100,"reasons":"typo"}`, false},
		{`{"inner":{"idd":"typo"}}`, false},
		{`{"embed":{"typo":1}}`, false},
		{`{"amount":"100"}`, false},
	} {
		var got request
		err := strictjson.UnmarshalOpts([]byte(c.body), &got, opts)
		if (err == nil) != c.ok {
			t.Fatalf("%s: err %v, want ok=%v", c.body, err, c.ok)
		}
		if err != nil {
			if !errors.Is(err, strictjson.ErrUnknownField) && !errors.Is(err, strictjson.ErrInvalidValue) {
				t.Fatalf("%s: %v, not an unknown field or invalid value", c.body, err)
			}
			continue
		}
		var want request
		if err := json.Unmarshal([]byte(c.body), &want); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %#v, encoding/json %#v (%v)", c.body, got, want, err)
		}
	}
}

// TestDecodeIntoAFilledValue: a value that is not fresh is decoded by
// encoding/json, which merges into it, as it always was.
func TestDecodeIntoAFilledValue(t *testing.T) {
	body := []byte(`{"id":"new","tags":["b"]}`)
	got := decodeInner{ID: "old", M: map[string]string{"kept": "yes"}, Tags: []string{"a", "z"}}
	want := got
	want.Tags = append([]string(nil), got.Tags...)
	want.M = map[string]string{"kept": "yes"}
	if err := strictjson.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}

func FuzzDecodeMatchesEncodingJSON(f *testing.F) {
	for _, body := range decodeCases {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		sameAsEncodingJSON(t, body)
	})
}
