package stripe_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/provider/stripe"
)

// TestEventTypesAreWhatEffectsMaps reads effects.go: the types the switch of
// effects (behind Effects and NewMapper) maps are exactly EventTypes, so the list an endpoint is
// subscribed to (paygate stripe-events) can neither miss a mapped type nor
// name one that is ignored.
func TestEventTypesAreWhatEffectsMaps(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "effects.go", nil, 0)
	require.NoError(t, err)
	var mapped []string
	ast.Inspect(f, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "effects" {
			return true
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			sw, ok := n.(*ast.SwitchStmt)
			if !ok {
				return true
			}
			if sel, ok := sw.Tag.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Type" {
				return true
			}
			for _, stmt := range sw.Body.List {
				for _, e := range stmt.(*ast.CaseClause).List {
					lit, ok := e.(*ast.BasicLit)
					require.True(t, ok, "the switch on the event type cases on literals")
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					mapped = append(mapped, s)
				}
			}
			return false
		})
		return false
	})
	require.NotEmpty(t, mapped)
	require.Equal(t, mapped, stripe.EventTypes)
	require.Len(t, slices.Compact(slices.Sorted(slices.Values(mapped))), len(mapped), "no type twice")
}
