package markdown

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeMapsEveryPackage: the README's "Project structure" names every
// package of the module (a row of its own, or, for a helper under
// internal/, its name in a row), and every row names a directory that
// exists.
func TestReadmeMapsEveryPackage(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	section := string(readme)
	start := strings.Index(section, "\n## Project structure\n")
	require.GreaterOrEqual(t, start, 0, "the README has a Project structure section")
	section = section[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}

	rows := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(section, -1)
	require.NotEmpty(t, rows)
	for _, r := range rows {
		_, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(strings.TrimSuffix(r[1], "/"))))
		require.NoError(t, err, "the map's row %q names no directory", r[1])
	}

	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	var unmapped []string
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, "github.com/paygate/paygate/")
		if !ok {
			continue
		}
		named := strings.Contains(section, "`"+rel+"`") || strings.Contains(section, "`"+rel+"/`")
		if base, helper := strings.CutPrefix(rel, "internal/"); helper && !named {
			named = strings.Contains(section, "(`"+base+"`")
		}
		if !named {
			unmapped = append(unmapped, rel)
		}
	}
	require.Empty(t, unmapped, "packages the README's Project structure does not name")
}
