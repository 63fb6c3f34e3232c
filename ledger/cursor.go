package ledger

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A keyset cursor names the last row of a page by its sort key: a time (to
// the microsecond, as the database keeps it) and a key that breaks ties,
// under a kind ("p1" payments, "d1" double charges, "u1" unconverted
// movements) so that one list's cursor is refused by another. It is
// base64url, opaque in a URL.
func keysetCursor(kind string, at time.Time, key string) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s:%d:%s", kind, at.UnixMicro(), key))
}

// parseKeysetCursor reads a cursor of kind; ErrBadCursor for anything
// else. The key may hold colons.
func parseKeysetCursor(kind, s string) (time.Time, string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", ErrBadCursor
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[0] != kind || parts[2] == "" {
		return time.Time{}, "", ErrBadCursor
	}
	micros, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return time.Time{}, "", ErrBadCursor
	}
	return time.UnixMicro(micros).UTC(), parts[2], nil
}
