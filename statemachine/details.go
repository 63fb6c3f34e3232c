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
	Stamps      map[DetailField]Stamp
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

// After reports whether s is newer than o. The zero Stamp is older than
// every other.
func (s Stamp) After(o Stamp) bool {
	if o == (Stamp{}) {
		return s != o
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
	for _, k := range slices.Sorted(maps.Keys(metadata)) {
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
			d.Metadata = map[string]string{}
		}
		d.Metadata[key] = v
	}
	stamp.At = stamp.At.UTC()
	for _, f := range d.carried() {
		if d.Stamps == nil {
			d.Stamps = map[DetailField]Stamp{}
		}
		d.Stamps[f] = stamp
	}
	return d
}

// cut trims s and keeps at most n characters of it, never splitting one.
func cut(s string, n int) string {
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

// IsZero reports whether d carries nothing.
func (d Details) IsZero() bool { return len(d.carried()) == 0 }

// carried lists the fields d has a value for.
func (d Details) carried() []DetailField {
	var out []DetailField
	if d.Reference != "" {
		out = append(out, FieldReference)
	}
	if d.Customer != "" {
		out = append(out, FieldCustomer)
	}
	if d.Description != "" {
		out = append(out, FieldDescription)
	}
	if len(d.Metadata) > 0 {
		out = append(out, FieldMetadata)
	}
	return out
}

// Merge folds what an event reported (from Reported) into d and returns the
// result: each field the event carries replaces d's when the event is newer
// than the one d's value came from. It is commutative and idempotent, so the
// result of merging a set of reports is the same in every order and with
// every repetition. d is not modified.
func (d Details) Merge(in Details) Details {
	out := d
	out.Stamps = maps.Clone(d.Stamps)
	for _, f := range in.carried() {
		stamp := in.Stamps[f]
		if cur, ok := d.Stamps[f]; ok && !stamp.After(cur) {
			continue
		}
		if out.Stamps == nil {
			out.Stamps = map[DetailField]Stamp{}
		}
		out.Stamps[f] = stamp
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
