// Package stripeschema checks JSON values against Stripe's published
// OpenAPI 3.0 spec (the spec3.json that stripe-mock releases embed), so
// tests can prove that the simulator and fixtures speak Stripe's real shapes.
//
// It understands the subset of OpenAPI 3.0 that Stripe's spec uses: type,
// format, nullable, enum, maxLength, pattern, properties, required,
// additionalProperties, items, $ref, anyOf, oneOf and allOf. It is stricter
// than JSON Schema in one way on purpose: an object schema that lists its
// properties and says nothing about additionalProperties admits no others,
// because Stripe's object schemas list every field Stripe sends and a
// stand-in must not invent fields. Enums are enforced even where the spec
// says x-stripeBypassValidation (which lets Stripe's own request checks pass
// unknown values): a stand-in sends only the values Stripe documents.
// Values must be decoded with json.Decoder.UseNumber (see Decode): a float64
// cannot tell Stripe's integer fields from its number fields, and money is
// never a float.
//
// It is for tests only. It must never do I/O beyond reading a spec file and
// asking the go command where the module cache is, and never be imported by
// production code.
package stripeschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Spec is a loaded OpenAPI spec: its component schemas and the JSON
// response schemas of its paths.
type Spec struct {
	// Version is the spec's info.version, the Stripe API version it
	// describes (2022-11-15, 2026-08-26.dahlia…).
	Version string

	schemas map[string]*Schema
	paths   map[string]map[string]*operation

	patMu    sync.Mutex
	patterns map[string]*regexp.Regexp
}

// Schema is one OpenAPI schema object, with the keywords validation uses.
type Schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Nullable             bool               `json:"nullable"`
	Enum                 []any              `json:"enum"`
	MaxLength            *int               `json:"maxLength"`
	Pattern              string             `json:"pattern"`
	Properties           map[string]*Schema `json:"properties"`
	Required             []string           `json:"required"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Items                *Schema            `json:"items"`
	AnyOf                []*Schema          `json:"anyOf"`
	OneOf                []*Schema          `json:"oneOf"`
	AllOf                []*Schema          `json:"allOf"`
	Title                string             `json:"title"`

	// additional is AdditionalProperties decoded: nil with extraAllowed
	// false means no other properties (see the package doc).
	additional   *Schema
	extraAllowed bool
}

type operation struct {
	Responses map[string]struct {
		Content map[string]struct {
			Schema *Schema `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

// Load reads an OpenAPI 3.0 spec in JSON, such as stripe-mock's
// embedded/openapi/spec3.json. It fails if the file cannot be read or
// decoded, or is not OpenAPI 3.0.
func Load(path string) (*Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load spec: %w", err)
	}
	defer f.Close()
	return Read(f)
}

// Read decodes a spec as Load does, from r.
func Read(r io.Reader) (*Spec, error) {
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct {
			Version string `json:"version"`
		} `json:"info"`
		Components struct {
			Schemas map[string]*Schema `json:"schemas"`
		} `json:"components"`
		Paths map[string]map[string]*operation `json:"paths"`
	}
	dec := json.NewDecoder(r)
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.0") {
		return nil, fmt.Errorf("decode spec: openapi version %q, want 3.0.x", doc.OpenAPI)
	}
	s := &Spec{
		Version:  doc.Info.Version,
		schemas:  doc.Components.Schemas,
		paths:    doc.Paths,
		patterns: map[string]*regexp.Regexp{},
	}
	if s.schemas == nil {
		s.schemas = map[string]*Schema{}
	}
	for name, sc := range s.schemas {
		if err := prepare(sc); err != nil {
			return nil, fmt.Errorf("decode spec: schema %s: %w", name, err)
		}
	}
	for p, ops := range s.paths {
		for m, op := range ops {
			if op == nil {
				continue
			}
			for code, resp := range op.Responses {
				for _, c := range resp.Content {
					if err := prepare(c.Schema); err != nil {
						return nil, fmt.Errorf("decode spec: %s %s %s: %w", m, p, code, err)
					}
				}
			}
		}
	}
	return s, nil
}

// prepare decodes additionalProperties (true, false or a schema) throughout
// a schema tree.
func prepare(sc *Schema) error {
	if sc == nil {
		return nil
	}
	switch ap := bytes.TrimSpace(sc.AdditionalProperties); {
	case len(ap) == 0, bytes.Equal(ap, []byte("false")):
	case bytes.Equal(ap, []byte("true")):
		sc.extraAllowed = true
	default:
		sc.additional = &Schema{}
		dec := json.NewDecoder(bytes.NewReader(ap))
		dec.UseNumber()
		if err := dec.Decode(sc.additional); err != nil {
			return fmt.Errorf("additionalProperties: %w", err)
		}
		sc.extraAllowed = true
	}
	children := slices.Concat(sc.AnyOf, sc.OneOf, sc.AllOf, []*Schema{sc.Items, sc.additional})
	for _, p := range sc.Properties {
		children = append(children, p)
	}
	for _, c := range children {
		if err := prepare(c); err != nil {
			return err
		}
	}
	return nil
}

// Decode parses one JSON value as Validate wants it: numbers as json.Number,
// objects as map[string]any, arrays as []any. It fails on invalid JSON or
// trailing data.
func Decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("decode value: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode value: trailing data after the JSON value")
	}
	return v, nil
}

// Has reports whether the spec defines the component schema name.
func (s *Spec) Has(name string) bool {
	_, ok := s.schemas[name]
	return ok
}

// HasProperty reports whether the component schema name lists property
// field.
func (s *Spec) HasProperty(name, field string) bool {
	sc, ok := s.schemas[name]
	if !ok {
		return false
	}
	_, ok = sc.Properties[field]
	return ok
}

// Kind classifies a violation.
type Kind string

// The kinds of violation Validate reports.
const (
	KindRequired  Kind = "missing_required" // a required property is absent
	KindType      Kind = "wrong_type"       // the value's JSON type is not the schema's
	KindNull      Kind = "null"             // null where the schema is not nullable
	KindUnknown   Kind = "unknown_property" // a property the schema does not list
	KindEnum      Kind = "enum"             // a value outside the schema's enum
	KindMaxLength Kind = "max_length"       // a string longer than maxLength
	KindPattern   Kind = "pattern"          // a string not matching pattern
	KindFormat    Kind = "format"           // a string or number not in the schema's format
	KindNoMatch   Kind = "no_match"         // no alternative of anyOf/oneOf fits
	KindAmbiguous Kind = "ambiguous"        // several alternatives of oneOf fit
	KindSpec      Kind = "spec"             // the spec itself is unusable here: unknown schema or $ref
)

// Violation is one way a value departs from its schema.
type Violation struct {
	// Path locates the value inside the validated one, as $.data[2].source.
	Path string
	// Schema is the component schema the field belongs to, followed by the
	// properties of inline object schemas it sits in: "charge",
	// "charge.refunds", "fee".
	Schema string
	// Field is the property concerned (the missing one, the unknown one, or
	// the one whose value is wrong); empty for the validated root and for
	// items of a top-level array.
	Field  string
	Kind   Kind
	Detail string
	// Allowed is set when ValidateOpts.Allow accepted the violation. An
	// allowed violation does not make an anyOf/oneOf alternative fail.
	Allowed bool
}

func (v Violation) String() string {
	s := fmt.Sprintf("%s: %s (schema %s", v.Path, v.Kind, v.Schema)
	if v.Field != "" {
		s += ", field " + v.Field
	}
	s += ")"
	if v.Detail != "" {
		s += ": " + v.Detail
	}
	if v.Allowed {
		s += " [allowed]"
	}
	return s
}

// ValidateOpts tunes Validate; nil means no options.
type ValidateOpts struct {
	// Allow, if set, is asked about every violation; those it accepts are
	// returned with Allowed set and do not count against a match.
	Allow func(Violation) bool
}

// Validate checks value, as decoded by Decode, against the component schema
// name, and returns every violation, in a stable order (nil if the value
// fits). An unknown schema name is a KindSpec violation.
func (s *Spec) Validate(name string, value any, opts *ValidateOpts) []Violation {
	sc, ok := s.schemas[name]
	if !ok {
		return []Violation{{Path: "$", Schema: name, Kind: KindSpec, Detail: "no such component schema in spec " + s.Version}}
	}
	v := s.newValidator(opts)
	return v.check(sc, value, where{path: "$", schema: name, enter: name})
}

// ValidateField checks value against property field of the component schema
// name, as a value that field may hold; a field the schema does not list is
// a KindUnknown violation. With orNull, null is accepted whatever the
// field's schema says: what a previous_attributes entry holds for a field
// that was unset.
func (s *Spec) ValidateField(name, field string, value any, orNull bool, opts *ValidateOpts) []Violation {
	sc, ok := s.schemas[name]
	if !ok {
		return []Violation{{Path: "$", Schema: name, Kind: KindSpec, Detail: "no such component schema in spec " + s.Version}}
	}
	v := s.newValidator(opts)
	w := where{path: "$." + field, schema: name, field: field}
	ps, ok := sc.Properties[field]
	if !ok {
		return v.report(nil, Violation{Path: w.path, Schema: name, Field: field, Kind: KindUnknown, Detail: "not a property of " + name})
	}
	if orNull && value == nil {
		return nil
	}
	return v.check(ps, value, w)
}

// ValidateResponse checks value against the JSON body schema the spec gives
// for method and path template (as written in the spec: "/v1/events/{id}")
// answering status ("200", or "default" for errors). A response the spec
// does not describe is a KindSpec violation.
func (s *Spec) ValidateResponse(method, path, status string, value any, opts *ValidateOpts) []Violation {
	name := strings.ToUpper(method) + " " + path + " " + status
	op := s.paths[path][strings.ToLower(method)]
	if op == nil {
		return []Violation{{Path: "$", Schema: name, Kind: KindSpec, Detail: "no such operation in spec " + s.Version}}
	}
	sc := op.Responses[status].Content["application/json"].Schema
	if sc == nil {
		return []Violation{{Path: "$", Schema: name, Kind: KindSpec, Detail: "no application/json schema for this response in spec " + s.Version}}
	}
	v := s.newValidator(opts)
	return v.check(sc, value, where{path: "$", schema: name})
}

type validator struct {
	spec  *Spec
	allow func(Violation) bool
}

func (s *Spec) newValidator(opts *ValidateOpts) *validator {
	v := &validator{spec: s}
	if opts != nil {
		v.allow = opts.Allow
	}
	return v
}

// where is the position being validated: the JSON path, and the schema and
// field the value is found in. enter is the component schema a $ref just
// entered, whose properties the value's own fields are.
type where struct {
	path, schema, field string
	enter               string
}

// fields is where the properties of the object at w belong: the component
// schema a $ref entered, or for an inline object schema its parent and
// field ("charge.refunds").
func (w where) fields() where {
	owner := w.enter
	switch {
	case owner != "":
	case w.field == "":
		owner = w.schema
	default:
		owner = w.schema + "." + w.field
	}
	return where{path: w.path, schema: owner}
}

func (w where) prop(name string) where {
	return where{path: w.path + "." + name, schema: w.schema, field: name}
}

func (w where) index(i int) where {
	return where{path: w.path + "[" + strconv.Itoa(i) + "]", schema: w.schema, field: w.field}
}

func (w where) violation(k Kind, format string, args ...any) Violation {
	return Violation{Path: w.path, Schema: w.schema, Field: w.field, Kind: k, Detail: fmt.Sprintf(format, args...)}
}

func (v *validator) report(out []Violation, vs ...Violation) []Violation {
	for _, x := range vs {
		if v.allow != nil && v.allow(x) {
			x.Allowed = true
		}
		out = append(out, x)
	}
	return out
}

func fails(vs []Violation) bool {
	return slices.ContainsFunc(vs, func(v Violation) bool { return !v.Allowed })
}

// resolve follows $ref chains to a named component schema; name is the last
// component entered, or "" if sc is not a reference.
func (v *validator) resolve(sc *Schema) (*Schema, string, error) {
	name := ""
	for seen := 0; sc.Ref != ""; seen++ {
		n, ok := strings.CutPrefix(sc.Ref, "#/components/schemas/")
		if !ok {
			return nil, "", fmt.Errorf("unsupported $ref %q", sc.Ref)
		}
		next, ok := v.spec.schemas[n]
		if !ok {
			return nil, "", fmt.Errorf("$ref to unknown schema %q", n)
		}
		if seen > 64 {
			return nil, "", fmt.Errorf("$ref cycle through %q", n)
		}
		sc, name = next, n
	}
	return sc, name, nil
}

func (v *validator) check(sc *Schema, value any, w where) []Violation {
	if sc == nil {
		return nil
	}
	// A reference names the schema the value's properties belong to; the
	// value itself (its type, a null) stays the field it was found in.
	if sc.Ref != "" {
		target, name, err := v.resolve(sc)
		if err != nil {
			return v.report(nil, w.violation(KindSpec, "%v", err))
		}
		if value == nil {
			if target.Nullable {
				return nil
			}
			return v.report(nil, w.violation(KindNull, "null, but %s is not nullable", name))
		}
		w.enter = name
		return v.check(target, value, w)
	}
	if value == nil {
		if sc.Nullable || sc.acceptsNullViaAlternatives() {
			return nil
		}
		return v.report(nil, w.violation(KindNull, "null, but the schema is not nullable"))
	}
	var out []Violation
	if len(sc.AnyOf) > 0 {
		out = append(out, v.alternatives(sc.AnyOf, false, value, w)...)
	}
	if len(sc.OneOf) > 0 {
		out = append(out, v.alternatives(sc.OneOf, true, value, w)...)
	}
	for _, sub := range sc.AllOf {
		out = append(out, v.check(sub, value, w)...)
	}
	if len(sc.Enum) > 0 && !slices.ContainsFunc(sc.Enum, func(e any) bool { return equal(e, value) }) {
		out = v.report(out, w.violation(KindEnum, "%s is not one of %s", show(value), showEnum(sc.Enum)))
	}
	switch sc.Type {
	case "":
		if len(sc.Properties) > 0 {
			out = append(out, v.object(sc, value, w)...)
		}
	case "object":
		out = append(out, v.object(sc, value, w)...)
	case "array":
		arr, ok := value.([]any)
		if !ok {
			return v.report(out, w.violation(KindType, "%s, want array", jsonType(value)))
		}
		for i, item := range arr {
			out = append(out, v.check(sc.Items, item, w.index(i))...)
		}
	case "string":
		str, ok := value.(string)
		if !ok {
			return v.report(out, w.violation(KindType, "%s, want string", jsonType(value)))
		}
		out = append(out, v.str(sc, str, w)...)
	case "integer":
		n, ok := value.(json.Number)
		if !ok {
			return v.report(out, w.violation(KindType, "%s, want integer", jsonType(value)))
		}
		if !isInteger(n) {
			return v.report(out, w.violation(KindType, "%s is not an integer", n))
		}
	case "number":
		if _, ok := value.(json.Number); !ok {
			return v.report(out, w.violation(KindType, "%s, want number", jsonType(value)))
		}
	case "boolean":
		if _, ok := value.(bool); !ok {
			return v.report(out, w.violation(KindType, "%s, want boolean", jsonType(value)))
		}
	default:
		return v.report(out, w.violation(KindSpec, "unsupported type %q", sc.Type))
	}
	return out
}

func (sc *Schema) acceptsNullViaAlternatives() bool {
	return slices.ContainsFunc(slices.Concat(sc.AnyOf, sc.OneOf), func(a *Schema) bool { return a.Nullable })
}

func (v *validator) object(sc *Schema, value any, w where) []Violation {
	obj, ok := value.(map[string]any)
	if !ok {
		return v.report(nil, w.violation(KindType, "%s, want object", jsonType(value)))
	}
	w = w.fields()
	var out []Violation
	for _, name := range sc.Required {
		if _, ok := obj[name]; !ok {
			out = v.report(out, w.prop(name).violation(KindRequired, "required by %s", w.schema))
		}
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// A schema with neither properties nor additionalProperties is a
	// free-form object (an event's data.object): anything goes.
	freeForm := len(sc.Properties) == 0 && len(sc.AdditionalProperties) == 0
	for _, k := range keys {
		ps, ok := sc.Properties[k]
		switch {
		case ok:
			out = append(out, v.check(ps, obj[k], w.prop(k))...)
		case sc.additional != nil:
			out = append(out, v.check(sc.additional, obj[k], w.prop(k))...)
		case sc.extraAllowed || freeForm:
		default:
			out = v.report(out, w.prop(k).violation(KindUnknown, "%s lists no such property", w.schema))
		}
	}
	return out
}

func (v *validator) str(sc *Schema, s string, w where) []Violation {
	var out []Violation
	if sc.MaxLength != nil && utf8.RuneCountInString(s) > *sc.MaxLength {
		out = v.report(out, w.violation(KindMaxLength, "%d characters, at most %d", utf8.RuneCountInString(s), *sc.MaxLength))
	}
	if sc.Pattern != "" {
		re, err := v.spec.pattern(sc.Pattern)
		if err != nil {
			out = v.report(out, w.violation(KindSpec, "pattern %q: %v", sc.Pattern, err))
		} else if !re.MatchString(s) {
			out = v.report(out, w.violation(KindPattern, "%q does not match %s", s, sc.Pattern))
		}
	}
	switch sc.Format {
	case "currency":
		// Stripe's currencies are three-letter ISO codes in lowercase.
		if !currencyRe.MatchString(s) {
			out = v.report(out, w.violation(KindFormat, "%q is not a lowercase ISO currency code", s))
		}
	case "decimal":
		if !decimalRe.MatchString(s) {
			out = v.report(out, w.violation(KindFormat, "%q is not a decimal string", s))
		}
	}
	return out
}

var (
	currencyRe = regexp.MustCompile(`^[a-z]{3}$`)
	decimalRe  = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)
)

func (s *Spec) pattern(p string) (*regexp.Regexp, error) {
	s.patMu.Lock()
	defer s.patMu.Unlock()
	if re, ok := s.patterns[p]; ok {
		return re, nil
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, err
	}
	s.patterns[p] = re
	return re, nil
}

// alternatives checks anyOf (any one must fit) or oneOf (exactly one must
// fit). When none fits and exactly one alternative has the value's JSON
// type (an expanded object where the id string or the object is allowed),
// its violations are the answer; otherwise one KindNoMatch names them all.
func (v *validator) alternatives(alts []*Schema, exactlyOne bool, value any, w where) []Violation {
	var (
		matched  []int
		matchOut []Violation
		typed    [][]Violation
	)
	for i, a := range alts {
		vs := v.check(a, value, w)
		if !fails(vs) {
			if len(matched) == 0 {
				matchOut = vs
			}
			matched = append(matched, i)
			continue
		}
		if v.typeFits(a, value) {
			typed = append(typed, vs)
		}
	}
	switch {
	case len(matched) == 1 || len(matched) > 1 && !exactlyOne:
		return matchOut
	case len(matched) > 1:
		names := make([]string, len(matched))
		for i, m := range matched {
			names[i] = v.describe(alts[m])
		}
		return v.report(nil, w.violation(KindAmbiguous, "%s fits %d alternatives of oneOf: %s", jsonType(value), len(matched), strings.Join(names, ", ")))
	case len(typed) == 1:
		return typed[0]
	}
	names := make([]string, len(alts))
	for i, a := range alts {
		names[i] = v.describe(a)
	}
	kw := "anyOf"
	if exactlyOne {
		kw = "oneOf"
	}
	return v.report(nil, w.violation(KindNoMatch, "%s fits none of %s: %s", show(value), kw, strings.Join(names, ", ")))
}

// typeFits reports whether value has the JSON type alternative a wants.
func (v *validator) typeFits(a *Schema, value any) bool {
	r, _, err := v.resolve(a)
	if err != nil {
		return false
	}
	t := r.Type
	if t == "" && len(r.Properties) > 0 {
		t = "object"
	}
	switch value.(type) {
	case map[string]any:
		return t == "object"
	case []any:
		return t == "array"
	case string:
		return t == "string"
	case json.Number:
		return t == "integer" || t == "number"
	case bool:
		return t == "boolean"
	}
	return false
}

func (v *validator) describe(a *Schema) string {
	if a.Ref != "" {
		return strings.TrimPrefix(a.Ref, "#/components/schemas/")
	}
	if a.Type != "" {
		return a.Type
	}
	return "schema"
}

func isInteger(n json.Number) bool {
	return !strings.ContainsAny(string(n), ".eE")
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		if isInteger(x) {
			return "integer " + string(x)
		}
		return "number " + string(x)
	case bool:
		return "boolean"
	case float64, float32:
		return fmt.Sprintf("float %v (decode with json.Decoder.UseNumber)", x)
	}
	return fmt.Sprintf("Go %T (decode with stripeschema.Decode)", v)
}

func show(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case json.Number:
		return string(x)
	case bool:
		return strconv.FormatBool(x)
	}
	return jsonType(v)
}

func showEnum(enum []any) string {
	parts := make([]string, len(enum))
	for i, e := range enum {
		parts[i] = show(e)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// equal compares an enum entry with a value: strings and booleans exactly,
// numbers by value (1 equals 1.0), without floats.
func equal(a, b any) bool {
	an, aok := a.(json.Number)
	bn, bok := b.(json.Number)
	if aok && bok {
		ar, ok1 := new(big.Rat).SetString(string(an))
		br, ok2 := new(big.Rat).SetString(string(bn))
		return ok1 && ok2 && ar.Cmp(br) == 0
	}
	if aok || bok {
		return false
	}
	switch a.(type) {
	case string, bool, nil:
		return a == b
	}
	return false
}

// ModCachePath is where `go mod download module@version` puts a module's
// files. The cache is the one `go env GOMODCACHE` names; without a go
// command, $GOMODCACHE, else the first $GOPATH entry's pkg/mod, else
// ~/go/pkg/mod, as the go command defaults. It fails only if none can be
// determined.
func ModCachePath(module, version string) (string, error) {
	cache, err := modCache()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, escapeModule(module)+"@"+version), nil
}

func modCache() (string, error) {
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if c := strings.TrimSpace(string(out)); c != "" {
			return c, nil
		}
	}
	if c := os.Getenv("GOMODCACHE"); c != "" {
		return c, nil
	}
	if gp, _, _ := strings.Cut(os.Getenv("GOPATH"), string(os.PathListSeparator)); gp != "" {
		return filepath.Join(gp, "pkg", "mod"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("locate the module cache: no go command, GOMODCACHE, GOPATH or home directory: %w", err)
	}
	return filepath.Join(home, "go", "pkg", "mod"), nil
}

// escapeModule is the module cache's case encoding: each upper-case letter
// becomes "!" and its lower-case form.
func escapeModule(m string) string {
	var b strings.Builder
	for _, r := range m {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// StripeMockSpec is the path of stripe-mock's embedded OpenAPI spec
// (embedded/openapi/spec3.json) for a stripe-mock release in the module
// cache. It fails, naming scripts/tools.sh (which downloads the releases the
// tests use), if the file is not there.
func StripeMockSpec(version string) (string, error) {
	dir, err := ModCachePath("github.com/stripe/stripe-mock", version)
	if err != nil {
		return "", fmt.Errorf("locate stripe-mock %s: %w", version, err)
	}
	p := filepath.Join(dir, "embedded", "openapi", "spec3.json")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("stripe-mock %s's OpenAPI spec is not in the module cache (%w): run scripts/tools.sh, which runs `go mod download github.com/stripe/stripe-mock@%s`", version, err, version)
	}
	return p, nil
}
