package provider_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSignatureComparisonIsConstantTime reads every provider package's
// source: signatures and credentials are compared with hmac.Equal or
// crypto/subtle, never with bytes.Equal, ==, or an early exit out of a loop
// that compares, and each provider has a Verify… function that compares
// that way. A source check cannot flake the way a timing measurement does.
func TestSignatureComparisonIsConstantTime(t *testing.T) {
	t.Parallel()
	dirs, err := filepath.Glob("*")
	require.NoError(t, err)
	providers := 0
	for _, dir := range dirs {
		if info, err := os.Stat(dir); err != nil || !info.IsDir() || dir == "testdata" {
			continue
		}
		t.Run(dir, func(t *testing.T) {
			checkConstantTime(t, dir)
		})
		providers++
	}
	require.GreaterOrEqual(t, providers, 3, "stripe, adyen and stdwebhooks are checked")
}

func checkConstantTime(t *testing.T, dir string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	verifiers := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, name, src, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if strings.HasPrefix(strings.ToLower(n.Name.Name), "verify") && n.Body != nil && comparesConstantTime(n.Body) {
					verifiers++
				}
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					call := fmt.Sprintf("%s.%s", sel.X, sel.Sel.Name)
					if withLiteral(n) {
						return true // a scheme name ("Basic") is no secret
					}
					require.NotContains(t, []string{"bytes.Equal", "bytes.Compare", "strings.EqualFold", "reflect.DeepEqual"}, call,
						"%s: variable-time comparison", fset.Position(n.Pos()))
				}
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					for _, side := range []ast.Expr{n.X, n.Y} {
						if call, ok := side.(*ast.CallExpr); ok {
							fn := fmt.Sprint(call.Fun)
							require.NotContains(t, []string{"string", "hex.EncodeToString", "&{hex EncodeToString}",
								"base64.StdEncoding.EncodeToString", "&{&{base64 StdEncoding} EncodeToString}"}, fn,
								"%s: == on encoded bytes is a variable-time comparison", fset.Position(n.Pos()))
						}
					}
				}
			case *ast.RangeStmt, *ast.ForStmt:
				// A loop that compares runs to the end: how long it takes
				// must not say which secret or which signature matched.
				var body *ast.BlockStmt
				if r, ok := n.(*ast.RangeStmt); ok {
					body = r.Body
				} else {
					body = n.(*ast.ForStmt).Body
				}
				if !comparesConstantTime(body) {
					return true
				}
				ast.Inspect(body, func(m ast.Node) bool {
					switch m := m.(type) {
					case *ast.ReturnStmt:
						t.Errorf("%s: return inside a comparison loop", fset.Position(m.Pos()))
					case *ast.BranchStmt:
						if m.Tok == token.BREAK || m.Tok == token.GOTO {
							t.Errorf("%s: %s inside a comparison loop", fset.Position(m.Pos()), m.Tok)
						}
					}
					return true
				})
			}
			return true
		})
	}
	require.NotZero(t, verifiers, "%s has a Verify… function comparing with hmac.Equal or subtle.ConstantTimeCompare", dir)
}

// comparesConstantTime reports whether n calls hmac.Equal or
// subtle.ConstantTimeCompare.
func comparesConstantTime(n ast.Node) bool {
	found := false
	ast.Inspect(n, func(m ast.Node) bool {
		if call, ok := m.(*ast.CallExpr); ok {
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
				switch fmt.Sprintf("%s.%s", sel.X, sel.Sel.Name) {
				case "hmac.Equal", "subtle.ConstantTimeCompare":
					found = true
				}
			}
		}
		return !found
	})
	return found
}

// withLiteral reports whether one of call's arguments is a literal.
func withLiteral(call *ast.CallExpr) bool {
	for _, arg := range call.Args {
		if _, ok := arg.(*ast.BasicLit); ok {
			return true
		}
	}
	return false
}
