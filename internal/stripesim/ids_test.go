package stripesim

import (
	"encoding/json"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripeschema"
)

var stripeIDPattern = regexp.MustCompile(`^[a-z]+_[0-9A-Za-z]{24}$`)

// idSeconds decodes the five base-62 characters after an id's version
// character: the seconds since idEpoch when it was made.
func idSeconds(t *testing.T, id string) int64 {
	t.Helper()
	require.Regexp(t, stripeIDPattern, id)
	var n int64
	for _, c := range id[strings.IndexByte(id, '_')+2:][:5] {
		n = n*int64(len(idAlphabet)) + int64(strings.IndexRune(idAlphabet, c))
	}
	return n
}

// Stripe's own objects, in the fixtures that the stripe-mock releases the
// schema tests pin ship next to the spec, count seconds from idEpoch in
// their ids: every fixture whose created time is real (not the 1234567890
// placeholder) decodes to it.
func TestIDsCountSecondsAsStripesDo(t *testing.T) {
	t.Parallel()
	for _, sp := range schemaSpecs {
		spec, err := stripeschema.StripeMockSpec(sp.mock)
		require.NoError(t, err)
		raw, err := os.ReadFile(filepath.Join(filepath.Dir(spec), "fixtures3.json"))
		require.NoError(t, err)
		var fixtures any
		require.NoError(t, json.Unmarshal(raw, &fixtures))

		checked := 0
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				id, _ := v["id"].(string)
				created, _ := v["created"].(float64)
				if stripeIDPattern.MatchString(id) && created > 0 && created != 1234567890 {
					require.Equal(t, int64(created)-idEpoch, idSeconds(t, id), "stripe-mock %s fixture %s", sp.mock, id)
					checked++
				}
				for _, f := range v {
					walk(f)
				}
			case []any:
				for _, f := range v {
					walk(f)
				}
			}
		}
		walk(fixtures)
		require.GreaterOrEqual(t, checked, 10, "stripe-mock %s: fixtures with real created times", sp.mock)
	}
}

// The simulator's ids carry its clock as Stripe's do, sort in the order they
// were made, share the account's characters and never repeat.
func TestSimIDsCarryTheClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 3, 14, 9, 30, 0, 0, time.UTC)
	sim := New(Config{Seed: 7, Now: start})
	first := sim.Pay(PayOpts{Amount: 1000, Currency: "usd"})
	sim.Advance(36 * time.Hour)
	later := sim.Pay(PayOpts{Amount: 1000, Currency: "usd"})

	require.Equal(t, start.Unix()-idEpoch, idSeconds(t, first.ID))
	require.Equal(t, start.Add(36*time.Hour).Unix()-idEpoch, idSeconds(t, later.ID))
	require.Less(t, first.ID[3:], later.ID[3:], "an id made later sorts later")
	require.Equal(t, first.ID[9:19], later.ChargeID[9:19], "one account's characters")
	require.NotEqual(t, New(Config{Seed: 8, Now: start}).Pay(PayOpts{Amount: 1000, Currency: "usd"}).ID[9:19], first.ID[9:19])

	seen := map[string]bool{}
	for _, e := range sim.PayMix(mrand.New(mrand.NewPCG(1, 2)), 2000, 0.1) {
		require.False(t, seen[e.ID], "event id %s twice", e.ID)
		seen[e.ID] = true
	}
}
