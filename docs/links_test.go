package docs

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// TestLinks: every relative link and image of the repository's Markdown
// (README.md, docs/, BENCHMARKS.md, …) names a file or directory that
// exists, and every #fragment an anchor of its target, by GitHub's rules;
// every docs/ path that a file names exists; and every section that a file
// names — README.md, "Limits" — is a heading of that file.
func TestLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the repository's root is not the parent of docs/: %v", err)
	}
	r := check(root)
	if r.mdFiles < 10 || r.links < 100 {
		t.Fatalf("checked %d Markdown files and %d links: too few, the walk missed the documentation", r.mdFiles, r.links)
	}
	for _, p := range r.problems {
		t.Error(p)
	}
	if len(r.problems) > 0 {
		return
	}
	t.Logf("%d Markdown files, %d links and anchors, %d docs/ paths and %d sections named in other files: all resolve",
		r.mdFiles, r.links, r.mentions, r.sections)
}

// TestLinksFindsBrokenOnes runs the check on a small repository with one
// good and one broken reference of each kind, and wants exactly the broken
// ones reported.
func TestLinksFindsBrokenOnes(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"README.md": "# Demo\n\n## Set up (Go 1.26)\n\n## Set up (Go 1.26)\n\n" +
			"[guide](docs/guides/a.md) [gone](docs/guides/gone.md)\n" +
			"[ok](docs/guides/a.md#the-commit-boundary-commit) [bad anchor](docs/guides/a.md#no-such-heading)\n" +
			"[here](#set-up-go-126) [dup](#set-up-go-126-1) [missing](#set-up)\n" +
			"![shot](docs/shot.png) ![no shot](docs/noshot.png)\n" +
			"[out](../../etc/passwd) [web](https://example.com/x.md#y) [dir](docs/guides)\n" +
			"`[not a link](nowhere.md)`\n\n```\n[not a link either](nowhere.md)\n```\n" +
			"<a href=\"docs/guides/b.md\">html</a>\n",
		"docs/guides/a.md": "# A\n\n### The commit boundary: `Commit`\n\n[up](../../README.md#demo) [code](../../main.go#L3) [other](../../main.go#here)\n" +
			"The [readme](../../README.md), \"Set up\" and ([a](a.md), \"The commit\nboundary\") and ([a](a.md), \"The end\").\n",
		"docs/shot.png": "png",
		"main.go": "package main\n\n// See docs/guides/a.md and docs/guides/b.md (README.md, \"Set up\");\n" +
			"// README.md, \"Set\n// down\"; docs/guides/a.md, \"The commit boundary\".\n" +
			"// The README's \"Tour\" section.\n",
	}
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := check(root)
	var got []string
	for _, p := range r.problems {
		got = append(got, p.String())
	}
	want := []string{
		`README.md:7: link "docs/guides/gone.md": no such file or directory docs/guides/gone.md`,
		`README.md:8: link "docs/guides/a.md#no-such-heading": docs/guides/a.md has no heading with the anchor "no-such-heading"`,
		`README.md:9: link "#set-up": README.md has no heading with the anchor "set-up"`,
		`README.md:10: link "docs/noshot.png": no such file or directory docs/noshot.png`,
		`README.md:11: link "../../etc/passwd": leaves the repository`,
		`README.md:17: link "docs/guides/b.md": no such file or directory docs/guides/b.md`,
		`docs/guides/a.md:5: link "../../main.go#here": a fragment on a file that is not Markdown (only #L<line> is)`,
		`docs/guides/a.md:7: section "The end" of docs/guides/a.md: no heading starts so`,
		`main.go:3: docs/guides/b.md: no such file or directory`,
		`main.go:4: section "Set down" of README.md: no heading starts so`,
		`main.go:6: section "Tour" of README.md: no heading starts so`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSlug holds slug to what GitHub makes of headings of this repository.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Set up (fresh machine with Go 1.26)":                         "set-up-fresh-machine-with-go-126",
		"On a replicated database: MariaDB Galera, a managed primary": "on-a-replicated-database-mariadb-galera-a-managed-primary",
		"Refused actions (`TaskCancelled`)":                           "refused-actions-taskcancelled",
		"Fencing: a deposed owner acknowledges nothing":               "fencing-a-deposed-owner-acknowledges-nothing",
		"Guarantees, precisely":                                       "guarantees-precisely",
		"Snapshots, retention and offline tools":                      "snapshots-retention-and-offline-tools",
		"What's new — in 2 words":                                     "whats-new--in-2-words",
		"snake_case and CamelCase":                                    "snake_case-and-camelcase",
		"Größe übergroß":                                              "größe-übergroß",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

type problem struct {
	file string // relative to the repository's root, with slashes
	line int
	msg  string
}

func (p problem) String() string { return fmt.Sprintf("%s:%d: %s", p.file, p.line, p.msg) }

type report struct {
	problems                           []problem
	mdFiles, links, mentions, sections int
}

// skipDir: directories that hold no documentation of the project's own:
// dependencies, build output and tools.
func skipDir(name string) bool {
	return strings.HasPrefix(name, ".") && name != ".ci" || name == "node_modules" || name == "dist" || name == "testdata"
}

// mentionFile: the files whose text may name docs/ paths and sections
// (not this test, whose examples are broken on purpose).
func mentionFile(rel string) bool {
	if rel == "docs/links_test.go" {
		return false
	}
	switch path.Ext(rel) {
	case ".go", ".proto", ".sql", ".ts", ".mjs", ".md", ".yml", ".yaml", ".sh":
		return true
	}
	return rel == "Makefile" || rel == ".ci/run"
}

// check walks the repository at root and reports every broken reference.
func check(root string) report {
	var r report
	c := &checker{root: root, parsed: map[string]*markdown{}}
	var mdFiles, others []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if path.Ext(rel) == ".md" {
			mdFiles = append(mdFiles, rel)
		}
		if mentionFile(rel) {
			others = append(others, rel)
		}
		return nil
	})
	if err != nil {
		r.problems = append(r.problems, problem{".", 0, err.Error()})
		return r
	}
	for _, f := range mdFiles {
		md, err := c.markdown(f)
		if err != nil {
			r.problems = append(r.problems, problem{f, 0, err.Error()})
			continue
		}
		r.mdFiles++
		for _, l := range md.links {
			r.links++
			if msg := c.checkLink(f, l.dest); msg != "" {
				r.problems = append(r.problems, problem{f, l.line, fmt.Sprintf("link %q: %s", l.dest, msg)})
			}
		}
	}
	for _, f := range others {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			r.problems = append(r.problems, problem{f, 0, err.Error()})
			continue
		}
		for _, m := range docsPaths(src, path.Ext(f) == ".md") {
			r.mentions++
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(m.path))); err != nil {
				r.problems = append(r.problems, problem{f, m.line, m.path + ": no such file or directory"})
			}
		}
		for _, s := range sectionRefs(src, path.Ext(f) == ".md") {
			target := s.file
			if s.relative {
				target = path.Join(path.Dir(f), s.file)
			}
			r.sections++
			if msg := c.checkSection(target, s.section); msg != "" {
				r.problems = append(r.problems, problem{f, s.line, fmt.Sprintf("section %q of %s: %s", s.section, target, msg)})
			}
		}
	}
	slices.SortFunc(r.problems, func(a, b problem) int {
		if n := strings.Compare(a.file, b.file); n != 0 {
			return n
		}
		return a.line - b.line
	})
	return r
}

type checker struct {
	root   string
	parsed map[string]*markdown // by path relative to root
}

func (c *checker) markdown(rel string) (*markdown, error) {
	if md, ok := c.parsed[rel]; ok {
		return md, nil
	}
	src, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, err
	}
	md := parseMarkdown(src)
	c.parsed[rel] = md
	return md, nil
}

var lineFragment = regexp.MustCompile(`^L\d+(-L\d+)?$`)

// checkLink returns what is wrong with the link dest in the Markdown file
// from (relative to the root), or "" if nothing is.
func (c *checker) checkLink(from, dest string) string {
	u, err := url.Parse(dest)
	if err != nil {
		return err.Error()
	}
	if u.Scheme != "" || u.Host != "" {
		return "" // another site: not checked here
	}
	target := from
	if u.Path != "" {
		if strings.HasPrefix(u.Path, "/") {
			target = path.Clean(strings.TrimPrefix(u.Path, "/"))
		} else {
			target = path.Join(path.Dir(from), u.Path)
		}
		if target == ".." || strings.HasPrefix(target, "../") {
			return "leaves the repository"
		}
		if _, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(target))); err != nil {
			return "no such file or directory " + target
		}
	}
	if u.Fragment == "" {
		return ""
	}
	if path.Ext(target) != ".md" {
		if lineFragment.MatchString(u.Fragment) {
			return ""
		}
		return "a fragment on a file that is not Markdown (only #L<line> is)"
	}
	md, err := c.markdown(target)
	if err != nil {
		return err.Error()
	}
	if !md.anchors[u.Fragment] {
		return fmt.Sprintf("%s has no heading with the anchor %q", target, u.Fragment)
	}
	return ""
}

// checkSection returns what is wrong with naming section of the file
// target, or "" if one of its headings starts with it, word for word.
func (c *checker) checkSection(target, section string) string {
	if path.Ext(target) != ".md" {
		return "not a Markdown file"
	}
	if _, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(target))); err != nil {
		return "no such file"
	}
	md, err := c.markdown(target)
	if err != nil {
		return err.Error()
	}
	want := slug(section)
	for _, h := range md.headings {
		if h == want || strings.HasPrefix(h, want+"-") {
			return ""
		}
	}
	return "no heading starts so"
}

type markdown struct {
	headings []string        // the slug of each heading, before deduplication
	anchors  map[string]bool // what a #fragment may name
	links    []link
}

type link struct {
	dest string
	line int
}

var (
	md         = goldmark.New(goldmark.WithExtensions(extension.GFM))
	htmlLink   = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]*)"`)
	htmlAnchor = regexp.MustCompile(`(?i)\b(?:id|name)\s*=\s*"([^"]*)"`)
)

// parseMarkdown finds the headings, anchors and links of a Markdown file
// as GitHub renders it (CommonMark with GitHub's extensions): what is in
// code spans and code blocks is not a link.
func parseMarkdown(src []byte) *markdown {
	m := &markdown{anchors: map[string]bool{}}
	seen := map[string]int{}
	lineOf := func(offset int) int { return bytes.Count(src[:offset], []byte("\n")) + 1 }
	html := func(s []byte, line int) {
		for _, g := range htmlLink.FindAllSubmatch(s, -1) {
			m.links = append(m.links, link{string(g[1]), line})
		}
		for _, g := range htmlAnchor.FindAllSubmatch(s, -1) {
			m.anchors[string(g[1])] = true
		}
	}
	doc := md.Parser().Parse(text.NewReader(src))
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			s := slug(plainText(n, src))
			m.headings = append(m.headings, s)
			// GitHub: the second heading of a slug gets -1, the third -2, …
			anchor := s
			for k := seen[s]; ; k++ {
				if k > 0 {
					anchor = fmt.Sprintf("%s-%d", s, k)
				}
				if !m.anchors[anchor] {
					seen[s] = k + 1
					break
				}
			}
			m.anchors[anchor] = true
		case *ast.Link:
			m.links = append(m.links, link{string(n.Destination), lineOf(firstOffset(n, src))})
		case *ast.Image:
			m.links = append(m.links, link{string(n.Destination), lineOf(firstOffset(n, src))})
		case *ast.HTMLBlock:
			lines := n.Lines()
			for i := 0; i < lines.Len(); i++ {
				seg := lines.At(i)
				html(seg.Value(src), lineOf(seg.Start))
			}
		case *ast.RawHTML:
			for i := 0; i < n.Segments.Len(); i++ {
				seg := n.Segments.At(i)
				html(seg.Value(src), lineOf(seg.Start))
			}
		}
		return ast.WalkContinue, nil
	})
	return m
}

// plainText is the text of an inline node's descendants, as GitHub takes it
// for a heading's anchor: code spans' text included, markup and HTML not.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
			if c.SoftLineBreak() || c.HardLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		case *ast.RawHTML:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// firstOffset is the offset in src of a node's first text, for its line.
func firstOffset(n ast.Node, src []byte) int {
	offset := -1
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if t, ok := c.(*ast.Text); ok && entering {
			offset = t.Segment.Start
			return ast.WalkStop, nil
		}
		return ast.WalkContinue, nil
	})
	if offset < 0 { // a link without text: the line of its paragraph
		for p := n.Parent(); p != nil; p = p.Parent() {
			if p.Type() == ast.TypeBlock && p.Lines().Len() > 0 {
				return p.Lines().At(0).Start
			}
		}
		return 0
	}
	return offset
}

// slug is GitHub's anchor for a heading's text: lower case, every
// character but letters, marks, digits, '_', '-' and spaces dropped, each
// space a '-'.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.In(r, unicode.L, unicode.M, unicode.Nd, unicode.Nl, unicode.No, unicode.Pc):
			b.WriteRune(r)
		}
	}
	return b.String()
}

type mention struct {
	path string
	line int
}

// docsPath: the rest of a docs/ path in running text.
var docsPath = regexp.MustCompile(`^[\w./\-]*\w`)

// pathChar: a byte that may be part of a path or a URL, so that a docs/
// after it is not the start of one.
func pathChar(c byte) bool {
	return c == '_' || c == '/' || c == '.' || c == '-' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// starts calls f with the offset of each occurrence of one of words in
// src that does not continue a path or a word.
func starts(src []byte, words []string, f func(int)) {
	for _, w := range words {
		for i := 0; ; {
			k := bytes.Index(src[i:], []byte(w))
			if k < 0 {
				break
			}
			if at := i + k; at == 0 || !pathChar(src[at-1]) {
				f(at)
			}
			i += k + len(w)
		}
	}
}

// docsPaths finds the docs/ paths a text names. In Markdown, a link's
// destination is left to the link check.
func docsPaths(src []byte, isMarkdown bool) []mention {
	var out []mention
	starts(src, []string{"docs/"}, func(at int) {
		if before := src[:at]; isMarkdown && (bytes.HasSuffix(before, []byte("](")) || bytes.HasSuffix(before, []byte(`="`))) {
			return
		}
		rest := docsPath.Find(src[at+len("docs/"):])
		if rest == nil {
			return
		}
		out = append(out, mention{"docs/" + string(rest), bytes.Count(src[:at], []byte("\n")) + 1})
	})
	slices.SortFunc(out, func(a, b mention) int { return a.line - b.line })
	return out
}

type sectionRef struct {
	file     string // from the root, or from the naming file's directory if relative
	relative bool
	section  string
	line     int
}

var (
	// README.md, "Limits" — also wrapped over comment lines.
	namedSection = regexp.MustCompile(`^(README(?:\.md)?|BENCHMARKS\.md|docs/[\w./\-]*\.md)(?:'s)?,?\s+"([^"]+)"`)
	// [records.md](records.md), "Queue statistics" in Markdown.
	linkedSection = regexp.MustCompile(`\]\(([^)\s#:]+\.md)\),\s+"([^"]+)"`)
)

// sectionRefs finds where a text names a section of a Markdown file, as
// `FILE, "Heading"`; in Markdown, also as `[text](FILE), "Heading"`.
func sectionRefs(src []byte, isMarkdown bool) []sectionRef {
	if !bytes.Contains(src, []byte("README")) && !bytes.Contains(src, []byte(".md")) {
		return nil
	}
	// Join wrapped lines, keeping the line each byte came from: a line
	// break, the blanks around it and what continues a comment or a quote
	// on the next line (//, #, --, *, >) become one space.
	s := bytes.ReplaceAll(src, []byte(`\"`), []byte(`"`))
	flat := make([]byte, 0, len(s))
	lineAt := make([]int, 0, len(s))
	line := 1
	for i := 0; i < len(s); i++ {
		if s[i] != '\n' {
			flat = append(flat, s[i])
			lineAt = append(lineAt, line)
			continue
		}
		for len(flat) > 0 && (flat[len(flat)-1] == ' ' || flat[len(flat)-1] == '\t') {
			flat, lineAt = flat[:len(flat)-1], lineAt[:len(lineAt)-1]
		}
		flat = append(flat, ' ')
		lineAt = append(lineAt, line)
		line++
		j := i + 1
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		if rest := s[j:]; bytes.HasPrefix(rest, []byte("//")) || bytes.HasPrefix(rest, []byte("--")) {
			j += 2
		} else if len(rest) > 0 && (rest[0] == '#' || rest[0] == '*' || rest[0] == '>') {
			j++
		}
		for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '/' || s[j] == '#') {
			j++
		}
		i = j - 1
	}
	var out []sectionRef
	starts(flat, []string{"README", "BENCHMARKS.md", "docs/"}, func(at int) {
		window := flat[at:min(len(flat), at+500)]
		g := namedSection.FindSubmatchIndex(window)
		if g == nil {
			return
		}
		file := string(window[g[2]:g[3]])
		if file == "README" {
			file = "README.md"
		}
		out = append(out, sectionRef{file, false, string(window[g[4]:g[5]]), lineAt[at]})
	})
	if isMarkdown {
		for _, g := range linkedSection.FindAllSubmatchIndex(flat, -1) {
			out = append(out, sectionRef{string(flat[g[2]:g[3]]), true, string(flat[g[4]:g[5]]), lineAt[g[2]]})
		}
	}
	return out
}
