package markdown

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSlug: the anchors GitHub gives these headings (read off rendered
// pages).
func TestSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Whose money: the merchant's references":     "whose-money-the-merchants-references",
		"HTTP API":                                   "http-api",
		"NATS JetStream":                             "nats-jetstream",
		"Refunds of Adyen payments":                  "refunds-of-adyen-payments",
		"`paygate doctor`":                           "paygate-doctor",
		"The `fee_posted` items":                     "the-fee_posted-items",
		"[Books](finance.md#books) and periods":      "books-and-periods",
		"**Events stuck** in `received`":             "events-stuck-in-received",
		"Ingest — one machine":                       "ingest--one-machine",
		"1. What `make bench` measures (2026-12-04)": "1-what-make-bench-measures-2026-12-04",
		"Übersicht & Zahlen":                         "übersicht--zahlen",
		"Alerts' runbook":                            "alerts-runbook",
	} {
		require.Equal(t, want, Slug(heading), heading)
	}
}

func TestAnchors(t *testing.T) {
	t.Parallel()
	doc := "# Title\n\n## Runs\n\n```sh\n# not a heading\n```\n\n## Runs\n\nText <a id=\"refund-exceeds-refundable\"></a> and `<a id=\"in-code\">`.\n### Runs ###\n"
	got := Anchors(doc)
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	require.Equal(t, []string{"refund-exceeds-refundable", "runs", "runs-1", "runs-2", "title"}, keys)
}

func TestLinks(t *testing.T) {
	t.Parallel()
	doc := "See [the API](api.md#idempotency) and ![a page](console/run.png \"the run\").\n" +
		"`[not](a-link.md)` and\n```\n[nor](this.md)\n```\n[`GET /v1/feed`](downstream.md#feed), [web](https://example.com)\n"
	require.Equal(t, []Link{
		{Target: "api.md#idempotency", Line: 1},
		{Target: "console/run.png", Line: 1},
		{Target: "downstream.md#feed", Line: 6},
		{Target: "https://example.com", Line: 6},
	}, Links(doc))
}

// repoRoot is the module's root, from this package's directory.
const repoRoot = "../.."

// skipDir: tools, data and scratch directories hold no document of ours.
func skipDir(name string) bool {
	return strings.HasPrefix(name, ".") || name == "tmp" || name == "node_modules" || name == "testdata"
}

// target checks that a link from file (a path under the repository) to
// target resolves: its file exists and, with a fragment, the file is
// Markdown holding that anchor. It returns why not, or "".
func target(file, to string) string {
	path, frag, _ := strings.Cut(to, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
	}
	rel, err := filepath.Rel(repoRoot, dest)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "points outside the repository"
	}
	if _, err := os.Stat(dest); err != nil {
		return "no such file"
	}
	if frag == "" {
		return ""
	}
	if !strings.HasSuffix(dest, ".md") {
		return "an anchor into a file that is not Markdown"
	}
	src, err := os.ReadFile(dest)
	if err != nil {
		return err.Error()
	}
	if !Anchors(string(src))[frag] {
		return "no heading or anchor #" + frag + " in " + filepath.ToSlash(rel)
	}
	return ""
}

// TestDocLinks: every relative link of every Markdown document of the
// repository (README, docs/, deploy/…) reaches a file, and every #anchor a
// heading (or an explicit anchor) of its target, by GitHub's rules.
func TestDocLinks(t *testing.T) {
	t.Parallel()
	var broken []string
	checked := 0
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != repoRoot && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, l := range Links(string(src)) {
			if l.Target == "" || regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`).MatchString(l.Target) {
				continue
			}
			checked++
			if why := target(path, l.Target); why != "" {
				rel, _ := filepath.Rel(repoRoot, path)
				broken = append(broken, filepath.ToSlash(rel)+":"+itoa(l.Line)+": "+l.Target+": "+why)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, checked, 100, "the walk found the documents' links")
	require.Empty(t, broken, "dead links between the documents:\n%s", strings.Join(broken, "\n"))
}

// repoURL is a link to a file of this repository as GitHub serves it, the
// way the code links its documents (problem types, runbook_url
// annotations, the OpenAPI document).
var repoURL = regexp.MustCompile(`https://github\.com/paygate/paygate/blob/main/([A-Za-z0-9_./-]+)(#[A-Za-z0-9_-]+)?`)

// TestCodeLinksToDocs: every link to a file of the repository written in
// its code or configuration (https://github.com/paygate/paygate/blob/main/…:
// problem types in the OpenAPI document, the alerts' runbook_url) reaches a
// file, and its #anchor a heading there. Documents are TestDocLinks'; a
// run's output quoted in one keeps the links of its day.
func TestCodeLinksToDocs(t *testing.T) {
	t.Parallel()
	var broken []string
	checked := 0
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != repoRoot && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".yml", ".yaml", ".json", ".sh", ".tmpl", ".html", ".sql":
		default:
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range repoURL.FindAllStringSubmatch(string(src), -1) {
			checked++
			if why := target(filepath.Join(repoRoot, "README.md"), m[1]+m[2]); why != "" {
				rel, _ := filepath.Rel(repoRoot, path)
				broken = append(broken, filepath.ToSlash(rel)+": "+m[0]+": "+why)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, checked, "the walk found the code's links")
	sort.Strings(broken)
	broken = slices.Compact(broken)
	require.Empty(t, broken, "links from the code to the documents that lead nowhere:\n%s", strings.Join(broken, "\n"))
}

func itoa(n int) string { return strconv.Itoa(n) }
