package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// sign is the section sign, spelled as an escape so that this file's own strings are not
// references.
const sign = "\u00a7"

// citedDocs maps the word that names a document in a reference ("producer §7.3") to the
// document's path from the repository root. docs/spec/README.md states the convention.
var citedDocs = map[string]string{
	"producer":    "docs/spec/producer.md",
	"consumer":    "docs/spec/consumer.md",
	"workers":     "docs/spec/workers.md",
	"design":      "docs/design.md",
	"performance": "docs/PERFORMANCE.md",
}

// scannedExts are the files whose text may cite sections.
var scannedExts = []string{".go", ".md", ".avsc"}

// skippedDirs are not scanned: generated benchmark output, downloaded broker jars, build output.
var skippedDirs = []string{"docs/perf", "testenv/kafka/libs", "bin"}

// finding is one violation, located by file and 1-based line.
type finding struct {
	file string
	line int
	msg  string
}

func (f finding) String() string { return fmt.Sprintf("%s:%d: %s", f.file, f.line, f.msg) }

var (
	// headingRE matches a Markdown heading that starts with a section number: "## 7. Title",
	// "### 7.3 Title".
	headingRE = regexp.MustCompile(`^#{1,6}[ \t]+([0-9]+(?:\.[0-9]+)*)\.?(?:[ \t]|$)`)
	// sectionRE matches the section number right after the section sign.
	sectionRE = regexp.MustCompile(`^[0-9]+(?:\.[0-9]+)*`)
	// docWordRE matches a document word right before the section sign: separated by spaces, or
	// by a line break (and the next line's comment marker) where text was wrapped.
	docWordRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])([a-z]+)(?:[ \t]|\r?\n[ \t]*(?://+|#+)?[ \t]*)+$`)
	// continuationRE matches what may stand between two references of one list: separators,
	// "and", "or", "to", whitespace and comment markers ("//", "*", "#").
	continuationRE = regexp.MustCompile(`^(?:[\s,;/*#–—-]|\band\b|\bor\b|\bto\b)*$`)
	// outsideRE matches a citation of something outside the repository.
	outsideRE = regexp.MustCompile(`\.\./shared\b|PERFORMANCE[-]ANCHORS|(?:^|[\s"'` + "`" + `(=:])/(?:work|tmp|home|root|Users|mnt)/`)
)

// headings returns the section numbers of the numbered headings of a Markdown text, ignoring
// fenced code blocks.
func headings(md string) map[string]bool {
	out := map[string]bool{}
	fenced := false
	sc := bufio.NewScanner(strings.NewReader(md))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// checkText returns the violations in one file's text. sections maps each document word to the
// section numbers that have headings in that document.
func checkText(name, text string, sections map[string]map[string]bool) []finding {
	var out []finding
	lineOf := func(off int) int { return strings.Count(text[:off], "\n") + 1 }
	for _, loc := range outsideRE.FindAllStringIndex(text, -1) {
		out = append(out, finding{name, lineOf(loc[0]),
			fmt.Sprintf("cites a source outside the repository: %q", strings.TrimLeft(text[loc[0]:loc[1]], " \t\r\n\"'`(=:"))})
	}
	prevDoc, prevEnd := "", -1
	for off := 0; ; {
		i := strings.Index(text[off:], sign)
		if i < 0 {
			break
		}
		at := off + i
		numStart := at + len(sign)
		off = numStart
		num := sectionRE.FindString(text[numStart:])
		if num == "" {
			out = append(out, finding{name, lineOf(at), "a " + sign + " without a section number"})
			prevDoc, prevEnd = "", -1
			continue
		}
		end := numStart + len(num)
		doc := ""
		if m := docWordRE.FindStringSubmatch(text[max(0, at-40):at]); m != nil {
			if _, ok := citedDocs[m[1]]; ok {
				doc = m[1]
			}
		}
		if doc == "" && prevDoc != "" && continuationRE.MatchString(text[prevEnd:at]) {
			doc = prevDoc // a list continuing a named reference: "consumer §3.2, §3.3"
		}
		switch {
		case doc == "":
			out = append(out, finding{name, lineOf(at),
				fmt.Sprintf("%s%s does not name its document (write producer, consumer, design or performance %s%s)", sign, num, sign, num)})
		case !sections[doc][num]:
			out = append(out, finding{name, lineOf(at),
				fmt.Sprintf("%s %s%s has no numbered heading in %s", doc, sign, num, citedDocs[doc])})
		}
		prevDoc, prevEnd = doc, end
		off = end
	}
	return out
}

// repoRoot is the repository root seen from this package's directory.
const repoRoot = ".."

// loadSections parses the headings of every cited document.
func loadSections(t *testing.T) map[string]map[string]bool {
	t.Helper()
	sections := map[string]map[string]bool{}
	for word, path := range citedDocs {
		b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(path)))
		if err != nil {
			t.Fatalf("cited document %s (%q): %v", path, word, err)
		}
		sections[word] = headings(string(b))
		if len(sections[word]) == 0 {
			t.Fatalf("cited document %s has no numbered heading", path)
		}
	}
	return sections
}

// scannedFiles returns every .go, .md and .avsc file of the repository (slash paths from the
// root), skipping hidden directories and skippedDirs.
func scannedFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || slices.Contains(skippedDirs, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(scannedExts, filepath.Ext(rel)) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking the repository: %v", err)
	}
	return files
}

// TestEveryReferenceResolves scans the repository: every reference names its document, every cited
// section has a heading, and nothing cites a source outside the repository.
func TestEveryReferenceResolves(t *testing.T) {
	sections := loadSections(t)
	files := scannedFiles(t)
	if !slices.Contains(files, "ckf/producer/dcstate.go") || !slices.Contains(files, "docs/spec/producer.md") {
		t.Fatalf("the walk missed known files (found %d files); is the repository root %q?", len(files), repoRoot)
	}
	refs := 0 // section signs seen
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		refs += strings.Count(string(b), sign)
		for _, v := range checkText(f, string(b), sections) {
			t.Error(v)
		}
	}
	if refs < 100 {
		t.Errorf("only %d section references found in %d files; the scan looks at the wrong tree", refs, len(files))
	}
}

// TestBenchreportTargetsHaveAHome checks that every target id tools/benchreport reports is a
// row of the target table of design §6.2 (an id that is a section reference is checked by
// TestEveryReferenceResolves).
func TestBenchreportTargetsHaveAHome(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "tools", "benchreport", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	design, err := os.ReadFile(filepath.Join(repoRoot, "docs", "design.md"))
	if err != nil {
		t.Fatal(err)
	}
	ids := regexp.MustCompile(`\bt\("(T[0-9]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(ids) == 0 {
		t.Fatal("no T-numbered target found in tools/benchreport/main.go")
	}
	for _, m := range ids {
		if !strings.Contains(string(design), "| "+m[1]+" |") {
			t.Errorf("tools/benchreport reports target %s, which has no row in docs/design.md (design §6.2)", m[1])
		}
	}
}

// placeholders spell, in the sample below, what this file must not contain literally (the scan
// reads this file too).
var placeholders = strings.NewReplacer("{S}", sign, "{W}", "/wo"+"rk/", "{U}", ".."+"/shared", "{A}", "PERFORMANCE"+"-ANCHORS")

// TestCheckTextSample runs the checker on a small sample with one case of each kind, so that a
// checker that stopped finding anything fails here.
func TestCheckTextSample(t *testing.T) {
	sections := map[string]map[string]bool{
		"producer":    headings("# P\n## 6. Mutator\n## 7. State\n### 7.3 Store\n## 8. Publication\n"),
		"consumer":    headings("## 3. Ingestor\n### 3.2 Checks\n### 3.3 Table\n```\n## 9. not a heading\n```\n"),
		"design":      headings("## 3. Snapshots\n"),
		"performance": headings("## 4. Micro\n"),
	}
	if sections["consumer"]["9"] {
		t.Fatal("a heading inside a fenced code block was parsed")
	}
	sample := strings.Join([]string{
		"// Good: producer {S}7.3 and design {S}3.",                             // 1
		"// Continued: consumer {S}3.2, {S}3.3; producer {S}6–{S}8 and {S}7.3.", // 2
		"// Across lines: (consumer {S}3.2,",                                    // 3
		"// {S}3.3)",                                                            // 4
		"// Bare: see {S}7.3.",                                                  // 5
		"// Dangling: producer {S}99.",                                          // 6
		"// Unknown document: DESIGN {S}3 and spec {S}7.",                       // 7
		"// Not a section: {S}N.",                                               // 8
		"// Outside: {W}shared/DESIGN.md, {U}/x, {A} {S}3.",                     // 9
		"// A sentence between breaks the list: consumer {S}3.2 is fine, but {S}3.3 is bare.", // 10
		"// Wrapped: the rule of consumer",    // 11
		"// {S}3.3 holds; producer {S}6 too.", // 12
	}, "\n")
	sample = placeholders.Replace(sample)
	got := checkText("sample.go", sample, sections)
	want := []string{
		"sample.go:5: {S}7.3 does not name its document (write producer, consumer, design or performance {S}7.3)",
		"sample.go:6: producer {S}99 has no numbered heading in docs/spec/producer.md",
		"sample.go:7: {S}3 does not name its document (write producer, consumer, design or performance {S}3)",
		"sample.go:7: {S}7 does not name its document (write producer, consumer, design or performance {S}7)",
		"sample.go:8: a {S} without a section number",
		`sample.go:9: cites a source outside the repository: "{W}"`,
		`sample.go:9: cites a source outside the repository: "{U}"`,
		`sample.go:9: cites a source outside the repository: "{A}"`,
		"sample.go:9: {S}3 does not name its document (write producer, consumer, design or performance {S}3)",
		"sample.go:10: {S}3.3 does not name its document (write producer, consumer, design or performance {S}3.3)",
	}
	var gotS []string
	for _, f := range got {
		gotS = append(gotS, f.String())
	}
	for i := range want {
		want[i] = placeholders.Replace(want[i])
	}
	slices.Sort(gotS)
	slices.Sort(want)
	if !slices.Equal(gotS, want) {
		t.Errorf("findings:\n  got  %q\n  want %q", gotS, want)
	}
}
