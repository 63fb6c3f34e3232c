// Package markdown reads, by GitHub's rules, which anchors a Markdown
// document offers and which links it makes, for the tests that keep the
// links between paygate's documents, and from its code into them, alive.
// It parses only what those need (headings, links, explicit anchors) and
// must never be used to render a document.
package markdown

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

var (
	fence       = regexp.MustCompile("^\\s{0,3}(```|~~~)")
	heading     = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	explicit    = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	link        = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	codeSpan    = regexp.MustCompile("`+[^`]*`+")
	htmlTag     = regexp.MustCompile(`<[^>]+>`)
	emphasis    = strings.NewReplacer("*", "", "`", "")
	htmlEntity  = strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">", "&quot;", `"`, "&#39;", "'")
	inlineLinks = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// Slug is the anchor GitHub gives a heading's text: its text as rendered
// (links as their words, no code marks, emphasis or tags), lowercased,
// every character but letters, digits, spaces, hyphens and underscores
// dropped, and each space a hyphen. A repeated slug gets -1, -2… from the
// document's Anchors, not here.
func Slug(text string) string {
	text = inlineLinks.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = htmlEntity.Replace(emphasis.Replace(text))
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Line is one line of a document outside fenced code blocks, numbered
// from 1.
type Line struct {
	N    int
	Text string
}

// prose is src's lines outside fenced code blocks.
func prose(src string) []Line {
	var out []Line
	inFence, marker := false, ""
	for i, l := range strings.Split(src, "\n") {
		if m := fence.FindStringSubmatch(l); m != nil {
			switch {
			case !inFence:
				inFence, marker = true, m[1]
			case m[1] == marker:
				inFence = false
			}
			continue
		}
		if !inFence {
			out = append(out, Line{N: i + 1, Text: l})
		}
	}
	return out
}

// Anchors is every fragment a link into src may name: its headings' slugs
// (a repeated one numbered as GitHub numbers it) and its explicit
// <a id="…"> and <a name="…"> anchors. Headings inside fenced code blocks
// are not headings.
func Anchors(src string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(src) {
		for _, m := range explicit.FindAllStringSubmatch(codeSpan.ReplaceAllString(l.Text, ""), -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(l.Text)
		if m == nil {
			continue
		}
		s := Slug(m[2])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// Link is a link of a document: its target as written, and its line.
type Link struct {
	Target string
	Line   int
}

// Links is every inline link and image of src outside code (fenced blocks
// and code spans), in order.
func Links(src string) []Link {
	var out []Link
	for _, l := range prose(src) {
		for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(l.Text, ""), -1) {
			out = append(out, Link{Target: m[2], Line: l.N})
		}
	}
	return out
}
