package statemachine

import (
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Details are the merchant's own words about a payment, as the provider's
// events carry them: the order reference, the customer, the description and
// the metadata. Empty means not known ("" or an empty map).
//
// Like the facts, they are folded order-free: each field holds the value of
// the newest event (by the provider's created time, then event id) that
// carried a non-empty one, whatever order the events arrived in, and an
// event that carries none erases nothing. Stamps records, per field, which
// event that was.
type Details struct {
	Reference   string
	Customer    string
	Description string
	Metadata    map[string]string
	Stamps      Stamps
}

// DetailField names one field of Details; the names are stored.
type DetailField string

// The fields of Details.
const (
	FieldReference   DetailField = "reference"
	FieldCustomer    DetailField = "customer"
	FieldDescription DetailField = "description"
	FieldMetadata    DetailField = "metadata"
)

// Fields are the fields of Details, in the order they are stored.
var Fields = [...]DetailField{FieldCustomer, FieldDescription, FieldMetadata, FieldReference}

// Stamps records, per field, the event its value came from; a field not
// known has the zero Stamp. It is stored as JSON grouped by event (see
// MarshalJSON); the struct tags are the object keyed by field name that
// rows written before that hold.
type Stamps struct {
	Customer    Stamp `json:"customer,omitzero"`
	Description Stamp `json:"description,omitzero"`
	Metadata    Stamp `json:"metadata,omitzero"`
	Reference   Stamp `json:"reference,omitzero"`
}

// Of returns field f's stamp.
func (s Stamps) Of(f DetailField) Stamp { return *s.at(f) }

func (s *Stamps) at(f DetailField) *Stamp {
	switch f {
	case FieldCustomer:
		return &s.Customer
	case FieldDescription:
		return &s.Description
	case FieldMetadata:
		return &s.Metadata
	default:
		return &s.Reference
	}
}

// Equal reports whether s and o name the same events for every field.
func (s Stamps) Equal(o Stamps) bool {
	for _, f := range Fields {
		if !s.Of(f).Equal(o.Of(f)) {
			return false
		}
	}
	return true
}

// Stamp is the event a detail's value came from: the provider's created
// time of the event, then its id, order events. Copy marks a value read
// from a copy of the payment's own (Stripe copies a PaymentIntent's
// metadata, customer and description into the charge it creates, once): a
// copy stands in until the payment's own object is seen, and never wins
// over it, however new, so a stale copy cannot undo a later change.
type Stamp struct {
	At      time.Time `json:"at"`
	EventID string    `json:"event_id"`
	Copy    bool      `json:"copy,omitempty"`
}

// IsZero reports whether s names no event.
func (s Stamp) IsZero() bool { return s.At.IsZero() && s.EventID == "" && !s.Copy }

// Equal reports whether s and o name the same event, alike.
func (s Stamp) Equal(o Stamp) bool {
	return s.At.Equal(o.At) && s.EventID == o.EventID && s.Copy == o.Copy
}

// After reports whether s is newer than o. The zero Stamp is older than
// every other.
func (s Stamp) After(o Stamp) bool {
	if o.IsZero() {
		return !s.IsZero()
	}
	if s.Copy != o.Copy {
		return !s.Copy
	}
	if !s.At.Equal(o.At) {
		return s.At.After(o.At)
	}
	return s.EventID > o.EventID
}

// Bounds on what is kept of the merchant's words: Stripe's own limits on
// metadata (50 keys, keys of 40 characters, values of 500), and as much for
// the other fields. Longer input is cut, never refused: the provider already
// accepted it, and the gateway records, it does not authorize.
const (
	MaxMetadataKeys   = 50
	MaxMetadataKeyLen = 40
	MaxDetailLen      = 500
)

// Reported is what one event says of a payment's details, bounded: each
// text cut to MaxDetailLen characters, metadata to MaxMetadataKeys keys (the
// first in key order) of MaxMetadataKeyLen characters with values of
// MaxDetailLen. Empty values and keys are dropped. stamp marks every field
// the event carries.
func Reported(reference, customer, description string, metadata map[string]string, stamp Stamp) Details {
	d := Details{
		Reference:   cut(reference, MaxDetailLen),
		Customer:    cut(customer, MaxDetailLen),
		Description: cut(description, MaxDetailLen),
	}
	// Sorted only when some keys must go: which are kept then depends on
	// order (the first MaxMetadataKeys, the first of two keys alike once
	// cut); otherwise every key is kept, in any order.
	keys := maps.Keys(metadata)
	if len(metadata) > MaxMetadataKeys || longKey(metadata) {
		keys = slices.Values(slices.Sorted(maps.Keys(metadata)))
	}
	for k := range keys {
		if len(d.Metadata) == MaxMetadataKeys {
			break
		}
		key, v := cut(k, MaxMetadataKeyLen), cut(metadata[k], MaxDetailLen)
		if key == "" || v == "" {
			continue
		}
		if _, dup := d.Metadata[key]; dup {
			continue // two keys alike in their first 40 characters: the first wins
		}
		if d.Metadata == nil {
			d.Metadata = make(map[string]string, len(metadata))
		}
		d.Metadata[key] = v
	}
	stamp.At = stamp.At.UTC()
	for _, f := range Fields {
		if d.has(f) {
			*d.Stamps.at(f) = stamp
		}
	}
	return d
}

// longKey reports whether a key of m is longer than MaxMetadataKeyLen bytes
// (and so may be cut).
func longKey(m map[string]string) bool {
	for k := range m {
		if len(k) > MaxMetadataKeyLen {
			return true
		}
	}
	return false
}

// cut trims s and keeps at most n characters of it, never splitting one.
func cut(s string, n int) string {
	if len(s) <= n && isPlain(s) {
		return s // the usual case: nothing to trim, replace or cut
	}
	// PostgreSQL's text holds no NUL character, nor jsonb a \u0000.
	s = strings.TrimSpace(strings.ReplaceAll(s, "\x00", ""))
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return strings.TrimSpace(string([]rune(s)[:n]))
}

// isPlain reports whether s is printable ASCII with no space at either end:
// text cut keeps as it is when it is short enough.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			if c == ' ' && i > 0 && i < len(s)-1 {
				continue
			}
			return false
		}
	}
	return true
}

// IsZero reports whether d carries nothing.
func (d Details) IsZero() bool {
	return d.Reference == "" && d.Customer == "" && d.Description == "" && len(d.Metadata) == 0
}

// has reports whether d has a value for f.
func (d Details) has(f DetailField) bool {
	switch f {
	case FieldCustomer:
		return d.Customer != ""
	case FieldDescription:
		return d.Description != ""
	case FieldMetadata:
		return len(d.Metadata) > 0
	default:
		return d.Reference != ""
	}
}

// Merge folds what an event reported (from Reported) into d and returns the
// result: each field the event carries replaces d's when the event is newer
// than the one d's value came from. It is commutative and idempotent, so the
// result of merging a set of reports is the same in every order and with
// every repetition. d is not modified.
func (d Details) Merge(in Details) Details {
	out := d
	for _, f := range Fields {
		if !in.has(f) {
			continue
		}
		stamp := in.Stamps.Of(f)
		if cur := d.Stamps.Of(f); !cur.IsZero() && !stamp.After(cur) {
			continue
		}
		*out.Stamps.at(f) = stamp
		switch f {
		case FieldReference:
			out.Reference = in.Reference
		case FieldCustomer:
			out.Customer = in.Customer
		case FieldDescription:
			out.Description = in.Description
		case FieldMetadata:
			out.Metadata = maps.Clone(in.Metadata)
		}
	}
	return out
}

// Equal reports whether d and o hold the same values (stamps aside).
func (d Details) Equal(o Details) bool {
	return d.Reference == o.Reference && d.Customer == o.Customer && d.Description == o.Description &&
		maps.Equal(d.Metadata, o.Metadata)
}
