package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/stripesim"
	"github.com/paygate/paygate/internal/testdb"
)

// asAppRole is dbURL logging in as paygate_app, without a password (trust
// authentication, as on a development machine and in CI). A server that
// wants a password for it fails the test with what to do, rather than
// skipping it: a skipped test proves nothing.
func asAppRole(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.User = url.User("paygate_app")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u.String())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "28P01" {
		t.Fatalf("the test server wants a password for paygate_app: allow it trust authentication from 127.0.0.1 (docs/operations.md, Database roles): %v", err)
	}
	require.NoError(t, err, "log in as paygate_app")
	require.NoError(t, conn.Close(ctx))
	return u.String()
}

// TestServeAsAppRole: `paygate migrate` as the owner, then `paygate serve`
// logged in as paygate_app applies signed webhooks end to end, answers the
// API and runs River's maintenance without a permission error, while the
// ledger stays out of its reach.
func TestServeAsAppRole(t *testing.T) {
	t.Parallel()
	pool, dbURL := testdb.NewWithURL(t)
	out, err := runCommand(t, dbURL, "migrate")
	require.NoError(t, err, out)
	appURL := asAppRole(t, dbURL)

	srv := startServer(t, appURL)
	sim := stripesim.New(stripesim.Config{WebhookSecret: testSecret})
	p := sim.Pay(stripesim.PayOpts{Amount: 36000, Currency: "usd", Email: e2eEmailName})
	sim.Refund(p, 6000)
	results, err := sim.Deliver(context.Background(), "http://"+srv.addr+"/webhooks/stripe", sim.Events(),
		&stripesim.DeliverOpts{Copies: 2, Shuffle: true, Concurrency: 4})
	require.NoError(t, err)
	for _, r := range results {
		require.Equal(t, http.StatusOK, r.Status)
	}
	srv.awaitProcessed(t, len(sim.Events()))
	var payment struct {
		Status string `json:"status"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+srv.addr+"/v1/payments/"+p.ID, testFinance, &payment))
	require.Equal(t, "partially_refunded", payment.Status)
	resp, err := http.Get("http://" + srv.addr + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(metrics), "paygate_inbox_swept_total")

	var apps int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND usename = 'paygate_app'`).Scan(&apps))
	require.Positive(t, apps, "serve is connected as paygate_app")
	logs := srv.logs.String()
	require.NotContains(t, strings.ToLower(logs), "permission denied", "serve needs no privilege it lacks")
}

// runCommand runs the real binary against dbURL.
func runCommand(t *testing.T, dbURL string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(paygateBinary(t), args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
