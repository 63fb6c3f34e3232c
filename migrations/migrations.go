// Package migrations owns paygate's SQL schema: numbered files embedded in
// the binary and applied in order by `paygate migrate`, together with River's
// own migrations.
//
// A released file is never edited; a change is a new file. We use no
// migration library: the files are plain forward-only SQL, each applied in
// its own transaction under an advisory lock so that concurrent `migrate`
// runs (several instances starting at once) are safe, and River ships its
// own migrator (rivermigrate) that we call alongside.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var files embed.FS

// lockKey serialises concurrent migrators; an arbitrary constant of ours.
const lockKey = 7_236_000_001

// File is one embedded migration.
type File struct {
	Version string // the file name without .sql, e.g. "0001_inbox"
	SQL     string
}

// Files returns the embedded migrations in the order they apply.
func Files() []File {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		panic(err) // the pattern is constant
	}
	sort.Strings(names)
	out := make([]File, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			panic(err) // embedded files are always readable
		}
		out = append(out, File{Version: strings.TrimSuffix(n, ".sql"), SQL: string(b)})
	}
	return out
}

// Hash identifies the whole schema (ours and the River version's); the test
// helper names its template database after it.
func Hash() string {
	h := sha256.New()
	for _, f := range Files() {
		fmt.Fprintf(h, "%s\n%s\n", f.Version, f.SQL)
	}
	fmt.Fprintf(h, "river:%d\n", riverVersion())
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func riverVersion() int {
	m, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		panic(err)
	}
	all := m.AllVersions()
	return all[len(all)-1].Version
}

// Latest is the version of the newest embedded migration; readiness checks
// compare it with what the database has applied.
func Latest() string {
	fs := Files()
	return fs[len(fs)-1].Version
}

// AppRole is the least-privileged role `paygate serve` logs in as: it
// reads and appends to the ledger and the audit log but may not update,
// delete or truncate them, and owns nothing (so it cannot disable a
// trigger). Migrate creates it when the cluster has none, without a
// password, and grants it what serve needs; migrations themselves run as
// the tables' owner.
const AppRole = "paygate_app"

// Migrate applies River's migrations, then every embedded file not yet
// applied, then grants AppRole its privileges on every table (River's
// included). It is safe to run twice and from several processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey) //nolint:errcheck

	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS paygate_migrations (
		version text PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create migrations table: %w", err)
	}
	for _, f := range Files() {
		if err := applyOne(ctx, conn.Conn(), f, logger); err != nil {
			return err
		}
	}
	// Last, so that every table is there, River's and any created by a
	// migration since the role's (0008_app_role.sql).
	if _, err := conn.Exec(ctx, `SELECT paygate_grant_app()`); err != nil {
		return fmt.Errorf("grant %s: %w", AppRole, err)
	}
	return nil
}

func applyOne(ctx context.Context, conn *pgx.Conn, f File, logger *slog.Logger) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "INSERT INTO paygate_migrations (version) VALUES ($1) ON CONFLICT DO NOTHING", f.Version)
		if err != nil {
			return fmt.Errorf("record migration %s: %w", f.Version, err)
		}
		if tag.RowsAffected() == 0 {
			return nil // already applied
		}
		if _, err := tx.Exec(ctx, f.SQL); err != nil {
			return fmt.Errorf("apply migration %s: %w", f.Version, err)
		}
		logger.Info("applied migration", "version", f.Version)
		return nil
	})
}

// Applied reports whether the database has every embedded migration.
func Applied(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT to_regclass('paygate_migrations') IS NOT NULL`).Scan(&ok)
	if err != nil || !ok {
		return false, err
	}
	err = q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM paygate_migrations WHERE version = $1)`, Latest()).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read applied migrations: %w", err)
	}
	return ok, nil
}
