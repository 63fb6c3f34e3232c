package stripe_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"github.com/paygate/paygate/internal/outbuf"
	striperef "github.com/paygate/paygate/provider/stripe"
)

// stripeMockVersion is the version scripts/tools.sh pins.
const stripeMockVersion = "v0.203.0"

// stripeMockBinary finds stripe-mock: $STRIPE_MOCK_BIN, ./.tools/bin under
// the module root (where scripts/tools.sh installs the pinned version),
// then PATH.
func stripeMockBinary(t *testing.T) string {
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
		"run `make test`, or scripts/tools.sh to install github.com/stripe/stripe-mock@" + stripeMockVersion + " into ./.tools/bin")
	return ""
}

// tail is the end of stripe-mock's log, past its list of routes.
func tail(log string) string {
	if i := strings.LastIndex(log, "Compiled path:"); i >= 0 {
		log = log[i:]
	}
	if len(log) > 8000 {
		log = log[len(log)-8000:]
	}
	return log
}

// startStripeMock runs stripe-mock on a free loopback port until the test
// ends and returns its base URL (without /v1) and its log.
func startStripeMock(t *testing.T) (string, *outbuf.Buffer) {
	t.Helper()
	bin := stripeMockBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

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
			t.Fatalf("stripe-mock did not start: %v\n%s", err, tail(logs.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStripeRequestShapesAgainstStripeMock runs every stripe-go call the
// reconciliation makes against stripe-mock, which validates each request
// against Stripe's OpenAPI specification and refuses unknown or ill-typed
// parameters: the created range, page size, cursor, source and payout
// filters are requests Stripe accepts.
func TestStripeRequestShapesAgainstStripeMock(t *testing.T) {
	t.Parallel()
	base, logs := startStripeMock(t)
	ctx := context.Background()

	// stripe-mock really validates: an unknown parameter and an ill-typed
	// range are refused, so the acceptances below mean something.
	for _, q := range []string{"bogus=1", "created%5Bgte%5D=yesterday", "limit=ten"} {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/balance_transactions?"+q, nil)
		req.SetBasicAuth("sk_test_123", "")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, q)
	}

	p, err := striperef.NewAPI(striperef.APIConfig{APIKey: "sk_test_123", URL: base, MaxNetworkRetries: stripe.Int64(0)})
	require.NoError(t, err)
	from := time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 0, 1)

	bts, err := p.BalanceTransactions(ctx, from, to)
	require.NoError(t, err, tail(logs.String()))
	require.NotEmpty(t, bts)
	require.NotEmpty(t, bts[0].ID)
	require.NotEmpty(t, bts[0].Currency)

	_, err = p.BalanceTransactionsBySource(ctx, "ch_123")
	require.NoError(t, err, tail(logs.String()))
	_, err = p.PayoutTransactions(ctx, "po_123")
	require.NoError(t, err, tail(logs.String()))
	_, found, err := p.BalanceTransaction(ctx, "txn_123")
	require.NoError(t, err, tail(logs.String()))
	require.True(t, found)

	events, err := p.Events(ctx, from, to)
	require.NoError(t, err, tail(logs.String()))
	require.NotEmpty(t, events)
	for _, ev := range events {
		var head struct {
			ID     string `json:"id"`
			Object string `json:"object"`
		}
		require.NoError(t, json.Unmarshal(ev.Payload, &head))
		require.Equal(t, ev.ID, head.ID)
		require.Equal(t, "event", head.Object)
	}

	// The requests went out as Stripe expects them: the day as a created
	// range, pages of 100, and the filters by name. stripe-mock's log
	// reaches us through a pipe: give it a moment.
	wants := []string{
		"GET /v1/balance_transactions",
		fmt.Sprintf("gte:%d", from.Unix()),
		fmt.Sprintf("lt:%d", to.Unix()),
		"limit:100",
		"source:ch_123",
		"payout:po_123",
		"GET /v1/balance_transactions/txn_123",
		"GET /v1/events",
	}
	var out string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out = logs.String()
		missing := false
		for _, want := range wants {
			missing = missing || !strings.Contains(out, want)
		}
		if !missing || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range wants {
		require.True(t, strings.Contains(out, want), "stripe-mock saw no %q in:\n%s", want, tail(out))
	}
}
