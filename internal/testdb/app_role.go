package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AppRole returns a pool on the database at url (one of NewWithURL's) whose
// every connection is paygate_app, the least-privileged role `paygate
// serve` runs as, which owns nothing. It is SET ROLE rather than a login,
// so that tests do not depend on the server's authentication for other
// users; closed at the end of t.
func AppRole(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	cfg.MaxConns = 20 // River's workers and a test's own queries at once
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET ROLE paygate_app`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// NewAppRole is AppRole on a fresh database of New's.
func NewAppRole(t testing.TB) *pgxpool.Pool {
	t.Helper()
	_, url := NewWithURL(t)
	return AppRole(t, url)
}
