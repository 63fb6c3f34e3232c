// Package testdb gives each test its own real, migrated PostgreSQL database
// in a few tens of milliseconds.
//
// The design is pgtestdb's: one template database per schema hash (our
// migrations plus River's version), built once and reused across runs, and a
// CREATE DATABASE … TEMPLATE clone per test, dropped at cleanup. Test
// connections run with synchronous_commit off: commits are cheap and a crash
// of the test server loses nothing we care about.
//
// The server is TEST_DATABASE_URL, else DATABASE_URL, else
// postgres://postgres@127.0.0.1:5432/postgres. It must never be imported by
// production code.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paygate/paygate/migrations"
)

// templateLockKey serialises template builds across concurrent test binaries.
const templateLockKey = 7_236_000_002

// ServerURL is the URL of the server tests run against.
func ServerURL() string {
	for _, k := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "postgres://postgres@127.0.0.1:5432/postgres"
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
)

// New returns a pool on a fresh migrated database private to t.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, _ := NewWithURL(t)
	return pool
}

// NewWithURL is New, also returning the database URL (for tests that start
// the paygate binary or a second client against the same database).
func NewWithURL(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(ctx) })
	if templateErr != nil {
		t.Fatalf("testdb: template database: %v", templateErr)
	}

	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatalf("testdb: connect to %s: %v", redact(ServerURL()), err)
	}
	defer admin.Close(ctx)

	name := "paygate_test_" + randomHex(6)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, templateName)); err != nil {
		t.Fatalf("testdb: clone template: %v", err)
	}
	dbURL := withDatabase(ServerURL(), name)

	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("testdb: parse url: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testdb: open pool: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, ServerURL())
		if err != nil {
			t.Logf("testdb: drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Logf("testdb: drop %s: %v", name, err)
		}
	})
	return pool, dbURL + "&synchronous_commit=off"
}

// ensureTemplate builds the template for the current schema hash unless a
// previous run (or a concurrent test binary) already did.
func ensureTemplate(ctx context.Context) (string, error) {
	name := "paygate_tpl_" + migrations.Hash()
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", redact(ServerURL()), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLockKey) //nolint:errcheck

	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}

	// Build under a scratch name and rename when complete, so a run killed
	// half-way never leaves a broken template behind.
	scratch := name + "_build"
	if _, err := admin.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", scratch)); err != nil {
		return "", fmt.Errorf("drop stale build: %w", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s", scratch)); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	pool, err := pgxpool.New(ctx, withDatabase(ServerURL(), scratch))
	if err != nil {
		return "", fmt.Errorf("open template: %w", err)
	}
	err = migrations.Migrate(ctx, pool, nil)
	pool.Close()
	if err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", scratch, name)); err != nil {
		return "", fmt.Errorf("rename template: %w", err)
	}
	return name, nil
}

func withDatabase(raw, db string) string {
	u, err := url.Parse(raw)
	if err != nil {
		panic(fmt.Sprintf("testdb: bad database url: %v", err))
	}
	u.Path = "/" + db
	q := u.Query()
	u.RawQuery = q.Encode()
	if u.RawQuery == "" {
		u.RawQuery = "sslmode=disable"
	}
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable url)"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
