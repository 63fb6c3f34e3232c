package api_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTokenComparisonIsConstantTime reads auth.go: bearer tokens are hashed
// and compared with crypto/subtle against every configured token, with no
// early exit, so how long a refusal takes says nothing about how close a
// guess was. A source check cannot flake the way a timing measurement does.
func TestTokenComparisonIsConstantTime(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "auth.go", nil, 0)
	require.NoError(t, err)
	var identify *ast.FuncDecl
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "identify" {
			identify = fn
		}
	}
	require.NotNil(t, identify, "auth.go has identify")
	constantTime := 0
	ast.Inspect(identify.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				switch call := fmt.Sprintf("%s.%s", sel.X, sel.Sel.Name); call {
				case "subtle.ConstantTimeCompare", "hmac.Equal":
					constantTime++
				case "bytes.Equal", "strings.EqualFold", "bytes.Compare", "strings.Compare":
					t.Errorf("%s: %s is a variable-time comparison", fset.Position(n.Pos()), call)
				}
			}
		case *ast.BinaryExpr:
			if n.Op == token.EQL || n.Op == token.NEQ {
				if fmt.Sprint(n.X) == "token" || fmt.Sprint(n.Y) == "token" {
					if lit, ok := n.Y.(*ast.BasicLit); !ok || lit.Value != `""` {
						t.Errorf("%s: the token is compared with %s", fset.Position(n.Pos()), n.Op)
					}
				}
			}
		case *ast.RangeStmt:
			ast.Inspect(n.Body, func(m ast.Node) bool {
				switch m := m.(type) {
				case *ast.ReturnStmt:
					t.Errorf("%s: return inside the comparison loop", fset.Position(m.Pos()))
				case *ast.BranchStmt:
					if m.Tok == token.BREAK || m.Tok == token.GOTO {
						t.Errorf("%s: %s inside the comparison loop", fset.Position(m.Pos()), m.Tok)
					}
				}
				return true
			})
		}
		return true
	})
	require.NotZero(t, constantTime, "tokens are compared with crypto/subtle")
}
