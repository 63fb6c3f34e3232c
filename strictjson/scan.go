package strictjson

import (
	"encoding"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"
)

// scanner is the validation pass over the raw bytes: it walks one JSON
// value, checks its text, keys and limits, and, where the target type is
// known, that every key names a field exactly. It builds nothing but the
// keys of the object it is in.
type scanner struct {
	data  []byte
	pos   int
	depth int
	opts  *Opts
	// keys are the keys of the objects being scanned, outermost first:
	// each object's follow its parents' and are dropped when it ends, so
	// one buffer serves a whole document.
	keys []scannedKey
}

func (s *scanner) fail(err error, format string, args ...any) error {
	if format == "" {
		return fmt.Errorf("%w at byte %d", err, s.pos)
	}
	return fmt.Errorf("%w at byte %d: %s", err, s.pos, fmt.Sprintf(format, args...))
}

// document checks that data is exactly one value, whitespace around it.
func (s *scanner) document(t reflect.Type) error {
	s.space()
	if s.pos == len(s.data) {
		return s.fail(ErrSyntax, "no JSON value")
	}
	if err := s.value(target(t)); err != nil {
		return err
	}
	s.space()
	if s.pos != len(s.data) {
		return s.fail(ErrSyntax, "data after the JSON value")
	}
	return nil
}

func (s *scanner) space() { s.pos = skipSpace(s.data, s.pos) }

// skipSpace returns the position of the first byte from pos on that is not
// JSON whitespace.
func skipSpace(data []byte, pos int) int {
	for pos < len(data) {
		switch data[pos] {
		case ' ', '\t', '\n', '\r':
			pos++
		default:
			return pos
		}
	}
	return pos
}

// value checks the value at pos; t is what it decodes into, nil when that
// is not a type whose fields we match (any, a json.Unmarshaler…).
func (s *scanner) value(t reflect.Type) error {
	if s.pos == len(s.data) {
		return s.fail(ErrSyntax, "unexpected end of JSON")
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		return s.object(t)
	case c == '[':
		return s.array(t)
	case c == '"':
		_, err := s.str(false)
		return err
	case c == '-' || ('0' <= c && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	default:
		return s.fail(ErrSyntax, "unexpected character %q", c)
	}
}

func (s *scanner) literal(word string) error {
	if !strings.HasPrefix(string(s.data[s.pos:min(len(s.data), s.pos+len(word))]), word) {
		return s.fail(ErrSyntax, "invalid literal")
	}
	s.pos += len(word)
	return nil
}

func (s *scanner) enter() error {
	s.depth++
	if s.depth > MaxDepth {
		return s.fail(ErrTooDeep, "more than %d levels", MaxDepth)
	}
	return nil
}

func (s *scanner) object(t reflect.Type) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // {
	var fields *structFields
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = target(t.Elem())
		}
	}
	if s.keys == nil {
		s.keys = (*keyBuffers.Get().(*[]scannedKey))[:0]
	}
	seen := keySet{s: s, base: len(s.keys)}
	defer seen.drop()
	s.space()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		s.space()
		if s.pos == len(s.data) || s.data[s.pos] != '"' {
			return s.fail(ErrSyntax, "expected a string key")
		}
		keyAt := s.pos
		key, err := s.str(true)
		if err != nil {
			return err
		}
		if !seen.add(key) {
			s.pos = keyAt
			return s.fail(ErrDuplicateKey, "%s", quote(key))
		}
		child := elem
		if fields != nil {
			if ft, ok := fields.exact[key]; ok {
				child = ft
			} else if name, ok := fields.folds(key); ok {
				s.pos = keyAt
				return s.fail(ErrKeyCase, "%s is not the field %s", quote(key), quote(name))
			} else if s.opts.DisallowUnknownFields {
				s.pos = keyAt
				return s.fail(ErrUnknownField, "%s", quote(key))
			}
		}
		s.space()
		if s.pos == len(s.data) || s.data[s.pos] != ':' {
			return s.fail(ErrSyntax, "expected ':' after an object key")
		}
		s.pos++
		s.space()
		if err := s.value(child); err != nil {
			return err
		}
		s.space()
		if s.pos == len(s.data) {
			return s.fail(ErrSyntax, "unexpected end of JSON in an object")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			s.depth--
			return nil
		default:
			return s.fail(ErrSyntax, "expected ',' or '}' in an object")
		}
	}
}

func (s *scanner) array(t reflect.Type) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // [
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = target(t.Elem())
	}
	s.space()
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		s.space()
		if err := s.value(elem); err != nil {
			return err
		}
		s.space()
		if s.pos == len(s.data) {
			return s.fail(ErrSyntax, "unexpected end of JSON in an array")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.depth--
			return nil
		default:
			return s.fail(ErrSyntax, "expected ',' or ']' in an array")
		}
	}
}

// str checks the string at pos and, when decode, returns its text. A key
// without escapes, the usual case, is returned as its bytes in data, not
// copied: see keyText.
func (s *scanner) str(decode bool) (string, error) {
	s.pos++ // "
	var b []byte
	escaped := false
	start := s.pos // of the run of bytes not yet copied to b: the whole text until an escape
	for {
		// The usual bytes, printable ASCII, in a tight loop.
		for s.pos < len(s.data) {
			if c := s.data[s.pos]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
				break
			}
			s.pos++
		}
		if s.pos == len(s.data) {
			return "", s.fail(ErrSyntax, "unterminated string")
		}
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			switch {
			case !decode:
				return "", nil
			case !escaped:
				return keyText(s.data[start : s.pos-1]), nil
			}
			b = append(b, s.data[start:s.pos-1]...)
			return string(b), nil
		case c < 0x20:
			return "", s.fail(ErrSyntax, "control character in a string")
		case c == '\\':
			if decode {
				b = append(b, s.data[start:s.pos]...)
			}
			escaped = true
			r, err := s.escape()
			if err != nil {
				return "", err
			}
			if decode {
				b = utf8.AppendRune(b, r)
			}
			start = s.pos
		default:
			r, n := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && n == 1 {
				return "", s.fail(ErrInvalidUTF8, "")
			}
			s.pos += n
		}
	}
}

// keyText is an unescaped key as a string sharing data's bytes. The scan
// never changes data, and a key is kept only while its object is scanned
// (in its keySet, to find duplicates); an error quotes it into a new
// string. Copying every key was a fifth of a Stripe event's decoding.
func keyText(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// escape reads one escape sequence at pos (a backslash) and returns its
// character, joining a surrogate pair.
func (s *scanner) escape() (rune, error) {
	if s.pos+1 >= len(s.data) {
		return 0, s.fail(ErrSyntax, "unterminated escape")
	}
	c := s.data[s.pos+1]
	if c != 'u' {
		s.pos += 2
		switch c {
		case '"', '\\', '/':
			return rune(c), nil
		case 'b':
			return '\b', nil
		case 'f':
			return '\f', nil
		case 'n':
			return '\n', nil
		case 'r':
			return '\r', nil
		case 't':
			return '\t', nil
		}
		s.pos -= 2
		return 0, s.fail(ErrSyntax, "invalid escape")
	}
	r, ok := s.hex4(s.pos + 2)
	if !ok {
		return 0, s.fail(ErrSyntax, "invalid \\u escape")
	}
	switch {
	case r == 0:
		return 0, s.fail(ErrNUL, "")
	case 0xDC00 <= r && r <= 0xDFFF:
		return 0, s.fail(ErrInvalidUTF8, "lone low surrogate \\u%04x", r)
	case 0xD800 <= r && r <= 0xDBFF:
		lo, ok := rune(0), false
		if s.pos+7 < len(s.data) && s.data[s.pos+6] == '\\' && s.data[s.pos+7] == 'u' {
			lo, ok = s.hex4(s.pos + 8)
		}
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return 0, s.fail(ErrInvalidUTF8, "lone high surrogate \\u%04x", r)
		}
		s.pos += 12
		return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), nil
	}
	s.pos += 6
	return r, nil
}

func (s *scanner) hex4(at int) (rune, bool) {
	if at+4 > len(s.data) {
		return 0, false
	}
	var r rune
	for _, c := range s.data[at : at+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// number checks a number's grammar and bounds.
func (s *scanner) number() error {
	start := s.pos
	digits := func() int {
		n := 0
		for s.pos < len(s.data) && '0' <= s.data[s.pos] && s.data[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	if s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++
	case digits() == 0:
		return s.fail(ErrSyntax, "invalid number")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if digits() == 0 {
			return s.fail(ErrSyntax, "invalid number")
		}
	}
	exp := 0
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		at := s.pos
		if digits() == 0 {
			return s.fail(ErrSyntax, "invalid number")
		}
		for _, c := range s.data[at:s.pos] {
			if exp = exp*10 + int(c-'0'); exp > MaxExponent {
				break
			}
		}
	}
	if s.pos-start > MaxNumberLength || exp > MaxExponent {
		s.pos = start
		return s.fail(ErrNumberRange, "")
	}
	return nil
}

// scannedKey is a key of an object being scanned, with its hash.
type scannedKey struct {
	hash uint64
	key  string
}

// keySet finds an object's duplicate keys: its keys are s.keys[base:],
// compared by hash first; past manyKeys of them, a map, so that no body
// makes the check quadratic.
type keySet struct {
	s    *scanner
	base int
	many map[string]struct{}
}

// manyKeys is where a keySet moves to a map: more keys than provider
// objects have (a Stripe charge has about fifty).
const manyKeys = 128

var keySeed = maphash.MakeSeed()

func (k *keySet) add(key string) bool {
	if k.many == nil {
		h := maphash.String(keySeed, key)
		for _, have := range k.s.keys[k.base:] {
			if have.hash == h && have.key == key {
				return false
			}
		}
		if len(k.s.keys)-k.base < manyKeys {
			k.s.keys = append(k.s.keys, scannedKey{h, key})
			return true
		}
		k.many = make(map[string]struct{}, 2*manyKeys)
		for _, have := range k.s.keys[k.base:] {
			k.many[have.key] = struct{}{}
		}
	}
	if _, ok := k.many[key]; ok {
		return false
	}
	k.many[key] = struct{}{}
	return true
}

// keyBuffers keep the scanners' key buffers between documents: a webhook
// body and each payload applied would otherwise grow one from nothing.
var keyBuffers = sync.Pool{New: func() any { return new([]scannedKey) }}

// done gives the key buffer back.
func (s *scanner) done() {
	if s.keys != nil && cap(s.keys) <= 4*manyKeys { // not a hostile body's
		keys := s.keys[:0]
		keyBuffers.Put(&keys)
	}
	s.keys = nil
}

// drop forgets the object's keys when it ends, clearing them: a pooled
// buffer must not keep a body it has seen alive.
func (k *keySet) drop() {
	clear(k.s.keys[k.base:])
	k.s.keys = k.s.keys[:k.base]
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// target is the type whose shape a value's keys are matched against: t
// without its pointers, or nil when t decodes itself or takes anything.
func target(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler) ||
			t.Implements(textUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
			return nil
		}
		switch t.Kind() {
		case reflect.Pointer:
			t = t.Elem()
		case reflect.Interface:
			return nil
		default:
			return t
		}
	}
	return nil
}

// structFields are the JSON names of a struct's fields as encoding/json
// sees them (a superset where it would drop conflicting ones), with the
// type each decodes into.
type structFields struct {
	exact map[string]reflect.Type
	names []string
	// lower maps each name, in ASCII lower case, to itself, when every
	// name is ASCII: for an ASCII key, folding is then one lookup instead
	// of a comparison with every name (most keys of a provider's object
	// name no field of ours). Nil when a name is not ASCII.
	lower map[string]string
}

// folds returns the field name key matches in another case, as
// encoding/json matches names (bytes.EqualFold is its definition).
func (f *structFields) folds(key string) (string, bool) {
	if f.lower != nil && len(key) <= 64 {
		var buf [64]byte
		ascii := true
		for i := 0; i < len(key) && ascii; i++ {
			c := key[i]
			ascii = c < utf8.RuneSelf
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
		}
		if ascii {
			name, ok := f.lower[string(buf[:len(key)])]
			return name, ok
		}
	}
	for _, name := range f.names {
		if strings.EqualFold(name, key) {
			return name, true
		}
	}
	return "", false
}

// lowerNames builds structFields.lower.
func lowerNames(names []string) map[string]string {
	lower := make(map[string]string, len(names))
	for _, name := range names {
		for i := range len(name) {
			if name[i] >= utf8.RuneSelf {
				return nil
			}
		}
		if l := strings.ToLower(name); lower[l] == "" { // the first, as the comparisons found it
			lower[l] = name
		}
	}
	return lower
}

var fieldCache sync.Map // reflect.Type → *structFields

func fieldsOf(t reflect.Type) *structFields {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*structFields)
	}
	f := &structFields{exact: map[string]reflect.Type{}}
	depthOf := map[string]int{}
	var walk func(t reflect.Type, depth int, path map[reflect.Type]bool)
	walk = func(t reflect.Type, depth int, path map[reflect.Type]bool) {
		if path[t] {
			return
		}
		path[t] = true
		defer delete(path, t)
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if sf.Anonymous {
				ft := sf.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if !sf.IsExported() && ft.Kind() != reflect.Struct {
					continue
				}
				if name == "" && ft.Kind() == reflect.Struct {
					walk(ft, depth+1, path) // promoted fields
					continue
				}
			} else if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if d, ok := depthOf[name]; ok && d <= depth {
				continue
			}
			if _, ok := depthOf[name]; !ok {
				f.names = append(f.names, name)
			}
			depthOf[name] = depth
			f.exact[name] = target(sf.Type)
		}
	}
	walk(t, 0, map[reflect.Type]bool{})
	f.lower = lowerNames(f.names)
	actual, _ := fieldCache.LoadOrStore(t, f)
	return actual.(*structFields)
}
