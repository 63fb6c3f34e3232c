package stdwebhooks_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/providertest"
	"github.com/paygate/paygate/provider"
	"github.com/paygate/paygate/provider/stdwebhooks"
)

// TestConformance runs the providers' conformance suite against a Standard
// Webhooks source with two secrets (a rotation).
func TestConformance(t *testing.T) {
	t.Parallel()
	secret := func(s string) string { return "whsec_" + base64.StdEncoding.EncodeToString([]byte(s)) }
	secrets := map[int]string{0: secret("conformance current key"), 1: secret("conformance previous key"), -1: secret("a key nobody configured")}
	signed := func(t *testing.T, key int, id string, at time.Time, body []byte) http.Header {
		sig, err := stdwebhooks.Sign(id, at, body, secrets[key])
		require.NoError(t, err)
		h := http.Header{}
		h.Set(stdwebhooks.HeaderID, id)
		h.Set(stdwebhooks.HeaderTimestamp, fmt.Sprint(at.Unix()))
		h.Set(stdwebhooks.HeaderSignature, sig)
		return h
	}
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T, configured bool) provider.Receiver {
			if !configured {
				return nil // a source cannot be configured without a secret
			}
			r, err := stdwebhooks.NewReceiver(stdwebhooks.Source{Name: "conform", Secrets: []string{secrets[0], secrets[1]}})
			require.NoError(t, err)
			return r
		},
		Request: func(t *testing.T, key int, id string, at time.Time) (http.Header, []byte) {
			body := []byte(`{"type":"order.paid","data":{"id":"ord_1"}}`)
			return signed(t, key, "msg_"+id, at, body), body
		},
		Tamper: func(t *testing.T, header http.Header, body []byte) (http.Header, []byte) {
			return header, bytes.Replace(body, []byte(`"ord_1"`), []byte(`"ord_2"`), 1)
		},
		Unsigned: func(t *testing.T, header http.Header, body []byte) (http.Header, []byte) {
			h := header.Clone()
			h.Del(stdwebhooks.HeaderSignature)
			return h, body
		},
		SignBody: func(t *testing.T, body []byte, at time.Time) http.Header {
			return signed(t, 0, "msg_hostile", at, body)
		},
		Timestamped: true,
	})
}
