package statemachine_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/statemachine"
)

// TestStampsJSONRoundTrip: whatever events a payment's fields came from
// (some shared, some copies, times to the nanosecond), the stored form
// reads back as the same stamps.
func TestStampsJSONRoundTrip(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		d := statemachine.Details{}
		for i := range rapid.IntRange(0, 6).Draw(t, "reports") {
			d = d.Merge(report(t, i))
		}
		s := d.Stamps
		if rapid.Bool().Draw(t, "nanoseconds") {
			r := d.Stamps.Reference
			r.At = r.At.Add(time.Duration(rapid.IntRange(1, 999_999_999).Draw(t, "ns")))
			s.Reference = r
		}
		b, err := json.Marshal(s)
		require.NoError(t, err)
		var back statemachine.Stamps
		require.NoError(t, json.Unmarshal(b, &back), string(b))
		require.True(t, back.Equal(s), "%s read back as %+v, not %+v", b, back, s)
	})
}

// TestStampsJSONReadsByFieldObjects: rows written before the stamps were
// grouped by event hold an object keyed by field name; they read as they
// were written.
func TestStampsJSONReadsByFieldObjects(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 23, 58, 4, 0, time.UTC)
	old := `{"customer": {"at": "2026-12-06T23:58:04Z", "copy": true, "event_id": "evt_1"},
		"reference": {"at": "2026-12-06T23:59:04Z", "event_id": "evt_2"}}`
	var s statemachine.Stamps
	require.NoError(t, json.Unmarshal([]byte(old), &s))
	require.True(t, s.Equal(statemachine.Stamps{
		Customer:  statemachine.Stamp{At: at, EventID: "evt_1", Copy: true},
		Reference: statemachine.Stamp{At: at.Add(time.Minute), EventID: "evt_2"},
	}), "%+v", s)
	for _, empty := range []string{`{}`, `[]`, `null`} {
		s := statemachine.Stamps{Reference: statemachine.Stamp{EventID: "evt_x"}}
		require.NoError(t, json.Unmarshal([]byte(empty), &s), empty)
		require.True(t, s.Equal(statemachine.Stamps{}), "%s: %+v", empty, s)
	}
}

// TestStampsJSONGroupsByEvent: every field from one event is one entry, so
// the row a payment rewrites on each change carries the event once.
func TestStampsJSONGroupsByEvent(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 23, 58, 4, 0, time.UTC)
	d := statemachine.Reported("ord-1", "cus_A", "Two mugs", map[string]string{"order_id": "ord-1"},
		statemachine.Stamp{At: at, EventID: "evt_3QxYzAbCdEfGhIjKlMnOpQrS"})
	b, err := json.Marshal(d.Stamps)
	require.NoError(t, err)
	require.Equal(t, `[["evt_3QxYzAbCdEfGhIjKlMnOpQrS","2026-12-06T23:58:04Z","cdmr"]]`, string(b))
	d = d.Merge(statemachine.Reported("", "cus_B", "", nil, statemachine.Stamp{At: at.Add(time.Second), EventID: "evt_4"}))
	b, err = json.Marshal(d.Stamps)
	require.NoError(t, err)
	require.Equal(t, `[["evt_4","2026-12-06T23:58:05Z","c"],["evt_3QxYzAbCdEfGhIjKlMnOpQrS","2026-12-06T23:58:04Z","dmr"]]`, string(b))
	copied := statemachine.Reported("", "cus_C", "", nil, statemachine.Stamp{At: at, EventID: "evt_5", Copy: true})
	b, err = json.Marshal(copied.Stamps)
	require.NoError(t, err)
	require.Equal(t, `[["evt_5","2026-12-06T23:58:04Z","c",true]]`, string(b))

	for _, bad := range []string{`[["evt_1"]]`, `[["evt_1","yesterday","r"]]`, `[["evt_1","2026-12-06T23:58:04Z","x"]]`, `[1]`} {
		var s statemachine.Stamps
		require.Error(t, json.Unmarshal([]byte(bad), &s), bad)
	}
}
