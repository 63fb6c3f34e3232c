package adyen_test

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/providertest"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/adyen"
)

// TestConformance runs the providers' conformance suite against Adyen's
// Receiver: keys testKey and oldKey, and Basic auth.
func TestConformance(t *testing.T) {
	t.Parallel()
	auth := http.Header{}
	auth.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(testUser+":"+testPass)))
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T, configured bool) provider.Receiver {
			cfg := adyen.Config{BasicAuth: testUser + ":" + testPass}
			if configured {
				cfg.HMACKeys = [][]byte{testKey, oldKey}
			}
			r, err := adyen.NewReceiver(cfg)
			require.NoError(t, err)
			return r
		},
		Request: func(t *testing.T, key int, id string, at time.Time) (http.Header, []byte) {
			k := map[int][]byte{0: testKey, 1: oldKey, -1: wrongKey}[key]
			it := signed(k, func(it *adyen.Item) {
				it.PspReference = id
				it.EventDate = at.Format(time.RFC3339)
			})
			return auth.Clone(), batchBody("false", itemJSON(t, it))
		},
		Tamper: func(t *testing.T, header http.Header, body []byte) (http.Header, []byte) {
			// The amount is signed; 1999 becomes 9999.
			tampered := bytes.Replace(body, []byte(`"value":1999`), []byte(`"value":9999`), 1)
			require.NotEqual(t, body, tampered)
			return header, tampered
		},
		Unsigned: func(t *testing.T, header http.Header, body []byte) (http.Header, []byte) {
			stripped := bytes.Replace(body, []byte(`"hmacSignature"`), []byte(`"hmacSignatureX"`), 1)
			require.NotEqual(t, body, stripped)
			return header, stripped
		},
	})
}
