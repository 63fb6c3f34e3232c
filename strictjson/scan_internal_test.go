package strictjson

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScanLeavesNoKeysBehind: once a document is scanned, its key buffer,
// which goes back to a pool, holds no key: every key shares the body's
// bytes, and a pooled buffer must not keep a body alive.
func TestScanLeavesNoKeysBehind(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"evt_1","data":{"object":{"id":"ch_1","amount":100,"metadata":{"a":"1","b":"2"}}},"list":[{"x":1},{"y":2}]}`)
	s := scanner{data: body, opts: &Opts{}}
	require.NoError(t, s.document(nil))
	require.Empty(t, s.keys)
	for i, k := range s.keys[:cap(s.keys)] {
		require.Zero(t, k, "entry %d of the buffer still holds a key", i)
	}
	s.done()
	require.Nil(t, s.keys)
}
