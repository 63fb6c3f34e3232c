package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ownQuery marks loadgen's own statements (its polls and counters), so
// that the database's view of a level leaves them out: pg_stat_statements
// keeps a statement's text as first run, comment included.
const ownQuery = "/* loadgen */ "

// topStatements is how many statements a level's database view lists.
const topStatements = 15

// statementTime is one statement's share of a level, as PostgreSQL's
// pg_stat_statements saw it: top-level statements and, with
// pg_stat_statements.track = all, those run inside functions and
// triggers (a foreign key's check is one).
type statementTime struct {
	Query  string  `json:"query"`
	Calls  float64 `json:"calls"`
	ExecMS float64 `json:"exec_ms"`
	Rows   float64 `json:"rows"`
}

// statementsView is a level's statements by execution time, and the total
// of all of them, loadgen's left out.
type statementsView struct {
	Top     []statementTime `json:"top"`
	TotalMS float64         `json:"total_exec_ms"`
	Calls   float64         `json:"total_calls"`
}

// hasStatements reports whether the database can give its view of a
// level: the pg_stat_statements extension created in it and its library
// loaded by the server (shared_preload_libraries).
func hasStatements(ctx context.Context, db *pgx.Conn) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, ownQuery+`SELECT to_regclass('pg_stat_statements') IS NOT NULL
		AND current_setting('shared_preload_libraries') ~ '(^|[ ,])pg_stat_statements($|[ ,])'`).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("look for pg_stat_statements: %w", err)
	}
	return ok, nil
}

// resetStatements starts a level's view afresh.
func resetStatements(ctx context.Context, db *pgx.Conn) error {
	if _, err := db.Exec(ctx, ownQuery+`SELECT pg_stat_statements_reset()`); err != nil {
		return fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	return nil
}

// readStatements reads the statements run in db's database since the
// reset, by execution time, loadgen's own left out.
func readStatements(ctx context.Context, db *pgx.Conn) (*statementsView, error) {
	rows, err := db.Query(ctx, ownQuery+`SELECT query, calls::float8, total_exec_time, rows::float8
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query NOT LIKE '%/* loadgen */%'
		ORDER BY total_exec_time DESC`)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	v := &statementsView{}
	var s statementTime
	_, err = pgx.ForEachRow(rows, []any{&s.Query, &s.Calls, &s.ExecMS, &s.Rows}, func() error {
		v.TotalMS += s.ExecMS
		v.Calls += s.Calls
		if len(v.Top) < topStatements {
			s.Query = oneLine(s.Query)
			v.Top = append(v.Top, s)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	return v, nil
}

var sqlComment = regexp.MustCompile(`--[^\n]*|/\*.*?\*/`)

// oneLine is a statement's text on one line, comments dropped, cut to
// what a report line can show.
func oneLine(q string) string {
	q = strings.Join(strings.Fields(sqlComment.ReplaceAllString(q, " ")), " ")
	if r := []rune(q); len(r) > 110 {
		q = string(r[:110]) + "…"
	}
	return q
}

// lines is v per event applied, for the report: a header with
// the whole, then the top statements.
func (v *statementsView) lines(events float64) []string {
	if v == nil || events <= 0 {
		return nil
	}
	out := []string{fmt.Sprintf("PostgreSQL's view (pg_stat_statements), per event applied: %.2f statements run (those of triggers and foreign-key checks too), %.0f µs of execution in all (wall time, waits included); the %d longest:",
		v.Calls/events, v.TotalMS*1e3/events, len(v.Top))}
	for _, s := range v.Top {
		out = append(out, fmt.Sprintf("  %7.1f µs %6.3f calls %5.2f rows  %s", s.ExecMS*1e3/events, s.Calls/events, s.Rows/events, s.Query))
	}
	return out
}
