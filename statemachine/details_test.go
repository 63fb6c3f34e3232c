package statemachine_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/paygate/paygate/statemachine"
)

// report draws what one event of a payment may say of its details: some
// fields, or none (a refund, a dispute), at a time that may tie another's.
func report(t *rapid.T, i int) statemachine.Details {
	base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	at := base.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, fmt.Sprint("at", i))) * time.Minute)
	pick := func(label string, values ...string) string {
		return rapid.SampledFrom(values).Draw(t, fmt.Sprint(label, i))
	}
	var metadata map[string]string
	if rapid.Bool().Draw(t, fmt.Sprint("has_metadata", i)) {
		metadata = map[string]string{"order_id": pick("md_order", "ord-1", "ord-2"), "cart": pick("md_cart", "c1", "")}
	}
	return statemachine.Reported(pick("reference", "", "ord-1", "ord-2"), pick("customer", "", "cus_A", "cus_B"),
		pick("description", "", "Two mugs", "A kettle"), metadata,
		statemachine.Stamp{At: at, EventID: fmt.Sprintf("evt_%02d", i), Copy: rapid.Bool().Draw(t, fmt.Sprint("copy", i))})
}

// newest is the model: per field, the value of the report that carries one
// and ranks highest (the payment's own words over a copy, then the latest,
// then the greatest event id).
func newest(reports []statemachine.Details) statemachine.Details {
	type pick struct {
		value string
		meta  map[string]string
		stamp statemachine.Stamp
		set   bool
	}
	ranks := func(a, b statemachine.Stamp) bool { // a above b
		if a.Copy != b.Copy {
			return !a.Copy
		}
		if !a.At.Equal(b.At) {
			return a.At.After(b.At)
		}
		return a.EventID > b.EventID
	}
	var ref, cus, desc, meta pick
	for _, r := range reports {
		consider := func(p *pick, value string, m map[string]string, f statemachine.DetailField) {
			if value == "" && len(m) == 0 {
				return
			}
			if s := r.Stamps.Of(f); !p.set || ranks(s, p.stamp) {
				*p = pick{value: value, meta: m, stamp: s, set: true}
			}
		}
		consider(&ref, r.Reference, nil, statemachine.FieldReference)
		consider(&cus, r.Customer, nil, statemachine.FieldCustomer)
		consider(&desc, r.Description, nil, statemachine.FieldDescription)
		consider(&meta, "", r.Metadata, statemachine.FieldMetadata)
	}
	return statemachine.Details{Reference: ref.value, Customer: cus.value, Description: desc.value, Metadata: meta.meta}
}

// TestDetailsOrderFree: for any permutation and duplication of a payment's
// reports, some carrying details and some not, the folded details are the
// same, and each field is what the newest report carrying it says.
func TestDetailsOrderFree(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(t, "reports")
		reports := make([]statemachine.Details, n)
		for i := range reports {
			reports[i] = report(t, i)
		}
		want := newest(reports)
		for round := range 3 {
			// A permutation with duplicates: every report at least once.
			order := rapid.Permutation(reports).Draw(t, fmt.Sprint("order", round))
			for range rapid.IntRange(0, 4).Draw(t, fmt.Sprint("dups", round)) {
				order = append(order, rapid.SampledFrom(reports).Draw(t, fmt.Sprint("dup", round)))
			}
			var got statemachine.Details
			for _, r := range order {
				got = got.Merge(r)
			}
			if !got.Equal(want) {
				t.Fatalf("order %d: folded %+v, want %+v", round, got, want)
			}
		}
	})
}

// TestDetailsOwnWordsBeatACopy: a charge's copy of its PaymentIntent's
// metadata names the order until the PaymentIntent is seen, and a later
// copy (a charge.updated days after the PaymentIntent's metadata changed)
// never undoes the PaymentIntent's own words.
func TestDetailsOwnWordsBeatACopy(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	copyAtPayment := statemachine.Reported("ord-1", "", "", map[string]string{"order_id": "ord-1"},
		statemachine.Stamp{At: day, EventID: "evt_charge_succeeded", Copy: true})
	own := statemachine.Reported("ord-1b", "", "", map[string]string{"order_id": "ord-1b"},
		statemachine.Stamp{At: day.Add(time.Hour), EventID: "evt_pi_updated"})
	staleCopy := statemachine.Reported("ord-1", "", "", map[string]string{"order_id": "ord-1"},
		statemachine.Stamp{At: day.Add(48 * time.Hour), EventID: "evt_charge_updated", Copy: true})

	require.Equal(t, "ord-1", statemachine.Details{}.Merge(copyAtPayment).Reference)
	for _, order := range [][]statemachine.Details{
		{copyAtPayment, own, staleCopy}, {staleCopy, own, copyAtPayment}, {own, staleCopy}, {staleCopy, own},
	} {
		var d statemachine.Details
		for _, r := range order {
			d = d.Merge(r)
		}
		require.Equal(t, "ord-1b", d.Reference)
		require.Equal(t, map[string]string{"order_id": "ord-1b"}, d.Metadata)
	}
}

// TestDetailsNothingErases: an event that carries no details (a refund, a
// dispute) leaves every field as it was.
func TestDetailsNothingErases(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	d := statemachine.Details{}.Merge(statemachine.Reported("ord-7", "cus_1", "A kettle", map[string]string{"k": "v"},
		statemachine.Stamp{At: at, EventID: "evt_1"}))
	empty := statemachine.Reported("", "", "", nil, statemachine.Stamp{At: at.Add(time.Hour), EventID: "evt_2"})
	require.True(t, empty.IsZero())
	after := d.Merge(empty)
	require.True(t, after.Equal(d))
	require.Equal(t, d.Stamps, after.Stamps)
}

// TestReportedBounds: what a provider accepted is kept, cut to Stripe's own
// limits, never refused; text PostgreSQL cannot hold is cleaned.
func TestReportedBounds(t *testing.T) {
	t.Parallel()
	metadata := map[string]string{}
	for i := range 80 {
		metadata[fmt.Sprintf("key_%03d", i)] = "v"
	}
	long := strings.Repeat("é", 700)
	metadata[strings.Repeat("k", 60)] = long
	metadata["empty"] = ""
	d := statemachine.Reported(long, "cus_\x00A", " padded ", metadata, statemachine.Stamp{EventID: "evt"})
	require.Len(t, []rune(d.Reference), statemachine.MaxDetailLen)
	require.Equal(t, "cus_A", d.Customer)
	require.Equal(t, "padded", d.Description)
	require.Len(t, d.Metadata, statemachine.MaxMetadataKeys)
	for k, v := range d.Metadata {
		require.LessOrEqual(t, len([]rune(k)), statemachine.MaxMetadataKeyLen)
		require.LessOrEqual(t, len([]rune(v)), statemachine.MaxDetailLen)
		require.NotEmpty(t, v)
	}
	// The first 50 keys in key order are the ones kept.
	keys := slices.Sorted(maps.Keys(d.Metadata))
	require.Equal(t, "key_000", keys[0])
	require.Equal(t, "key_049", keys[len(keys)-1])
	require.NotContains(t, d.Metadata, "empty")
}
