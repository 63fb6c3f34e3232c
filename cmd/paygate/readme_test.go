package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/outbuf"
	"github.com/paygate/paygate/internal/stripemock"
	"github.com/paygate/paygate/internal/testdb"
)

// devDefaults are the development settings scripts/run.sh gives `make run`
// (`export NAME="${NAME:-value}"`), read from the script so that the test
// follows it.
func devDefaults(t *testing.T) map[string]string {
	t.Helper()
	script, err := os.ReadFile("../../scripts/run.sh")
	require.NoError(t, err)
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^export (PAYGATE_[A-Z_]+)="\$\{[A-Z_]+:?-([^}]*)\}"$`).FindAllStringSubmatch(string(script), -1) {
		out[m[1]] = m[2]
	}
	for _, k := range []string{"PAYGATE_STRIPE_WEBHOOK_SECRETS", "PAYGATE_ADYEN_HMAC_KEYS", "PAYGATE_ADYEN_BASIC_AUTH",
		"PAYGATE_STANDARD_WEBHOOK_SOURCES", "PAYGATE_OPS_TOKENS", "PAYGATE_FINANCE_TOKENS"} {
		require.NotEmpty(t, out[k], "scripts/run.sh sets %s", k)
	}
	return out
}

// docBlock is the shell example of doc (a path from the module's root,
// such as docs/providers.md) that contains marker.
func docBlock(t *testing.T, doc, marker string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", doc))
	require.NoError(t, err)
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(text), -1) {
		if strings.Contains(m[1], marker) {
			return m[1]
		}
	}
	t.Fatalf("%s has no sh example with %q", doc, marker)
	return ""
}

// TestReadmeQuickstarts runs the guides' quickstart examples as written
// (providers.md's signed test events, operations.md's refund, finance.md's
// reconciliation),
// against the real binary configured as `make run` configures it (with
// stripe-mock standing in for Stripe's API, as make run's does with
// PAYGATE_DEV_STRIPE=stripe-mock): only the
// address and the binary's path are put in for the test's own, and the
// examples' one-second wait for the worker is made three, for a loaded
// test machine.
func TestReadmeQuickstarts(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	mock, _ := stripemock.Start(t)
	env := []string{"PAYGATE_STRIPE_API_KEY=sk_test_devpaygatelocal", "PAYGATE_STRIPE_API_URL=" + mock}
	for k, v := range devDefaults(t) {
		env = append(env, k+"="+v)
	}
	srv := startServer(t, dbURL, env...)
	run := func(doc, marker string) string {
		t.Helper()
		script := docBlock(t, doc, marker)
		script = strings.ReplaceAll(script, "127.0.0.1:8080", srv.addr)
		script = strings.ReplaceAll(script, "bin/paygate ", paygateBinary(t)+" ")
		script = strings.ReplaceAll(script, "\nsleep 1", "\nsleep 3")
		script = strings.ReplaceAll(script, "http://127.0.0.1:12111", mock) // make run's stripe-mock
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s example %q:\n%s", doc, marker, out)
		return string(out)
	}

	out := run("docs/providers.md", "/webhooks/stripe -H")
	require.Contains(t, out, `{"received":true,"duplicate":false}`)
	require.Contains(t, out, `"status": "succeeded"`)
	require.Contains(t, out, `"amount_captured": "360.00"`)

	out = run("docs/providers.md", "/webhooks/adyen")
	require.Contains(t, out, "[accepted]")
	require.Contains(t, out, `"provider": "adyen"`)
	require.Contains(t, out, `"status": "succeeded"`)

	out = run("docs/providers.md", "/webhooks/standard/polar")
	require.Contains(t, out, `{"received":true,"duplicate":false}`)
	require.Contains(t, out, `"provider": "polar"`)
	require.Contains(t, out, `"type": "order.paid"`)

	out = run("docs/operations.md", "Idempotency-Key: refund-order-1042")
	require.Contains(t, out, `"state": "requested"`)
	require.Contains(t, out, `"amount": "25.00"`)
	require.Regexp(t, `refund request rr_[0-9a-f]{24}: 5\.00 usd of payment pi_test_1`, out)
	require.Contains(t, out, "submitted", "the CLI follows the request to stripe-mock")

	out = run("docs/finance.md", "reconciliation/runs?date=2026-11-28&limit=1")
	require.Contains(t, out, `"date": "2026-11-28"`)
	require.Contains(t, out, "provider_txn_id", "the CSV's header")
	require.NotContains(t, out, `"status": 404`)
}

// docGo is the Go example of doc that contains marker.
func docGo(t *testing.T, doc, marker string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", doc))
	require.NoError(t, err)
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(text), -1) {
		if strings.Contains(m[1], marker) {
			return m[1]
		}
	}
	t.Fatalf("%s has no go example with %q", doc, marker)
	return ""
}

// TestReadmeDownstream runs docs/downstream.md's examples as written:
// an endpoint registered with its curl command, the Go consumer built from
// its source and run with the secret the registration answered, a signed
// event sent, the consumer verifying and applying the message, and the
// feed read with the consumer token.
func TestReadmeDownstream(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	var env []string
	for k, v := range devDefaults(t) {
		env = append(env, k+"="+v)
	}
	srv := startServer(t, dbURL, env...)
	consumerAddr := freeport.Addr(t)
	run := func(doc, marker string) string {
		t.Helper()
		script := docBlock(t, doc, marker)
		script = strings.ReplaceAll(script, "127.0.0.1:8080", srv.addr)
		script = strings.ReplaceAll(script, "127.0.0.1:9000", consumerAddr)
		out, err := exec.Command("bash", "-euo", "pipefail", "-c", script).CombinedOutput()
		require.NoError(t, err, "%s example %q:\n%s", doc, marker, out)
		return string(out)
	}

	dir := t.TempDir()
	src := strings.ReplaceAll(docGo(t, "docs/downstream.md", "PAYGATE_ENDPOINT_SECRET"), "127.0.0.1:9000", consumerAddr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "consumer.go"), []byte(src), 0o600))
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "consumer"), "consumer.go")
	build.Dir = dir
	out, err := build.CombinedOutput()
	require.NoError(t, err, "docs/downstream.md's consumer.go builds:\n%s", out)

	var endpoint struct {
		ID     string `json:"id"`
		Secret string `json:"secret"`
	}
	require.NoError(t, json.Unmarshal([]byte(run("docs/downstream.md", "endpoint-orders-1")), &endpoint))
	require.True(t, strings.HasPrefix(endpoint.Secret, "whsec_"), "the registration answers the secret")

	logs := &outbuf.Buffer{}
	consumer := exec.Command(filepath.Join(dir, "consumer"))
	consumer.Env = append(os.Environ(), "PAYGATE_ENDPOINT_SECRET="+endpoint.Secret)
	consumer.Stdout, consumer.Stderr = logs, logs
	require.NoError(t, consumer.Start())
	t.Cleanup(func() { _ = consumer.Process.Kill(); _ = consumer.Wait() })

	run("docs/providers.md", "/webhooks/stripe -H")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "payment pi_test_1 is succeeded") },
		30*time.Second, 100*time.Millisecond, "the consumer verified and applied the message:\n%s", logs)

	out2 := run("docs/downstream.md", "/v1/feed?limit=10")
	require.Contains(t, out2, `"type":"payment.succeeded"`)
	require.Contains(t, out2, `"next_cursor":"pos_`)
}
