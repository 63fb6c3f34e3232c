package strictjson_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/strictjson"
)

var sentinels = []error{
	strictjson.ErrSyntax, strictjson.ErrDuplicateKey, strictjson.ErrInvalidUTF8, strictjson.ErrNUL,
	strictjson.ErrKeyCase, strictjson.ErrUnknownField, strictjson.ErrTooDeep, strictjson.ErrNumberRange,
	strictjson.ErrInvalidValue,
}

func TestValid(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1.5e-3`, `-12E+7`, `""`, ` {"a" : [1, 2, {"b": null}] } `,
		`"\ud83d\ude00"`, `"😀"`, `"\ufffd"`, "\"\uFFFD\"", `"\u00e9\n\t\"\\\/"`, `{"a":1,"A":2}`, `{"":1}`,
		`{"a":{"x":1},"b":{"x":2}}`, `[{"x":1},{"x":1}]`, "\t\r\n[]\n",
		`1e1000`, `-1e-1000`, strings.Repeat("[", strictjson.MaxDepth) + strings.Repeat("]", strictjson.MaxDepth),
		strings.Repeat("9", strictjson.MaxNumberLength),
	} {
		require.NoError(t, strictjson.Valid([]byte(ok)), "%.80q", ok)
		require.True(t, json.Valid([]byte(ok)), "%.80q is JSON to encoding/json too", ok)
	}
	for body, want := range map[string]error{
		``:                          strictjson.ErrSyntax,
		`   `:                       strictjson.ErrSyntax,
		`{`:                         strictjson.ErrSyntax,
		`{"a":1,}`:                  strictjson.ErrSyntax,
		`[1,]`:                      strictjson.ErrSyntax,
		`{"a" 1}`:                   strictjson.ErrSyntax,
		`{a:1}`:                     strictjson.ErrSyntax,
		`{} {}`:                     strictjson.ErrSyntax,
		`01`:                        strictjson.ErrSyntax,
		`1.`:                        strictjson.ErrSyntax,
		`.5`:                        strictjson.ErrSyntax,
		`-`:                         strictjson.ErrSyntax,
		`1e`:                        strictjson.ErrSyntax,
		`+1`:                        strictjson.ErrSyntax,
		`tru`:                       strictjson.ErrSyntax,
		`nul`:                       strictjson.ErrSyntax,
		`"a`:                        strictjson.ErrSyntax,
		"\"a\tb\"":                  strictjson.ErrSyntax,
		`"\x"`:                      strictjson.ErrSyntax,
		`"\u12"`:                    strictjson.ErrSyntax,
		`"\u12g4"`:                  strictjson.ErrSyntax,
		"\xef\xbb\xbf{}":            strictjson.ErrSyntax, // a BOM is not whitespace
		"\u00a0{}":                  strictjson.ErrSyntax,
		`{"id":"A","id":"B"}`:       strictjson.ErrDuplicateKey,
		`{"id":"A","\u0069d":"B"}`:  strictjson.ErrDuplicateKey,
		`{"x":{"a":1,"b":2,"a":3}}`: strictjson.ErrDuplicateKey,
		`[{"a":1},{"b":1,"b":1}]`:   strictjson.ErrDuplicateKey,
		`{"😀":1,"\ud83d\ude00":2}`:  strictjson.ErrDuplicateKey,
		"\"\xff\"":                  strictjson.ErrInvalidUTF8,
		"\"a\xc3\"":                 strictjson.ErrInvalidUTF8,
		"\"\xed\xa0\x80\"":          strictjson.ErrInvalidUTF8, // a surrogate encoded as UTF-8
		"\"\xc0\xaf\"":              strictjson.ErrInvalidUTF8, // overlong
		"{\"\xfe\":1}":              strictjson.ErrInvalidUTF8,
		`"\ud800"`:                  strictjson.ErrInvalidUTF8,
		`"\udc00"`:                  strictjson.ErrInvalidUTF8,
		`"\ud800\u0041"`:            strictjson.ErrInvalidUTF8,
		`"\ud800\ud800"`:            strictjson.ErrInvalidUTF8,
		`"\ude00\ud83d"`:            strictjson.ErrInvalidUTF8,
		`"\ud83d"`:                  strictjson.ErrInvalidUTF8,
		`"\ud83dx"`:                 strictjson.ErrInvalidUTF8,
		`{"\ud800":1}`:              strictjson.ErrInvalidUTF8,
		`"a\u0000b"`:                strictjson.ErrNUL,
		`{"\u0000":1}`:              strictjson.ErrNUL,
		`1e1001`:                    strictjson.ErrNumberRange,
		`1e-1001`:                   strictjson.ErrNumberRange,
		`1e99999999999999999999`:    strictjson.ErrNumberRange,
		strings.Repeat("1", 101):    strictjson.ErrNumberRange,
		strings.Repeat("[", 129) + strings.Repeat("]", 129):           strictjson.ErrTooDeep,
		strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200): strictjson.ErrTooDeep,
	} {
		err := strictjson.Valid([]byte(body))
		require.ErrorIs(t, err, want, "%.80q", body)
		for _, other := range sentinels {
			if other != want {
				require.NotErrorIs(t, err, other, "%.80q wraps one sentinel", body)
			}
		}
	}
}

type inner struct {
	Amount int64  `json:"amount"`
	Note   string `json:"note,omitempty"`
}

type Embedded struct {
	Promoted string `json:"promoted"`
}

type envelope struct {
	Embedded
	ID       string            `json:"id"`
	Type     string            `json:"type"`
	Created  *int64            `json:"created"`
	Untagged string            // its JSON name is "Untagged"
	Skipped  string            `json:"-"`
	Inner    inner             `json:"inner"`
	Ptr      *inner            `json:"ptr"`
	List     []inner           `json:"list"`
	ByName   map[string]inner  `json:"by_name"`
	Raw      json.RawMessage   `json:"raw"`
	Any      any               `json:"any"`
	At       time.Time         `json:"at"`
	Labels   map[string]string `json:"labels"`
	hidden   string
}

func TestUnmarshalMatchesKeysExactly(t *testing.T) {
	t.Parallel()
	var e envelope
	require.NoError(t, strictjson.Unmarshal([]byte(`{"id":"evt_1","type":"x","created":1700000000,"Untagged":"u","promoted":"p",
		"inner":{"amount":5},"ptr":{"amount":6},"list":[{"amount":7}],"by_name":{"A":{"amount":8},"a":{"amount":9}},
		"raw":{"Any":1,"ANY":2},"any":{"Id":1},"at":"2024-06-20T12:00:00Z","labels":{"K":"v","k":"w"},"unknown":{"ID":1}}`), &e))
	require.Equal(t, "evt_1", e.ID)
	require.Equal(t, "p", e.Promoted)
	require.Equal(t, "u", e.Untagged)
	require.Equal(t, int64(1700000000), *e.Created)
	require.Equal(t, int64(6), e.Ptr.Amount)
	require.Equal(t, int64(9), e.ByName["a"].Amount, "map keys are data: case is theirs")
	require.Equal(t, `{"Any":1,"ANY":2}`, string(e.Raw), "a raw value's keys belong to whoever decodes it")
	require.Equal(t, "", e.hidden)

	for body, want := range map[string]error{
		`{"ID":"evt_1"}`:                       strictjson.ErrKeyCase,
		`{"id":"A","ID":"B"}`:                  strictjson.ErrKeyCase,
		`{"ID":"B","id":"A"}`:                  strictjson.ErrKeyCase,
		`{"Type":"x"}`:                         strictjson.ErrKeyCase,
		`{"untagged":"u"}`:                     strictjson.ErrKeyCase,
		`{"Promoted":"p"}`:                     strictjson.ErrKeyCase,
		`{"inner":{"Amount":5}}`:               strictjson.ErrKeyCase,
		`{"ptr":{"AMOUNT":5}}`:                 strictjson.ErrKeyCase,
		`{"list":[{"amount":1},{"Amount":2}]}`: strictjson.ErrKeyCase,
		`{"by_name":{"a":{"Note":"n"}}}`:       strictjson.ErrKeyCase,
		`{"Inner":{}}`:                         strictjson.ErrKeyCase,
		`{"\u0049D":"B"}`:                      strictjson.ErrKeyCase, // "ID", escaped
		`{"typ\u0065":"x","TYPE":"y"}`:         strictjson.ErrKeyCase,
		`{"inner":{"amount":5,"amount":6}}`:    strictjson.ErrDuplicateKey,
		`{"raw":{"a":1,"a":2}}`:                strictjson.ErrDuplicateKey,
		`{"id":"A","id":"B"}`:                  strictjson.ErrDuplicateKey,
		`{"id":"\ud800"}`:                      strictjson.ErrInvalidUTF8,
		`{"id":7}`:                             strictjson.ErrInvalidValue,
		`{"at":"yesterday"}`:                   strictjson.ErrInvalidValue,
		`{"inner":[]}`:                         strictjson.ErrInvalidValue,
		`[]`:                                   strictjson.ErrInvalidValue,
	} {
		var e envelope
		err := strictjson.Unmarshal([]byte(body), &e)
		require.ErrorIs(t, err, want, body)
	}
	// Unicode folding as encoding/json does it: the Kelvin sign folds to k,
	// the long s to s.
	type ks struct {
		Kind   string `json:"kind"`
		Status string `json:"status"`
	}
	for _, body := range []string{`{"\u212aind":"x"}`, `{"ſtatus":"x"}`, `{"KIND":"x"}`} {
		var v ks
		require.ErrorIs(t, strictjson.Unmarshal([]byte(body), &v), strictjson.ErrKeyCase, body)
		var lenient ks
		require.NoError(t, json.Unmarshal([]byte(body), &lenient))
		require.NotEqual(t, ks{}, lenient, "%s: encoding/json alone folds it onto a field", body)
	}
}

func TestUnmarshalOptsUnknownFields(t *testing.T) {
	t.Parallel()
	type req struct {
		Reason string `json:"reason"`
		Inner  inner  `json:"inner"`
	}
	strict := &strictjson.Opts{DisallowUnknownFields: true}
	var r req
	require.NoError(t, strictjson.UnmarshalOpts([]byte(`{"reason":"r","inner":{"amount":1}}`), &r, strict))
	require.Equal(t, "r", r.Reason)
	for body, want := range map[string]error{
		`{"reasons":"r"}`:              strictjson.ErrUnknownField,
		`{"inner":{"amount":1,"x":2}}`: strictjson.ErrUnknownField,
		`{"REASON":"r"}`:               strictjson.ErrKeyCase,
	} {
		require.ErrorIs(t, strictjson.UnmarshalOpts([]byte(body), &r, strict), want, body)
	}
	require.NoError(t, strictjson.UnmarshalOpts([]byte(`{"reasons":"r"}`), &r, nil), "unknown fields are allowed by default")

	require.ErrorIs(t, strictjson.Unmarshal([]byte(`{}`), r), strictjson.ErrInvalidValue, "not a pointer")
	require.ErrorIs(t, strictjson.Unmarshal([]byte(`{}`), (*req)(nil)), strictjson.ErrInvalidValue, "a nil pointer")
}

func TestErrorsDoNotEchoTheBody(t *testing.T) {
	t.Parallel()
	var e envelope
	err := strictjson.Unmarshal([]byte(`{"id":"secret-value","id":"other-secret"}`), &e)
	require.ErrorIs(t, err, strictjson.ErrDuplicateKey)
	require.NotContains(t, err.Error(), "secret")
	err = strictjson.Unmarshal([]byte(`{"`+strings.Repeat("k", 10_000)+`":1,"`+strings.Repeat("k", 10_000)+`":1}`), &e)
	require.ErrorIs(t, err, strictjson.ErrDuplicateKey)
	require.Less(t, len(err.Error()), 200, "a long key is shown cut")
}

func TestCanonical(t *testing.T) {
	t.Parallel()
	same := []string{
		`{"status":"poison","dry_run":true,"n":[1,2.50,{"b":1,"a":2}]}`,
		`{ "dry_run" : true , "status" : "poison", "n" : [ 1 , 2.50 , { "a" : 2 , "b" : 1 } ] }`,
		`{"n":[1,2.50,{"a":2,"b":1}],"st\u0061tus":"p\u006fison","dry_run":true}`,
	}
	want, err := strictjson.Canonical([]byte(same[0]))
	require.NoError(t, err)
	require.Equal(t, `{"dry_run":true,"n":[1,2.50,{"a":2,"b":1}],"status":"poison"}`, string(want))
	for _, s := range same[1:] {
		got, err := strictjson.Canonical([]byte(s))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), s)
	}
	for _, other := range []string{`{"status":"poison","dry_run":false}`, `{"status":"Poison","dry_run":true}`, `{"STATUS":"poison","dry_run":true}`} {
		got, err := strictjson.Canonical([]byte(other))
		require.NoError(t, err)
		require.NotEqual(t, string(want), string(got), other)
	}
	_, err = strictjson.Canonical([]byte(`{"dry_run":false,"dry_run":true}`))
	require.ErrorIs(t, err, strictjson.ErrDuplicateKey)
}

func TestValidUnix(t *testing.T) {
	t.Parallel()
	for sec, ok := range map[int64]bool{
		0: false, -1: false, -5_000_000_000: false, 946_684_799: false, 946_684_800: true, 1_700_000_000: true,
		4_102_444_799: true, 4_102_444_800: false, 10_000_000_000_000: false,
		9_223_372_036_854_775_807: false, -9_223_372_036_854_775_808: false,
	} {
		at, err := strictjson.ValidUnix(sec)
		if !ok {
			require.ErrorIs(t, err, strictjson.ErrTimestampOutOfRange, "%d", sec)
			require.True(t, at.IsZero())
			continue
		}
		require.NoError(t, err, "%d", sec)
		require.Equal(t, sec, at.Unix())
		require.Equal(t, time.UTC, at.Location())
		require.True(t, !at.Before(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) && at.Before(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)))
	}
}

// TestEveryErrorWrapsOneSentinel: callers map errors to answers with
// errors.Is; an error that wraps none would reach them unclassified.
func TestEveryErrorWrapsOneSentinel(t *testing.T) {
	t.Parallel()
	var e envelope
	for _, body := range []string{`{`, `{"id":1}`, `{"id":"a","id":"b"}`, `{"ID":"a"}`, `"\ud800"`, `"\u0000"`, `1e5000`} {
		err := strictjson.Unmarshal([]byte(body), &e)
		require.Error(t, err)
		n := 0
		for _, s := range sentinels {
			if errors.Is(err, s) {
				n++
			}
		}
		require.Equal(t, 1, n, "%s: %v", body, err)
	}
}

// TestDuplicateKeysAtEverySize: a duplicate is found however many keys its
// object has (compared in place for the usual few, in a map past a
// hundred), wherever it falls, escaped or not; the same key in a parent and
// a child object, or in two sibling objects, is no duplicate.
func TestDuplicateKeysAtEverySize(t *testing.T) {
	t.Parallel()
	object := func(n int, extra ...string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		for _, kv := range extra {
			b.WriteString(kv + ",")
		}
		b.WriteString(`"last":{"k0":{"k0":0},"k1":[{"k0":1},{"k0":2}]}}`)
		return b.String()
	}
	for _, n := range []int{1, 15, 16, 17, 60, 127, 128, 129, 1000} {
		require.NoError(t, strictjson.Valid([]byte(object(n))), "%d keys", n)
		for _, dup := range []string{`"k0":"again"`, fmt.Sprintf(`"k%d":"again"`, n-1), `"\u006b0":"again"`} {
			body := object(n, dup)
			require.ErrorIs(t, strictjson.Valid([]byte(body)), strictjson.ErrDuplicateKey, "%d keys, then %s", n, dup)
			var v map[string]any
			require.ErrorIs(t, strictjson.Unmarshal([]byte(body), &v), strictjson.ErrDuplicateKey, "%d keys, then %s", n, dup)
		}
	}
	nested := `{"a":{"a":{"a":1},"b":{"a":2}},"b":{"a":3,"b":{"b":4}}}`
	require.NoError(t, strictjson.Valid([]byte(nested)))
	require.ErrorIs(t, strictjson.Valid([]byte(`{"a":{"a":{"a":1},"b":{"a":2}},"b":{"a":3,"b":{"b":4}},"a":0}`)), strictjson.ErrDuplicateKey)
}
