package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/paygate/paygate/internal/markdown"
)

// TestProblemTypesAreGuideSections: every problem type the API answers is a
// link to a section of a guide that exists, by GitHub's anchor rules, so a
// client following a type lands on its explanation; and no guide is named
// for a slug the table no longer uses.
func TestProblemTypesAreGuideSections(t *testing.T) {
	t.Parallel()
	used := map[string]bool{}
	for _, row := range problemTable {
		used[row.slug] = true
		uri := typeURI(row.slug)
		guide, ok := problemGuides[row.slug]
		require.True(t, ok, "problemGuides names no guide for the slug %q", row.slug)
		require.Equal(t, docs+guide+"#"+row.slug, uri)
		require.True(t, strings.HasPrefix(uri, "https://github.com/paygate/paygate/blob/main/docs/"), uri)
		src, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(guide)))
		require.NoError(t, err, "the guide of %q", row.slug)
		require.True(t, markdown.Anchors(string(src))[row.slug], "%s has no section #%s (%s)", guide, row.slug, row.title)
	}
	for slug := range problemGuides {
		require.True(t, used[slug], "problemGuides names %q, which no row of the table uses", slug)
	}
}
