package strictjson

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// decoder is the pass that fills the target once the scanner has proved
// the document valid: one walk over bytes it need not check again, where
// json.Unmarshal would first check them all once more (its checkValid)
// and then decode them through its general machinery. It decodes the
// shapes provider payloads and requests are made of (structs matched by
// exact key, strings, bools, integers, pointers, slices, maps of string
// keys, json.RawMessage) and hands every other value (interfaces, floats,
// types that decode themselves) to encoding/json, its bytes only. What it cannot decode
// exactly as encoding/json would (a value of the wrong type, an integer
// out of range), it gives up on, and the caller decodes the whole document
// with encoding/json, which then reports the error as it always did.
type decoder struct {
	data     []byte
	pos      int
	disallow bool // Opts.DisallowUnknownFields
}

// plan is how a decoder fills one type.
type plan struct {
	kind   planKind
	typ    reflect.Type
	elem   *plan            // pointer, slice
	fields map[string]field // struct, by JSON name
}

type field struct {
	index int
	plan  *plan
}

type planKind uint8

const (
	byJSON planKind = iota // encoding/json decodes the value's bytes
	planString
	planBool
	planInt
	planUint
	planPointer
	planSlice
	planStruct
	planMap // string keys
	planRaw // json.RawMessage
)

var (
	plans      sync.Map   // reflect.Type → *plan, each complete
	plansBuilt sync.Mutex // one builder at a time: no plan is read half made
	rawMessage = reflect.TypeFor[json.RawMessage]()
)

func planOf(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	plansBuilt.Lock()
	defer plansBuilt.Unlock()
	building := map[reflect.Type]*plan{}
	p := buildPlan(t, building)
	for t, p := range building {
		plans.Store(t, p)
	}
	return p
}

// buildPlan returns t's plan, made into building if it is new. A type that
// holds itself (through a pointer or a slice) finds its own plan there
// instead of recursing.
func buildPlan(t reflect.Type, building map[reflect.Type]*plan) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	if p, ok := building[t]; ok {
		return p
	}
	p := &plan{typ: t}
	building[t] = p
	p.fill(building)
	return p
}

// fill decides a plan's kind; any doubt leaves it to encoding/json.
func (p *plan) fill(building map[reflect.Type]*plan) {
	t := p.typ
	if t == rawMessage {
		p.kind = planRaw
		return
	}
	if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return
	}
	switch t.Kind() {
	case reflect.String:
		p.kind = planString
	case reflect.Bool:
		p.kind = planBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		p.kind = planInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		p.kind = planUint
	case reflect.Pointer:
		if t.Elem().Kind() != reflect.Pointer {
			p.elem, p.kind = buildPlan(t.Elem(), building), planPointer
		}
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Uint8 { // []byte is base64 text
			p.elem, p.kind = buildPlan(t.Elem(), building), planSlice
		}
	case reflect.Struct:
		if fields, ok := plainFields(t, building); ok {
			p.fields, p.kind = fields, planStruct
		}
	case reflect.Map:
		// Keys of a string kind are the object's keys as they are; a key
		// type that unmarshals itself from text, or an integer's, is
		// encoding/json's to read.
		if k := t.Key(); k.Kind() == reflect.String && !reflect.PointerTo(k).Implements(textUnmarshaler) {
			p.elem, p.kind = buildPlan(t.Elem(), building), planMap
		}
	}
}

// plainFields maps a struct's JSON names to its fields when each key can
// only mean one field: no embedded structs (whose promotion rules
// encoding/json applies), no ",string" option, no two fields of one name,
// names of plain characters.
func plainFields(t reflect.Type, building map[reflect.Type]*plan) (map[string]field, bool) {
	fields := make(map[string]field, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil, false
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if slices.Contains(strings.Split(opts, ","), "string") || !plainName(name) {
			return nil, false
		}
		if name == "" {
			name = sf.Name
		}
		if _, twice := fields[name]; twice {
			return nil, false
		}
		fields[name] = field{index: i, plan: buildPlan(sf.Type, building)}
	}
	return fields, true
}

// plainName: letters, digits, '_', '-' and '.', a subset of the names
// encoding/json accepts in a tag (others it replaces with the field's).
func plainName(name string) bool {
	for _, c := range name {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == '.':
		default:
			return false
		}
	}
	return true
}

// document fills v (addressable, its zero value) from the whole of d.data.
// It reports false when encoding/json must decode the document instead.
func (d *decoder) document(v reflect.Value) bool {
	d.space()
	return d.value(v, planOf(v.Type()))
}

func (d *decoder) space() { d.pos = skipSpace(d.data, d.pos) }

// value fills v from the value at pos, which it leaves past the value.
func (d *decoder) value(v reflect.Value, p *plan) bool {
	c := d.data[d.pos]
	if c == 'n' && p.kind != byJSON && p.kind != planRaw {
		// null: pointers and slices become nil, the rest stay as they are.
		d.pos += len("null")
		if p.kind == planPointer || p.kind == planSlice || p.kind == planMap {
			v.SetZero()
		}
		return true
	}
	switch p.kind {
	case planRaw:
		start := d.pos
		d.skip()
		v.SetBytes(append([]byte(nil), d.data[start:d.pos]...))
		return true
	case planString:
		if c != '"' {
			return false
		}
		v.SetString(d.str())
		return true
	case planBool:
		switch c {
		case 't':
			d.pos += len("true")
			v.SetBool(true)
		case 'f':
			d.pos += len("false")
			v.SetBool(false)
		default:
			return false
		}
		return true
	case planInt: // parseInt refuses anything but an integer's digits
		n, ok := parseInt(d.literal())
		if !ok || v.OverflowInt(n) {
			return false
		}
		v.SetInt(n)
		return true
	case planUint:
		n, ok := parseUint(d.literal())
		if !ok || v.OverflowUint(n) {
			return false
		}
		v.SetUint(n)
		return true
	case planPointer:
		ptr := reflect.New(p.typ.Elem())
		if !d.value(ptr.Elem(), p.elem) {
			return false
		}
		v.Set(ptr)
		return true
	case planSlice:
		return c == '[' && d.slice(v, p)
	case planStruct:
		return c == '{' && d.object(v, p)
	case planMap:
		return c == '{' && d.mapObject(v, p)
	}
	return d.byJSON(v)
}

// byJSON hands the value at pos to encoding/json, its bytes only.
func (d *decoder) byJSON(v reflect.Value) bool {
	start := d.pos
	d.skip()
	if !d.disallow {
		return json.Unmarshal(d.data[start:d.pos], v.Addr().Interface()) == nil
	}
	dec := json.NewDecoder(bytes.NewReader(d.data[start:d.pos]))
	dec.DisallowUnknownFields()
	return dec.Decode(v.Addr().Interface()) == nil
}

func (d *decoder) slice(v reflect.Value, p *plan) bool {
	d.pos++ // [
	s := reflect.MakeSlice(p.typ, 0, 0)
	d.space()
	if d.data[d.pos] == ']' {
		d.pos++
		v.Set(s)
		return true
	}
	for {
		d.space()
		s = reflect.Append(s, reflect.Zero(p.typ.Elem()))
		if !d.value(s.Index(s.Len()-1), p.elem) {
			return false
		}
		d.space()
		if d.data[d.pos] == ']' {
			d.pos++
			v.Set(s)
			return true
		}
		d.pos++ // ,
	}
}

func (d *decoder) object(v reflect.Value, p *plan) bool {
	d.pos++ // {
	d.space()
	if d.data[d.pos] == '}' {
		d.pos++
		return true
	}
	for {
		d.space()
		var (
			f  field
			ok bool
		)
		if raw, plain := d.plainKey(); plain {
			f, ok = p.fields[string(raw)] // no copy: a map index of string(b)
		} else {
			f, ok = p.fields[d.str()]
		}
		d.space()
		d.pos++ // :
		d.space()
		switch {
		case ok:
			if !d.value(v.Field(f.index), f.plan) {
				return false
			}
		case d.disallow:
			return false // encoding/json names the field in its error
		default:
			d.skip()
		}
		d.space()
		if d.data[d.pos] == '}' {
			d.pos++
			return true
		}
		d.pos++ // ,
	}
}

// mapObject fills the map v from the object at pos, each value decoded
// fresh, as encoding/json does (the scanner has refused duplicate keys).
func (d *decoder) mapObject(v reflect.Value, p *plan) bool {
	d.pos++ // {
	if v.IsNil() {
		v.Set(reflect.MakeMap(p.typ))
	}
	d.space()
	if d.data[d.pos] == '}' {
		d.pos++
		return true
	}
	key, elem := p.typ.Key(), p.typ.Elem()
	for {
		d.space()
		k := reflect.ValueOf(d.str())
		if k.Type() != key {
			k = k.Convert(key)
		}
		d.space()
		d.pos++ // :
		d.space()
		e := reflect.New(elem).Elem()
		if !d.value(e, p.elem) {
			return false
		}
		v.SetMapIndex(k, e)
		d.space()
		if d.data[d.pos] == '}' {
			d.pos++
			return true
		}
		d.pos++ // ,
	}
}

// plainKey reads the key at pos when it has no escapes; otherwise it
// leaves pos where it was and answers false.
func (d *decoder) plainKey() ([]byte, bool) {
	start := d.pos + 1
	for i := start; ; i++ {
		switch d.data[i] {
		case '"':
			d.pos = i + 1
			return d.data[start:i], true
		case '\\':
			return nil, false
		}
	}
}

// str reads the string at pos, unescaped. The scanner has refused invalid
// UTF-8, lone surrogates and bad escapes, so each escape here is one of
// the valid forms.
func (d *decoder) str() string {
	d.pos++ // "
	start := d.pos
	for d.data[d.pos] != '"' && d.data[d.pos] != '\\' {
		d.pos++
	}
	if d.data[d.pos] == '"' {
		d.pos++
		return string(d.data[start : d.pos-1])
	}
	b := append([]byte(nil), d.data[start:d.pos]...)
	for {
		switch c := d.data[d.pos]; c {
		case '"':
			d.pos++
			return string(b)
		case '\\':
			b = d.escape(b)
		default:
			b = append(b, c)
			d.pos++
		}
	}
}

// escape appends the character of the escape at pos to b.
func (d *decoder) escape(b []byte) []byte {
	c := d.data[d.pos+1]
	if c != 'u' {
		d.pos += 2
		switch c {
		case 'b':
			return append(b, '\b')
		case 'f':
			return append(b, '\f')
		case 'n':
			return append(b, '\n')
		case 'r':
			return append(b, '\r')
		case 't':
			return append(b, '\t')
		}
		return append(b, c) // '"', '\\', '/'
	}
	r := hex4(d.data[d.pos+2 : d.pos+6])
	d.pos += 6
	if 0xD800 <= r && r <= 0xDBFF { // the scanner proved its low half follows
		lo := hex4(d.data[d.pos+2 : d.pos+6])
		d.pos += 6
		r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
	}
	return utf8.AppendRune(b, r)
}

func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			r = r<<4 | rune(c-'0')
		case c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			r = r<<4 | rune(c-'a'+10)
		}
	}
	return r
}

// literal reads a number, true, false or null.
func (d *decoder) literal() []byte {
	start := d.pos
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return d.data[start:d.pos]
		}
		d.pos++
	}
	return d.data[start:]
}

// parseInt is strconv.ParseInt(string(b), 10, 64) without the copy: what
// encoding/json stores in an integer field, or false where it refuses.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	n, ok := parseUint(b)
	switch {
	case !ok:
		return 0, false
	case neg && n <= 1<<63:
		return -int64(n), true
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	}
	return 0, false
}

// parseUint is strconv.ParseUint(string(b), 10, 64) without the copy.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 19 { // 19 digits always fit; longer ones rarely
		n, err := strconv.ParseUint(string(b), 10, 64)
		return n, err == nil
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// skip moves past the value at pos.
func (d *decoder) skip() {
	switch d.data[d.pos] {
	case '"':
		d.skipString()
	case '{', '[':
		depth := 0
		for {
			switch d.data[d.pos] {
			case '"':
				d.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					d.pos++
					return
				}
			}
			d.pos++
		}
	default:
		d.literal()
	}
}

func (d *decoder) skipString() {
	d.pos++ // "
	for {
		switch d.data[d.pos] {
		case '"':
			d.pos++
			return
		case '\\':
			d.pos += 2 // the escaped byte; a \u's hex digits are plain bytes
		default:
			d.pos++
		}
	}
}
