package strictjson_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"unicode/utf8"

	"github.com/paygate/paygate/strictjson"
)

// FuzzUnmarshal: for any body, strict decoding either fails with exactly
// one sentinel, or reads what a lenient reader reads: encoding/json agrees
// it is JSON, its text is valid UTF-8, no object holds a key twice (a token
// stream counts them), the fields a struct receives are the values under
// exactly their names, and the canonical form is stable and decodes to the
// same value.
func FuzzUnmarshal(f *testing.F) {
	for _, seed := range []string{
		`{"id":"evt_1","object":"event","type":"charge.succeeded","created":1700000000,"data":{"object":{"id":"ch_1"}}}`,
		`{"id":"A","ID":"B"}`, `{"id":"A","id":"B"}`, `{"id":"A","\u0069d":"B"}`, `{"type":"x","TYPE":"y"}`,
		`{"data":{"Object":{}}}`, `{"id":"\ud800"}`, "{\"id\":\"\xff\"}", `{"id":"\ud83d\ude00"}`, `{"id":"\u0000"}`,
		`[1e1000,-0.5E-3]`, `[[[[]]]]`, `{"\u212aind":1}`, `{"ſtatus":1}`, `{"created":9223372036854775807}`,
		`{"a":{"b":{"c":[{"d":1},{"d":2}]}}}`, ` { } `, `"x"`, `null`, ``, `{`, `{"a":1}{"a":1}`,
	} {
		f.Add([]byte(seed))
	}
	type object struct {
		ID   string `json:"id"`
		Kind string `json:"kind"`
	}
	type target struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Created int64  `json:"created"`
		Status  string `json:"status"`
		Data    struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
		Items []object `json:"items"`
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		verr := strictjson.Valid(body)
		if verr != nil {
			requireOneSentinel(t, body, verr)
		} else {
			if !json.Valid(body) || !utf8.Valid(body) {
				t.Fatalf("%q accepted, but encoding/json or UTF-8 refuses it", body)
			}
			if dup := duplicateKey(t, body); dup {
				t.Fatalf("%q accepted with a duplicate key", body)
			}
			canon, err := strictjson.Canonical(body)
			if err != nil {
				t.Fatalf("%q valid but has no canonical form: %v", body, err)
			}
			again, err := strictjson.Canonical(canon)
			if err != nil || !bytes.Equal(again, canon) {
				t.Fatalf("canonical form of %q is not stable: %q then %q, %v", body, canon, again, err)
			}
		}

		var v target
		err := strictjson.Unmarshal(body, &v)
		if err != nil {
			requireOneSentinel(t, body, err)
			return
		}
		if verr != nil {
			t.Fatalf("%q decoded though not valid: %v", body, verr)
		}
		// What every reader sees under exactly these names is what the
		// struct got.
		var generic map[string]any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if dec.Decode(&generic) != nil {
			return // null: the struct stays empty
		}
		for name, got := range map[string]string{"id": v.ID, "type": v.Type, "status": v.Status} {
			want, _ := generic[name].(string)
			if got != want {
				t.Fatalf("%q: field %s is %q, the document says %q", body, name, got, want)
			}
		}
		for key := range generic {
			for _, name := range []string{"id", "type", "created", "status", "data", "items"} {
				if key != name && bytes.EqualFold([]byte(key), []byte(name)) {
					t.Fatalf("%q: key %q accepted next to the field %q", body, key, name)
				}
			}
		}
		if data, ok := generic["data"].(map[string]any); ok {
			want, _ := json.Marshal(data["object"])
			var got any
			if len(v.Data.Object) > 0 {
				dec := json.NewDecoder(bytes.NewReader(v.Data.Object))
				dec.UseNumber()
				_ = dec.Decode(&got)
			}
			gotJSON, _ := json.Marshal(got)
			if data["object"] != nil && !bytes.Equal(want, gotJSON) {
				t.Fatalf("%q: data.object is %s, the document says %s", body, gotJSON, want)
			}
		}
	})
}

func requireOneSentinel(t *testing.T, body []byte, err error) {
	t.Helper()
	n := 0
	for _, s := range append(sentinels, strictjson.ErrTimestampOutOfRange) {
		if errors.Is(err, s) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%q: error %v wraps %d sentinels", body, err, n)
	}
}

// duplicateKey reports whether any object in body names a key twice, as
// encoding/json's token stream reads it.
func duplicateKey(t *testing.T, body []byte) bool {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		object bool
		keys   map[string]bool
		expect bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			t.Fatalf("%q: token stream: %v", body, err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.expect {
			key, ok := tok.(string)
			if ok {
				if top.keys[key] {
					return true
				}
				top.keys[key] = true
				top.expect = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, keys: map[string]bool{}, expect: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: in an object, a key comes next.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].expect = true
		}
	}
}
