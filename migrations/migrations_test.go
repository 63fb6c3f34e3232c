package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/testdb"
	"github.com/paygate/paygate/migrations"
)

// TestAppendOnlyTriggersAreEnabledAlways: every trigger of ours fires
// whatever the session's replication role, so a superuser's
// session_replication_role = replica does not switch the append-only
// guards and the balance check off. A trigger added later without ENABLE
// ALWAYS fails this test.
func TestAppendOnlyTriggersAreEnabledAlways(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	rows, err := pool.Query(ctx, `
		SELECT c.relname || '.' || t.tgname, t.tgenabled::text
		FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace
		  AND c.relname NOT LIKE 'river\_%'
		ORDER BY 1`)
	require.NoError(t, err)
	enabled := map[string]string{}
	for rows.Next() {
		var name, mode string
		require.NoError(t, rows.Scan(&name, &mode))
		enabled[name] = mode
	}
	require.NoError(t, rows.Err())
	for _, want := range []string{
		"ledger_transactions.ledger_transactions_append_only",
		"ledger_entries.ledger_entries_append_only",
		"ledger_transactions.ledger_transactions_balanced",
		"ledger_entries.ledger_entries_within_count",
		"ops_audit_log.ops_audit_log_append_only",
		"reconciliation_runs.reconciliation_runs_guard",
		"reconciliation_runs.reconciliation_runs_no_truncate",
		"reconciliation_items.reconciliation_items_guard",
		"reconciliation_items.reconciliation_items_no_truncate",
		"inbox_attempts.inbox_attempts_append_only",
	} {
		require.Contains(t, enabled, want)
	}
	for name, mode := range enabled {
		require.Equal(t, "A", mode, "%s must be ENABLE ALWAYS", name)
	}
}

// appendOnly are the tables whose rows, once written, never change: the
// app role may read and add to them, nothing else.
var appendOnly = map[string]string{
	"ledger_transactions":        "SELECT,INSERT",
	"ledger_entries":             "SELECT,INSERT",
	"ops_audit_log":              "SELECT,INSERT",
	"inbox_attempts":             "SELECT,INSERT",
	"inbox_event_keys":           "SELECT,INSERT", // the dedupe key is kept forever
	"reconciliation_items":       "SELECT,INSERT",
	"reconciliation_resolutions": "SELECT,INSERT",        // a resolution is written once
	"reconciliation_runs":        "SELECT,INSERT,UPDATE", // a run records its outcome once
	"messages":                   "SELECT,INSERT,UPDATE", // messages leave by whole partitions
	"paygate_migrations":         "SELECT",               // readiness reads it; only migrate writes
	"river_migration":            "SELECT",
}

// TestAppRolePrivileges: paygate_app has exactly what serve needs on every
// table of the schema, River's included; a table created later gets the
// same at the next `paygate migrate`, and migrating again changes nothing.
func TestAppRolePrivileges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	privileges := func() map[string]string {
		t.Helper()
		rows, err := pool.Query(ctx, `
			SELECT c.relname, coalesce(string_agg(p, ',' ORDER BY n), '')
			FROM pg_class c
			CROSS JOIN unnest(ARRAY['SELECT','INSERT','UPDATE','DELETE','TRUNCATE','REFERENCES','TRIGGER'])
				WITH ORDINALITY AS u(p, n)
			WHERE c.relkind IN ('r', 'p') AND c.relnamespace = current_schema()::regnamespace
			  AND has_table_privilege('paygate_app', c.oid, p)
			GROUP BY c.relname`)
		require.NoError(t, err)
		out := map[string]string{}
		for rows.Next() {
			var table, privs string
			require.NoError(t, rows.Scan(&table, &privs))
			out[table] = privs
		}
		require.NoError(t, rows.Err())
		return out
	}
	check := func(got map[string]string) {
		t.Helper()
		var tables []string
		require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(relname::text) FROM pg_class
			WHERE relkind IN ('r', 'p') AND relnamespace = current_schema()::regnamespace`).Scan(&tables))
		require.Contains(t, tables, "river_job")
		require.Contains(t, tables, "inbox_events")
		for _, table := range tables {
			want, ok := appendOnly[table]
			if !ok {
				want = "SELECT,INSERT,UPDATE,DELETE"
			}
			require.Equal(t, want, got[table], "paygate_app on %s", table)
		}
	}
	check(privileges())

	var sequences int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class
		WHERE relkind = 'S' AND relnamespace = current_schema()::regnamespace
		  AND CASE WHEN relkind = 'S' THEN NOT has_sequence_privilege('paygate_app', oid, 'USAGE') END`).Scan(&sequences))
	require.Zero(t, sequences, "every sequence is usable")

	_, err := pool.Exec(ctx, `CREATE TABLE added_later (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY)`)
	require.NoError(t, err)
	require.NoError(t, migrations.Migrate(ctx, pool, nil))
	require.NoError(t, migrations.Migrate(ctx, pool, nil))
	got := privileges()
	require.Equal(t, "SELECT,INSERT,UPDATE,DELETE", got["added_later"], "a table created after the role gets its grants at the next migrate")
	check(got)

	var login, super, createRole, bypass bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT rolcanlogin, rolsuper, rolcreaterole, rolbypassrls
		FROM pg_roles WHERE rolname = 'paygate_app'`).Scan(&login, &super, &createRole, &bypass))
	require.True(t, login, "serve logs in as paygate_app")
	require.False(t, super || createRole || bypass)
	var owns int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class
		WHERE relowner = 'paygate_app'::regrole`).Scan(&owns))
	require.Zero(t, owns, "the app owns nothing, so it can alter nothing")
}
