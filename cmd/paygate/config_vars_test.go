package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/configuration.md's generated tables from configVars and devVars")

// varName is what counts as a configuration variable: paygate's own, the
// OpenTelemetry SDK's, and the database's URL.
var varName = regexp.MustCompile(`^(PAYGATE_[A-Z0-9_]*[A-Z0-9]|OTEL_[A-Z0-9_]*[A-Z0-9]|DATABASE_URL)$`)

// devVar is a variable read by the development tooling (make run, the
// scripts, the tests and their harnesses), never by the paygate binary.
type devVar struct {
	Name, Meaning, Default, ReadBy string
}

// devVars are the variables the development tooling reads:
// TestDevVarsDocumented holds them to the scripts and the tests.
var devVars = []devVar{
	{"TEST_DATABASE_URL", "the PostgreSQL server tests make their databases on (`internal/testdb` clones one per test)",
		"`DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432`", "`make test`, `go test`"},
	{"PAYGATE_DEV_STRIPE", "`stripe-mock` puts stripe-mock's canned answers in place of the demo's shop as `make run`'s Stripe API",
		"none: the demo's shop", "`make run`"},
	{"PAYGATE_DEMO_PORT", "the port of the demo's shop (`paygate demo serve`): its Stripe and Adyen APIs and its endpoint",
		"`12111`, or the next free one", "`make run`"},
	{"PAYGATE_STRIPE_MOCK_PORT", "stripe-mock's port, with `PAYGATE_DEV_STRIPE=stripe-mock`", "`12111`, or the next free one", "`make run`"},
	{"PAYGATE_MAILPIT_SMTP_PORT", "mailpit's SMTP port", "`1025`, or the next free one", "`make run`"},
	{"PAYGATE_MAILPIT_UI_PORT", "mailpit's web UI port, where every email shows up", "`8025`, or the next free one", "`make run`"},
	{"PAYGATE_PRIVATE_PG", "`1` makes `scripts/db.sh` start a private cluster under `.pgdata/` even when a server is listening or `DATABASE_URL` is set",
		"none", "`scripts/db.sh`, `make bench` with `BENCH_PGSS=1`"},
	{"PAYGATE_PG_OPTIONS", "server options added to the private cluster's start (`-c shared_preload_libraries=pg_stat_statements`)",
		"none", "`scripts/db.sh`"},
	{"PAYGATE_RELIABILITY", "`long` runs the reliability suite's fault scenarios at full size", "none: the short version", "`make reliability`"},
	{"PAYGATE_RELIABILITY_SEED", "replays a run of the reliability suite", "a new seed", "`make reliability`"},
	{"PAYGATE_RELIABILITY_REPORT", "the file the reliability suite writes its total-queue table to", "none", "`make reliability`"},
	{"PAYGATE_BINARY", "a built `paygate` the reliability harness runs instead of building one", "none: built by the harness", "`internal/reliability`"},
	{"PAYGATE_TOUR_SCREENSHOTS", "the directory (`docs/console`) `TestDemoOnMakeRun` saves the console tour's pictures in",
		"none: no picture saved", "`go test ./cmd/paygate -run TestDemoOnMakeRun`"},
	{"PAYGATE_ENDPOINT_SECRET", "the endpoint secret the [example consumer](downstream.md#endpoints) verifies messages with; paygate never reads it",
		"none", "the example's `consumer.go`"},
}

func devMarkdown(vars []devVar) string {
	var b strings.Builder
	b.WriteString("| variable | meaning | default | read by |\n|---|---|---|---|\n")
	for _, v := range vars {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", code(v.Name), cell(v.Meaning), cell(v.Default), v.ReadBy)
	}
	return b.String()
}

const configDoc = "../../docs/configuration.md"

// generatedRegion finds the text between "<!-- begin NAME ... -->\n" and
// "<!-- end NAME -->" in doc.
func generatedRegion(t *testing.T, doc, name string) (start, end int) {
	t.Helper()
	begin := regexp.MustCompile(`(?m)^<!-- begin ` + name + `\b[^\n]*-->\n`).FindStringIndex(doc)
	require.NotNil(t, begin, "docs/configuration.md has a <!-- begin %s … --> line", name)
	stop := strings.Index(doc[begin[1]:], "<!-- end "+name+" -->")
	require.GreaterOrEqual(t, stop, 0, "docs/configuration.md has <!-- end %s -->", name)
	return begin[1], begin[1] + stop
}

// TestConfigurationReference: docs/configuration.md's tables are what
// configVars and devVars render (go test ./cmd/paygate -run
// TestConfigurationReference -update rewrites them).
func TestConfigurationReference(t *testing.T) {
	raw, err := os.ReadFile(configDoc)
	require.NoError(t, err)
	doc := string(raw)
	for _, r := range []struct{ name, want string }{
		{"configVars", configMarkdown(configVars)},
		{"devVars", devMarkdown(devVars)},
	} {
		start, end := generatedRegion(t, doc, r.name)
		if *updateDocs {
			doc = doc[:start] + r.want + doc[end:]
			continue
		}
		require.Equal(t, r.want, doc[start:end],
			"docs/configuration.md's %s table is not what the code says: go test ./cmd/paygate -run TestConfigurationReference -update", r.name)
	}
	if *updateDocs {
		require.NoError(t, os.WriteFile(configDoc, []byte(doc), 0o644))
	}
}

// TestConfigCommand: `paygate config` and `paygate serve --help` print the
// reference from the same source, whatever the environment holds (a
// malformed variable does not stop them), and every variable is in it.
func TestConfigCommand(t *testing.T) {
	t.Setenv("PAYGATE_MAX_BODY_BYTES", "not a number")
	for _, args := range [][]string{{"config"}, {"serve", "--help"}, {"serve", "-h"}} {
		var out bytes.Buffer
		require.NoError(t, run(t.Context(), args, &out, &out), "paygate %s", strings.Join(args, " "))
		require.Equal(t, configText(configVars), out.String(), "paygate %s", strings.Join(args, " "))
		for _, g := range configVars {
			for _, v := range g.Vars {
				require.Contains(t, out.String(), "\n  "+v.Name+"  (", "paygate %s lists %s", strings.Join(args, " "), v.Name)
			}
		}
	}
	var md bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"config", "--markdown"}, &md, &md))
	require.Equal(t, configMarkdown(configVars), md.String())

	err := run(t.Context(), []string{"config", "--json"}, &md, &md)
	var ue usageError
	require.ErrorAs(t, err, &ue)
}

// TestConfigVarsWellFormed: each variable once, with a meaning, a default
// and an example, read by commands paygate has.
func TestConfigVarsWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, g := range configVars {
		require.NotEmpty(t, g.Vars, g.Title)
		for _, v := range g.Vars {
			require.Regexp(t, varName, v.Name)
			require.False(t, seen[v.Name], "%s is listed twice", v.Name)
			seen[v.Name] = true
			require.NotEmpty(t, v.Meaning, v.Name)
			require.NotEmpty(t, v.Default, v.Name)
			require.NotEmpty(t, v.Example, v.Name)
			require.NotEmpty(t, v.ReadBy, v.Name)
			for _, c := range v.ReadBy {
				require.Contains(t, usage, "\n  paygate "+c+" ", "%s: %q is a command of paygate's usage", v.Name, c)
			}
		}
	}
	for _, v := range devVars {
		require.False(t, seen[v.Name], "%s is both paygate's and the tooling's", v.Name)
		seen[v.Name] = true
	}
}

// isReference reports whether path is the reference itself, whose names
// prove nothing about what is read.
func isReference(path string) bool {
	return strings.HasSuffix(filepath.ToSlash(path), "cmd/paygate/config_vars.go") ||
		strings.HasSuffix(filepath.ToSlash(path), "cmd/paygate/config_vars_test.go")
}

// goStrings is every string literal of files that is a variable's name,
// with where it is.
func goStrings(t *testing.T, files []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err == nil && varName.MatchString(s) {
				if _, dup := out[s]; !dup {
					out[s] = fset.Position(lit.Pos()).String()
				}
			}
			return true
		})
	}
	return out
}

// TestConfigVarsMatchCode holds the reference to the code, both ways. What
// counts as read: a string literal that is a variable's name (PAYGATE_*,
// OTEL_*, DATABASE_URL) in a non-test file of a package the paygate binary
// is built from (go list -deps: cmd/paygate, tracing, api…; not the test
// helpers of internal/, the scripts or cmd/loadgen, which TestDevVarsDocumented
// covers). Every such name is in configVars, and every variable of
// configVars is such a name, but for those marked SDK, which the
// OpenTelemetry SDK reads itself: their names are in the source of the
// SDK packages the binary is built with.
func TestConfigVarsMatchCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f",
		`{{if not .Standard}}{{.Dir}}|{{if .Module}}{{.Module.Main}}{{end}}|{{join .GoFiles ","}}{{end}}`, ".").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	var ours, theirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, "|", 3)
		require.Len(t, parts, 3, line)
		if parts[2] == "" {
			continue
		}
		for _, f := range strings.Split(parts[2], ",") {
			path := filepath.Join(parts[0], f)
			if isReference(path) {
				continue
			}
			if parts[1] == "true" {
				ours = append(ours, path)
			} else {
				theirs = append(theirs, path)
			}
		}
	}
	require.NotEmpty(t, ours)
	read := goStrings(t, ours)
	require.Contains(t, read, "PAYGATE_ADDR", "the scan finds what loadConfig reads")
	require.Contains(t, read, "OTEL_EXPORTER_OTLP_ENDPOINT", "the scan reaches package tracing")

	var sdkText strings.Builder
	for _, f := range theirs {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		sdkText.Write(b)
	}
	listed := map[string]configVar{}
	for _, g := range configVars {
		for _, v := range g.Vars {
			listed[v.Name] = v
		}
	}
	var missing []string
	for name, at := range read {
		v, ok := listed[name]
		switch {
		case !ok:
			missing = append(missing, fmt.Sprintf("%s (%s)", name, at))
		case v.SDK:
			missing = append(missing, fmt.Sprintf("%s is read by paygate's code (%s), not only by the SDK: unmark SDK", name, at))
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "variables the code reads that configVars (cmd/paygate/config_vars.go) lacks")

	var stale []string
	for name, v := range listed {
		if _, ok := read[name]; ok {
			continue
		}
		if v.SDK && sdkReads(sdkText.String(), name) {
			continue
		}
		stale = append(stale, name)
	}
	sort.Strings(stale)
	require.Empty(t, stale, "variables configVars lists that nothing paygate is built from reads")
}

// sdkReads reports whether the SDK's source reads name: as a literal, or
// as the OTLP exporter reads its settings, a key such as ("HEADERS") under
// its namespace OTEL_EXPORTER_OTLP.
func sdkReads(src, name string) bool {
	if strings.Contains(src, `"`+name+`"`) {
		return true
	}
	const ns = "OTEL_EXPORTER_OTLP"
	key, ok := strings.CutPrefix(name, ns+"_")
	return ok && strings.Contains(src, `Namespace: "`+ns+`"`) && strings.Contains(src, `("`+key+`"`)
}

// TestDevVarsDocumented: every variable name (PAYGATE_*, OTEL_*) the
// scripts, the Makefile or any Go file (tests and internal/ included)
// mention that paygate itself does not read is in devVars, and every row of
// devVars is still mentioned somewhere.
func TestDevVarsDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	var goFiles []string
	var text strings.Builder
	shellName := regexp.MustCompile(`\b(?:PAYGATE|OTEL)_[A-Z0-9_]*[A-Z0-9]\b`)
	mentioned := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "tmp" || d.Name() == "node_modules" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		switch {
		case isReference(path):
			return nil
		case strings.HasSuffix(path, ".go"):
			goFiles = append(goFiles, path)
		case strings.HasPrefix(rel, "scripts"+string(filepath.Separator)) && strings.HasSuffix(path, ".sh"), rel == "Makefile":
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, n := range shellName.FindAllString(string(b), -1) {
				if _, ok := mentioned[n]; !ok {
					mentioned[n] = rel
				}
			}
			text.Write(b)
		default:
			return nil
		}
		return nil
	})
	require.NoError(t, err)
	for n, at := range goStrings(t, goFiles) {
		if _, ok := mentioned[n]; !ok {
			mentioned[n] = at
		}
	}
	for _, f := range goFiles {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		text.Write(b)
	}

	config := map[string]bool{}
	for _, g := range configVars {
		for _, v := range g.Vars {
			config[v.Name] = true
		}
	}
	var undocumented []string
	for n, at := range mentioned {
		if !config[n] && !slices.ContainsFunc(devVars, func(v devVar) bool { return v.Name == n }) {
			undocumented = append(undocumented, fmt.Sprintf("%s (%s)", n, at))
		}
	}
	sort.Strings(undocumented)
	require.Empty(t, undocumented, "variables the tooling reads that devVars (cmd/paygate/config_vars_test.go) lacks")
	for _, v := range devVars {
		require.Contains(t, text.String(), v.Name, "devVars lists %s, which no script or Go file mentions", v.Name)
	}
}
