package testdb

import (
	"encoding/json"
	"strings"
	"testing"
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
	Plans           []Plan  `json:"Plans"`
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
	return plans[0].Plan
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
