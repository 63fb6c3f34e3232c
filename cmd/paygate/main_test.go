package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/freeport"
	"github.com/paygate/paygate/internal/outbuf"
	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
)

// buildOnce compiles the real binary once for the end-to-end tests.
var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

func paygateBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "paygate-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "paygate")
		out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return binary
}

const (
	testSecret   = "whsec_e2e_secret_value"
	testOps      = "e2e-ops-token-value"
	testFinance  = "e2e-finance-token-value"
	e2eEmailName = "buyer-e2e@example.com"
)

type server struct {
	cmd  *exec.Cmd
	addr string
	logs *outbuf.Buffer
	done chan error
}

func startServer(t *testing.T, dbURL string, extraEnv ...string) *server {
	t.Helper()
	return startServerAt(t, freeport.Addr(t), dbURL, extraEnv...)
}

// startServerAt is startServer on addr, for a test whose stand-ins must
// know the server's address before it starts.
func startServerAt(t *testing.T, addr, dbURL string, extraEnv ...string) *server {
	t.Helper()
	bin := paygateBinary(t)
	env := append(os.Environ(),
		"DATABASE_URL="+dbURL,
		"PAYGATE_STRIPE_WEBHOOK_SECRETS=whsec_old_rotated_out,"+testSecret,
		"PAYGATE_OPS_TOKENS="+testOps,
		"PAYGATE_FINANCE_TOKENS="+testFinance,
	)
	env = append(env, extraEnv...)
	s := &server{addr: addr, logs: &outbuf.Buffer{}, done: make(chan error, 1)}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = append(env, "PAYGATE_ADDR="+s.addr)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	require.NoError(t, s.cmd.Start())
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + s.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not ready: %v\n%s", err, s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitProcessed waits, up to 30s, until n events are processed.
func (s *server) awaitProcessed(t *testing.T, n int) {
	t.Helper()
	var stats struct {
		Events map[string]int `json:"events"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code := getJSON(t, "http://"+s.addr+"/v1/ops/stats", testOps, &stats)
		if code == http.StatusOK && stats.Events["processed"] == n {
			return
		}
		require.False(t, time.Now().After(deadline), "events never applied: %d %+v\n%s", code, stats, s.logs.String())
		time.Sleep(50 * time.Millisecond)
	}
}

func getJSON(t *testing.T, url, token string, v any) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if v != nil && resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	}
	return resp.StatusCode
}

// TestServeEndToEnd: the real binary migrates (twice), serves signed
// webhooks delivered with duplicates and out of order, applies them, answers
// the API, shuts down cleanly on SIGTERM, and logs no secret, token,
// signature or payload.
func TestServeEndToEnd(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	bin := paygateBinary(t)
	migrate := exec.Command(bin, "migrate")
	migrate.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	out, err := migrate.CombinedOutput()
	require.NoError(t, err, string(out))
	migrate = exec.Command(bin, "migrate")
	migrate.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	out, err = migrate.CombinedOutput()
	require.NoError(t, err, "migrate is safe to run twice: %s", out)

	srv := startServer(t, dbURL)
	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd", Email: e2eEmailName})
	sim.Refund(p, 6000)
	results, err := sim.Deliver(context.Background(), "http://"+srv.addr+"/webhooks/stripe", sim.Events(),
		&stripesim.DeliverOpts{Copies: 2, Shuffle: true, Concurrency: 4})
	require.NoError(t, err)
	fresh := 0
	for _, r := range results {
		require.Equal(t, http.StatusOK, r.Status)
		if !r.Duplicate {
			fresh++
		}
	}
	require.Equal(t, len(sim.Events()), fresh, "each event is new exactly once")

	var payment struct {
		Status         string `json:"status"`
		Amount         string `json:"amount"`
		AmountCaptured string `json:"amount_captured"`
		AmountRefunded string `json:"amount_refunded"`
		History        []struct {
			From *string `json:"from"`
			To   string  `json:"to"`
		} `json:"history"`
	}
	// Wait until every event is applied: the state alone is not enough,
	// since a refund applied before its capture already reads
	// partially_refunded.
	srv.awaitProcessed(t, len(sim.Events()))
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+srv.addr+"/v1/payments/"+p.ID, testFinance, &payment))
	require.Equal(t, "partially_refunded", payment.Status)
	require.Equal(t, "360.00", payment.Amount)
	require.Equal(t, "360.00", payment.AmountCaptured)
	require.Equal(t, "60.00", payment.AmountRefunded)
	require.NotEmpty(t, payment.History)
	require.Nil(t, payment.History[0].From)

	var tb struct {
		Currencies []struct {
			Currency string `json:"currency"`
			Debits   string `json:"debits"`
			Balanced bool   `json:"balanced"`
		} `json:"currencies"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+srv.addr+"/v1/ledger/trial-balance", testOps, &tb))
	require.Len(t, tb.Currencies, 1)
	require.True(t, tb.Currencies[0].Balanced)
	require.Equal(t, "420.00", tb.Currencies[0].Debits)

	require.NoError(t, srv.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-srv.done:
		require.NoError(t, err, "clean exit on SIGTERM\n%s", srv.logs.String())
		srv.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", srv.logs.String())
	}

	logs := srv.logs.String()
	require.Contains(t, logs, `"msg":"stopped"`)
	for _, secret := range []string{testSecret, "whsec_old_rotated_out", testOps, testFinance, "v1=", "t=", e2eEmailName, `"amount"`} {
		require.NotContains(t, logs, secret, "logs must not contain secrets, signatures or payloads")
	}
}

func TestServeRefusesAnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	pool, dbURL := testdb.NewWithURL(t)
	_, err := pool.Exec(context.Background(), `DROP TABLE paygate_migrations`)
	require.NoError(t, err)
	cmd := exec.Command(paygateBinary(t), "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "PAYGATE_ADDR="+freeport.Addr(t))
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "paygate migrate")
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for name, env := range map[string]map[string]string{
		"attempts not a number": {"PAYGATE_PROCESS_MAX_ATTEMPTS": "many"},
		"attempts zero":         {"PAYGATE_PROCESS_MAX_ATTEMPTS": "0"},
		"body limit tiny":       {"PAYGATE_MAX_BODY_BYTES": "10"},
		"secret without prefix": {"PAYGATE_STRIPE_WEBHOOK_SECRETS": "sk_live_oops"},
		"operator named twice":  {"PAYGATE_OPS_TOKENS": "alice:sk_live_oops,alice:other"},
		"retention in hours":    {"PAYGATE_PAYLOAD_RETENTION": "720h"},
		"retention too short":   {"PAYGATE_PAYLOAD_RETENTION": "7d"},
		"retention negative":    {"PAYGATE_PAYLOAD_RETENTION": "-400d"},
		"adyen key alone":       {"PAYGATE_ADYEN_API_KEY": "sk_live_oops"},
		"adyen account alone":   {"PAYGATE_ADYEN_MERCHANT_ACCOUNT": "PaygateECOM"},
		"adyen url relative": {"PAYGATE_ADYEN_API_KEY": "sk_live_oops", "PAYGATE_ADYEN_MERCHANT_ACCOUNT": "PaygateECOM",
			"PAYGATE_ADYEN_CHECKOUT_URL": "checkout-test.adyen.com/checkout/v71"},
	} {
		_, err := loadConfig(func(k string) string { return env[k] })
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), "sk_live_oops", "a misplaced secret is not echoed")
	}
	cfg, err := loadConfig(func(k string) string {
		return map[string]string{"PAYGATE_STRIPE_WEBHOOK_SECRETS": " whsec_a , whsec_b ,", "PAYGATE_OPS_TOKENS": "x"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, []string{"whsec_a", "whsec_b"}, cfg.StripeSecrets)
	require.Equal(t, "127.0.0.1:8080", cfg.Addr)
	require.Equal(t, 10, cfg.ProcessMaxAttempts)
	require.Equal(t, int64(1048576), cfg.MaxBodyBytes)
	require.True(t, strings.HasPrefix(cfg.StripeAPIURL, "https://api.stripe.com"))
	require.Zero(t, cfg.PayloadRetention, "payloads are kept forever unless told")
	require.Equal(t, "https://checkout-test.adyen.com/checkout/v71", cfg.AdyenCheckoutURL)
	require.Empty(t, refunders(cfg, slog.New(slog.DiscardHandler)), "no refund client without keys")
	cfg, err = loadConfig(func(k string) string {
		return map[string]string{"PAYGATE_ADYEN_API_KEY": "AQE_key", "PAYGATE_ADYEN_MERCHANT_ACCOUNT": "PaygateECOM",
			"PAYGATE_ADYEN_CHECKOUT_URL": "http://127.0.0.1:9/checkout/v71/"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9/checkout/v71", cfg.AdyenCheckoutURL)
	require.Contains(t, refunders(cfg, slog.New(slog.DiscardHandler)), "adyen", "serve registers Adyen's refund client")
	for v, want := range map[string]time.Duration{"forever": 0, "30d": 30 * 24 * time.Hour, "400d": 400 * 24 * time.Hour} {
		cfg, err := loadConfig(func(k string) string { return map[string]string{"PAYGATE_PAYLOAD_RETENTION": v}[k] })
		require.NoError(t, err, v)
		require.Equal(t, want, cfg.PayloadRetention, v)
	}
}

// TestPoolSizeFromTheURL: serve's pool is 40 connections unless
// DATABASE_URL says pool_max_conns, so that several instances can share
// the server's max_connections.
func TestPoolSizeFromTheURL(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	ctx := t.Context()
	pool, err := openPool(ctx, config{DatabaseURL: dbURL}, 40)
	require.NoError(t, err)
	require.Equal(t, int32(40), pool.Config().MaxConns)
	pool.Close()
	pool, err = openPool(ctx, config{DatabaseURL: dbURL + "&pool_max_conns=12"}, 40)
	require.NoError(t, err)
	require.Equal(t, int32(12), pool.Config().MaxConns)
	pool.Close()
}

// TestReadOnlyConnectionIsDropped: a connection that gets SQLSTATE 25006
// (it landed on a server that takes no writes, as the old primary does
// after a failover) is closed, not returned to the pool to fail the next
// write again; the pool's next connection is a new one.
func TestReadOnlyConnectionIsDropped(t *testing.T) {
	t.Parallel()
	_, dbURL := testdb.NewWithURL(t)
	ctx := t.Context()
	pool, err := openPool(ctx, config{DatabaseURL: dbURL}, 1)
	require.NoError(t, err)
	defer pool.Close()

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	var fenced uint32
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&fenced))
	// What a fenced primary or a standby answers every write with.
	_, err = conn.Exec(ctx, "SET default_transaction_read_only = on")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE written (n int)")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "25006", pgErr.Code)
	conn.Release()

	var pid uint32
	var readOnly string
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_backend_pid(), current_setting('default_transaction_read_only')").Scan(&pid, &readOnly))
	require.NotEqual(t, fenced, pid, "the read-only connection was reused")
	require.Equal(t, "off", readOnly)
	_, err = pool.Exec(ctx, "CREATE TABLE written (n int)")
	require.NoError(t, err)
}
