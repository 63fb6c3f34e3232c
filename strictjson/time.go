package strictjson

import (
	"errors"
	"fmt"
	"time"
)

// ErrTimestampOutOfRange: a provider timestamp outside the sane window
// [MinUnix, MaxUnix).
var ErrTimestampOutOfRange = errors.New("timestamp outside 2000-01-01..2100-01-01 UTC")

// The sane window for a provider's Unix timestamps, in seconds: from
// 2000-01-01 (inclusive) to 2100-01-01 (exclusive), UTC. Nothing a payment
// provider reports happened before the first or after the second; values
// outside are a bug, a test fixture or an attack (0 books at 1970, int64
// max wraps to 1969, 1e13 is beyond what PostgreSQL's timestamptz holds),
// and an append-only ledger could never correct a transaction dated by
// one.
const (
	MinUnix int64 = 946_684_800   // 2000-01-01T00:00:00Z
	MaxUnix int64 = 4_102_444_800 // 2100-01-01T00:00:00Z
)

// ValidUnix returns sec, a Unix time in seconds as providers send it
// ("created"), as a UTC time.
//
// It fails with ErrTimestampOutOfRange when sec is outside [MinUnix,
// MaxUnix); a caller that needs the field present checks that first (0, an
// absent field's value, is outside).
func ValidUnix(sec int64) (time.Time, error) {
	if sec < MinUnix || sec >= MaxUnix {
		return time.Time{}, fmt.Errorf("%w: %d", ErrTimestampOutOfRange, sec)
	}
	return time.Unix(sec, 0).UTC(), nil
}
