package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/api"
)

// redoclyVersion is the Redocly CLI whose recommended rules the document
// must pass; scripts/tools.sh installs it.
const redoclyVersion = "2.77.0"

type lintReport struct {
	Totals struct {
		Errors   int `json:"errors"`
		Warnings int `json:"warnings"`
		Ignored  int `json:"ignored"`
	} `json:"totals"`
	Version  string `json:"version"`
	Problems []struct {
		RuleID   string `json:"ruleId"`
		Severity string `json:"severity"`
		Message  string `json:"message"`
		Location []struct {
			Pointer string `json:"pointer"`
		} `json:"location"`
	} `json:"problems"`
}

func (r lintReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Redocly CLI %s: %d errors, %d warnings, %d ignored\n", r.Version, r.Totals.Errors, r.Totals.Warnings, r.Totals.Ignored)
	for _, p := range r.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		fmt.Fprintf(&b, "  %-7s %-28s %s  %s\n", p.Severity, p.RuleID, where, p.Message)
	}
	return b.String()
}

// redocly lints doc with the recommended rules and nothing else (a config
// of its own, in a directory of its own: no ignore file can creep in).
func redocly(t *testing.T, doc []byte) lintReport {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("..", ".tools", "redocly", "node_modules", ".bin", "redocly"))
	require.NoError(t, err)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Redocly CLI is not installed (%v): run scripts/tools.sh (make test does), which runs\n"+
			"  npm install --prefix .tools/redocly --save-exact @redocly/cli@%s", err, redoclyVersion)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "openapi.json"), doc, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "redocly.yaml"), []byte("extends:\n  - recommended\n"), 0o600))
	cmd := exec.Command(bin, "lint", "--config", "redocly.yaml", "--format", "json", "openapi.json")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run() // exits non-zero on errors: the report says which
	var r lintReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &r), "redocly lint: %v\nstdout: %s\nstderr: %s", runErr, stdout.String(), stderr.String())
	require.Equal(t, redoclyVersion, r.Version,
		"the pinned Redocly CLI: run scripts/tools.sh, or npm install --prefix .tools/redocly --save-exact @redocly/cli@%s", redoclyVersion)
	return r
}

// TestOpenAPILintsClean: the served document passes Redocly CLI's
// recommended rules with no error and no warning, as a client generator's
// user would first check it.
func TestOpenAPILintsClean(t *testing.T) {
	t.Parallel()
	r := redocly(t, api.OpenAPI)
	require.Zero(t, r.Totals.Errors+r.Totals.Warnings+r.Totals.Ignored, "api/openapi.json:\n%s", r)

	// The same run on a document with known faults finds them: the lint
	// is read, not just run.
	bad := redocly(t, []byte(`{"openapi":"3.1.0","info":{"title":"x","version":"1"},"paths":{"/a":{"get":{"responses":{"200":{"description":"ok"}}}}}}`))
	rules := map[string]bool{}
	for _, p := range bad.Problems {
		rules[p.RuleID] = true
	}
	require.True(t, rules["no-empty-servers"] && rules["operation-operationId"] && rules["operation-4xx-response"], "%s", bad)
}
