package statemachine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// fieldInitials name the fields in the stored stamps, in Fields' order.
const fieldInitials = "cdmr"

// MarshalJSON writes s as an array with one entry per event a field's
// value came from, in the order of Fields: the event's id, its time (RFC
// 3339, UTC), the initials of its fields (c, d, m, r) and, for a copy, true:
//
//	[["evt_1","2026-12-07T05:23:00Z","cdmr"]]
//
// A payment's fields mostly come from one or two events, so this is a
// fifth of the object keyed by field name, and the row a payment writes on
// every change is that much smaller. The zero Stamps is [].
func (s Stamps) MarshalJSON() ([]byte, error) {
	type group struct {
		stamp  Stamp
		fields []byte
	}
	groups := make([]group, 0, 2)
next:
	for i, f := range Fields {
		st := s.Of(f)
		if st.IsZero() {
			continue
		}
		for g := range groups {
			if groups[g].stamp.Equal(st) {
				groups[g].fields = append(groups[g].fields, fieldInitials[i])
				continue next
			}
		}
		groups = append(groups, group{stamp: st, fields: []byte{fieldInitials[i]}})
	}
	b := make([]byte, 0, 64*len(groups)+2)
	b = append(b, '[')
	for i, g := range groups {
		if i > 0 {
			b = append(b, ',')
		}
		id, err := json.Marshal(g.stamp.EventID)
		if err != nil {
			return nil, err
		}
		b = append(b, '[')
		b = append(b, id...)
		b = append(b, ',', '"')
		b = g.stamp.At.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"', ',', '"')
		b = append(b, g.fields...)
		b = append(b, '"')
		if g.stamp.Copy {
			b = append(b, ",true"...)
		}
		b = append(b, ']')
	}
	return append(b, ']'), nil
}

// stampsByField is the object keyed by field name that Stamps were stored
// as before MarshalJSON grouped them by event.
type stampsByField Stamps

// UnmarshalJSON reads either stored form: the array MarshalJSON writes, or
// the object keyed by field name of rows written before it.
func (s *Stamps) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '[' {
		*s = Stamps{}
		return json.Unmarshal(data, (*stampsByField)(s))
	}
	var entries [][]json.RawMessage
	if err := json.Unmarshal(data, &entries); err != nil {
		return fmt.Errorf("detail stamps: %w", err)
	}
	out := Stamps{}
	for _, e := range entries {
		var (
			st     Stamp
			at     string
			fields string
		)
		if len(e) < 3 || len(e) > 4 {
			return fmt.Errorf("detail stamps: an entry of %d elements, not 3 or 4", len(e))
		}
		if err := json.Unmarshal(e[0], &st.EventID); err != nil {
			return fmt.Errorf("detail stamps: event id: %w", err)
		}
		if err := json.Unmarshal(e[1], &at); err != nil {
			return fmt.Errorf("detail stamps: time: %w", err)
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return fmt.Errorf("detail stamps: time: %w", err)
		}
		st.At = t.UTC()
		if err := json.Unmarshal(e[2], &fields); err != nil {
			return fmt.Errorf("detail stamps: fields: %w", err)
		}
		if len(e) == 4 {
			if err := json.Unmarshal(e[3], &st.Copy); err != nil {
				return fmt.Errorf("detail stamps: copy: %w", err)
			}
		}
		for _, c := range []byte(fields) {
			i := strings.IndexByte(fieldInitials, c)
			if i < 0 {
				return fmt.Errorf("detail stamps: no field %q", c)
			}
			*out.at(Fields[i]) = st
		}
	}
	*s = out
	return nil
}
