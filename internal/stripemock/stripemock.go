// Package stripemock runs stripe-mock (Stripe's own API stand-in, which
// validates every request against Stripe's OpenAPI specification) for
// tests: the version scripts/tools.sh pins, on a free loopback port.
//
// It must never be imported by production code.
package stripemock

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/outbuf"
)

// Version is the version scripts/tools.sh pins.
const Version = "v0.203.0"

// Binary finds stripe-mock: $STRIPE_MOCK_BIN, ./.tools/bin under
// the module root (where scripts/tools.sh installs the pinned version),
// then PATH.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("STRIPE_MOCK_BIN"); p != "" {
		return p
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			p := filepath.Join(dir, ".tools", "bin", "stripe-mock")
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p
			}
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p
	}
	t.Fatalf("stripe-mock not found (looked at $STRIPE_MOCK_BIN, ./.tools/bin/stripe-mock and PATH): " +
		"run `make test`, or scripts/tools.sh to install github.com/stripe/stripe-mock@" + Version + " into ./.tools/bin")
	return ""
}

// Tail is the end of stripe-mock's log, past its list of routes.
func Tail(log string) string {
	if i := strings.LastIndex(log, "Compiled path:"); i >= 0 {
		log = log[i:]
	}
	if len(log) > 8000 {
		log = log[len(log)-8000:]
	}
	return log
}

// Start runs stripe-mock on a free loopback port until the test
// ends and returns its base URL (without /v1) and its log.
func Start(t testing.TB) (string, *outbuf.Buffer) {
	t.Helper()
	bin := Binary(t)
	port := freeport.MustPort(t)

	logs := &outbuf.Buffer{}
	cmd := exec.Command(bin, "-http-addr", fmt.Sprintf("127.0.0.1:%d", port), "-https-addr", "127.0.0.1:0", "-verbose")
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/v1/balance_transactions")
		if err == nil {
			resp.Body.Close()
			return base, logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("stripe-mock did not start: %v\n%s", err, Tail(logs.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
