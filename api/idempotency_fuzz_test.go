package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/paygate/paygate/api"
)

// FuzzParseIdempotencyKey: any header value either yields a key of 1 to 255
// printable ASCII characters, the same key whether it was sent bare or as a
// quoted string, or fails with one of the two sentinels (400); it never
// panics.
func FuzzParseIdempotencyKey(f *testing.F) {
	for _, seed := range []string{
		"", " ", "abc", `"abc"`, `"a\"b\\c"`, `"unterminated`, `"a"b"`, `"\x"`, "8e03978e-40d5-43e8-bc93-6894a57f9324",
		"a,b", "a;b", "a b", "\tkey\t", `""`, strings.Repeat("k", 255), strings.Repeat("k", 256), "k\x7f", "ключ", `"\"`,
	} {
		f.Add(seed, false)
	}
	f.Add("key", true)
	f.Fuzz(func(t *testing.T, value string, twice bool) {
		values := []string{value}
		if twice {
			values = append(values, value)
		}
		key, err := api.ParseIdempotencyKey(values)
		if err != nil {
			if !errors.Is(err, api.ErrIdempotencyKeyMissing) && !errors.Is(err, api.ErrIdempotencyKeyInvalid) {
				t.Fatalf("%q: unexpected error %v", value, err)
			}
			return
		}
		if twice {
			t.Fatalf("two Idempotency-Key headers accepted as %q", key)
		}
		if len(key) < 1 || len(key) > 255 {
			t.Fatalf("%q: key of %d bytes", value, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("%q: key %q has byte %#x", value, key, key[i])
			}
		}
		// The quoted form of the same characters is the same key.
		quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		again, err := api.ParseIdempotencyKey([]string{quoted})
		if err != nil || again != key {
			t.Fatalf("%q parsed as %q, but its quoted form %q as %q, %v", value, key, quoted, again, err)
		}
	})
}
