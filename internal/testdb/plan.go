package testdb

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Plan is a node of a plan that EXPLAIN (ANALYZE, FORMAT JSON) printed,
// with what it read: how a test checks that a statement costs the rows it
// returns, not the size of a table, whatever plan PostgreSQL keeps.
type Plan struct {
	Relation    string  `json:"Relation Name"`
	ActualRows  float64 `json:"Actual Rows"`
	ActualLoops float64 `json:"Actual Loops"`
	// Per loop, as Actual Rows.
	RemovedByFilter float64 `json:"Rows Removed by Filter"`
	// Per loop: the pairs of rows a join's filter compared and refused.
	RemovedByJoinFilter float64 `json:"Rows Removed by Join Filter"`
	Plans               []Plan  `json:"Plans"`
	// Raw is EXPLAIN's whole output, for a failing test's message (set on
	// the plan ParsePlan returns, not on its nodes).
	Raw []byte `json:"-"`
}

// ParsePlan reads the one plan of EXPLAIN (ANALYZE, FORMAT JSON)'s output.
func ParsePlan(t testing.TB, raw []byte) Plan {
	t.Helper()
	var plans []struct {
		Plan Plan `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("not one plan (%v):\n%s", err, raw)
	}
	plan := plans[0].Plan
	plan.Raw = raw
	return plan
}

// RowsOf is the rows the plan's scans of relation, or of its partitions
// (named relation_…), read over all their loops: those they returned and
// those their filters removed.
func (n Plan) RowsOf(relation string) float64 {
	rows := 0.0
	if n.Relation == relation || strings.HasPrefix(n.Relation, relation+"_") {
		rows += (n.ActualRows + n.RemovedByFilter) * n.ActualLoops
	}
	for _, c := range n.Plans {
		rows += c.RowsOf(relation)
	}
	return rows
}

// JoinFilterRemoved is the pairs of rows the plan's joins compared and
// refused, over all their loops: a join that compares every row of one
// side with every row of the other shows here, whatever it read.
func (n Plan) JoinFilterRemoved() float64 {
	pairs := n.RemovedByJoinFilter * n.ActualLoops
	for _, c := range n.Plans {
		pairs += c.JoinFilterRemoved()
	}
	return pairs
}

// KeepingPlans returns a pool of one connection to pool's database that
// keeps the plan it makes for each statement it prepares
// (plan_cache_mode = force_generic_plan), as PostgreSQL does by itself
// once a connection has run a statement a few times: how a long-lived
// connection runs what it runs often. Closed at the test's end.
func KeepingPlans(t testing.TB, pool *pgxpool.Pool) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config()
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	one, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatalf("one connection keeping its plans: %v", err)
	}
	t.Cleanup(one.Close)
	return one
}

// ExplainKept runs EXPLAIN (ANALYZE, FORMAT JSON) of the statement that
// one (a KeepingPlans pool) prepared with text matching like (a LIKE
// pattern), with args (SQL, as in EXECUTE's parentheses), and returns its
// plan: the one the connection kept, not one made now.
func ExplainKept(t testing.TB, one *pgxpool.Pool, like, args string) Plan {
	t.Helper()
	var raw []byte
	err := one.AcquireFunc(t.Context(), func(conn *pgxpool.Conn) error {
		var name string
		if err := conn.QueryRow(t.Context(), `SELECT name FROM pg_prepared_statements WHERE statement LIKE $1`, like).Scan(&name); err != nil {
			return fmt.Errorf("the statement prepared like %q: %w", like, err)
		}
		return conn.QueryRow(t.Context(), `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE `+pgx.Identifier{name}.Sanitize()+`(`+args+`)`,
			pgx.QueryExecModeSimpleProtocol).Scan(&raw)
	})
	if err != nil {
		t.Fatalf("explain the kept plan: %v", err)
	}
	return ParsePlan(t, raw)
}
