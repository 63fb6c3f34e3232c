// Package strictjson decodes JSON so that paygate reads a body exactly as
// every other reader of the same bytes does: PostgreSQL's jsonb, a person
// reading the stored payload, another language's parser.
//
// A signature proves who sent a body, not that it is sane, and
// encoding/json is lenient where those readers are not: it matches object
// keys to struct fields case-insensitively ({"id":"A","ID":"B"} fills ID
// with "B" while jsonb reads "A"), keeps the last of duplicate keys, and
// turns invalid UTF-8 and lone surrogate escapes into U+FFFD (so different
// ids become one). This package refuses all of that before encoding/json
// sees the body, and bounds what a body may make a reader do (nesting depth,
// number size), so that what it accepts decodes the same everywhere.
//
// Once a body is proved valid, a second pass fills the target itself
// (decode.go), exactly as encoding/json would, and hands it only the
// values it does not decode (interfaces, maps, types that decode
// themselves): one walk instead of encoding/json's two.
//
// It owns that validation, the canonical form of a valid document, and the
// sane window for provider timestamps (ValidUnix). It does no I/O and must
// never know a provider's payloads or paygate's tables.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// Sentinel errors. Every error Unmarshal, Valid and Canonical return wraps
// exactly one of them; match with errors.Is.
var (
	// ErrSyntax: not exactly one well-formed JSON value (empty, truncated,
	// trailing data, a control character in a string…).
	ErrSyntax = errors.New("invalid JSON")
	// ErrDuplicateKey: an object names the same key twice, at any depth;
	// keys are compared after unescaping, so "id" and "\u0069d" are one.
	ErrDuplicateKey = errors.New("duplicate object key")
	// ErrInvalidUTF8: a string or key holds bytes that are not UTF-8, or a
	// \u escape of a lone UTF-16 surrogate (\ud800 without its pair).
	ErrInvalidUTF8 = errors.New("text is not valid UTF-8")
	// ErrNUL: a string or key holds U+0000, which PostgreSQL's text and
	// jsonb cannot hold.
	ErrNUL = errors.New("NUL character in text")
	// ErrKeyCase: a key names a field of the target struct only in another
	// case ("ID" for the field "id"); encoding/json would fill the field.
	ErrKeyCase = errors.New("object key matches a field only in another case")
	// ErrUnknownField: with Opts.DisallowUnknownFields, a key that names no
	// field of the target struct.
	ErrUnknownField = errors.New("unknown field")
	// ErrTooDeep: objects and arrays nested deeper than MaxDepth.
	ErrTooDeep = errors.New("JSON nested too deeply")
	// ErrNumberRange: a number longer than MaxNumberLength characters or
	// with an exponent beyond ±MaxExponent; PostgreSQL's numeric, behind
	// jsonb, overflows on less than 1e131072.
	ErrNumberRange = errors.New("number out of range")
	// ErrInvalidValue: a value that does not fit its field (a string for a
	// number, a malformed time…).
	ErrInvalidValue = errors.New("value does not fit its field")
)

// Limits of what a body may make a reader do.
const (
	// MaxDepth bounds the nesting of objects and arrays. Provider events
	// nest about ten deep.
	MaxDepth = 128
	// MaxNumberLength bounds a number's text.
	MaxNumberLength = 100
	// MaxExponent bounds a number's exponent, either sign.
	MaxExponent = 1000
)

// Opts are Unmarshal's options; nil is the zero value.
type Opts struct {
	// DisallowUnknownFields refuses keys that name no field of a target
	// struct, so a typo in a request is not silently ignored.
	DisallowUnknownFields bool
}

// Unmarshal decodes data into v as encoding/json does, after refusing what
// other readers would read differently: it is UnmarshalOpts with nil Opts.
func Unmarshal(data []byte, v any) error {
	return UnmarshalOpts(data, v, nil)
}

// UnmarshalOpts decodes data, exactly one JSON value, into v (a non-nil
// pointer). Keys must name struct fields exactly; keys of maps and of
// values decoded into any, json.RawMessage or a json.Unmarshaler are not
// matched to fields but are still checked for duplicates and text.
//
// It fails with ErrSyntax, ErrDuplicateKey, ErrInvalidUTF8, ErrNUL,
// ErrKeyCase, ErrUnknownField, ErrTooDeep, ErrNumberRange or
// ErrInvalidValue, and v is then left in an unspecified state.
func UnmarshalOpts(data []byte, v any, opts *Opts) error {
	if opts == nil {
		opts = &Opts{}
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("%w: decoding needs a non-nil pointer, not %T", ErrInvalidValue, v)
	}
	s := scanner{data: data, opts: opts}
	defer s.done()
	if err := s.document(rv.Type().Elem()); err != nil {
		return err
	}
	if target := rv.Elem(); target.IsZero() {
		// The usual case, a fresh value: one more pass fills it (decode.go).
		d := decoder{data: data, disallow: opts.DisallowUnknownFields}
		if d.document(target) {
			return nil
		}
		target.SetZero() // as it was: encoding/json decodes it again, and says why not
	}
	if !opts.DisallowUnknownFields {
		// The scan proved data one valid value: Unmarshal reads it in
		// place, where a Decoder would first copy it into a buffer grown
		// by doubling.
		if err := json.Unmarshal(data, v); err != nil {
			return decodeError(err)
		}
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	return nil
}

// Valid reports, as an error, whether data is one JSON value every reader
// reads alike: nil, or one of ErrSyntax, ErrDuplicateKey, ErrInvalidUTF8,
// ErrNUL, ErrTooDeep, ErrNumberRange.
func Valid(data []byte) error {
	s := scanner{data: data, opts: &Opts{}}
	defer s.done()
	return s.document(nil)
}

// Canonical returns data, once Valid, re-encoded with object keys sorted,
// no insignificant whitespace, strings escaped by encoding/json and numbers
// as written. Two documents with the same canonical form are the same JSON
// value to every reader; two that differ only in spacing, key order or
// string escapes have the same canonical form.
//
// It fails with the errors of Valid.
func Canonical(data []byte) ([]byte, error) {
	if err := Valid(data); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, decodeError(err)
	}
	out, err := json.Marshal(v) // map keys sorted
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidValue, err)
	}
	return out, nil
}

// decodeError classifies what encoding/json still refuses after the
// validation pass: values of the wrong type, and unmarshalers' own errors.
func decodeError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("%w at byte %d", ErrSyntax, syntax.Offset)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(the document)"
		}
		return fmt.Errorf("%w: %s must be %s, not a JSON %s", ErrInvalidValue, quote(field), typ.Type, typ.Value)
	}
	return fmt.Errorf("%w: %v", ErrInvalidValue, err)
}

// quote shows a key or field name in an error, bounded: the name comes from
// the sender.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
