package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ckf-stream/ckf-stream/app/config"
)

// This file checks that the names a document cites exist. What counts as a citation (the rule,
// also stated in docs/spec/README.md; anything else is prose and is not checked):
//
//  1. A test name: a word Test, Benchmark, Fuzz or Example followed by an upper-case letter,
//     digit or underscore ("TestBridgeLostHistoryIsLoud", "BenchmarkE2ERelay/window=64"),
//     anywhere in the text, code blocks included. It must be a top-level func of a *_test.go
//     file of the module. A name written with a trailing * ("BenchmarkE2E*") must be the prefix
//     of one.
//  2. A repository path: an inline code span without spaces that contains a slash and whose
//     first element is an entry of the repository root or of the document's own directory
//     ("app/indexer/api.go", "deploy/helm/...", "docs/perf/e2e-*.json"); or, in prose, a
//     slash-separated word ending in a known file extension (pathExts) whose first element is
//     such an entry; or the target of a relative Markdown link. It must exist; "..." at the
//     end stands for anything below a directory that must exist, a * is a glob that must
//     match, ":12" line suffixes and "#anchors" are ignored. A bare file name in a code span
//     with extension .go, .s or .avsc ("relay_run.go") must be the name of some file of the
//     repository.
//  3. A Go identifier, in an inline code span (a leading * or &, and a trailing call "(...)",
//     are ignored):
//     - pkg.Name, where pkg is the name of one of the module's packages (not main) and Name is
//     exported: some package of that name declares Name at top level;
//     - dir/pkg.Name, where dir/pkg is a directory of the module ("app/indexer.ParseDomain"):
//     that package declares Name;
//     - pkg.Type.Member (either form of pkg): Type is declared there and has Member;
//     - Type.Member, where Type is a type declared somewhere in the module, Member is exported
//     if Type is, Member has an upper-case letter if Type has none, and neither has an
//     underscore: some type of that name has a method or field
//     Member (directly or through a field it embeds). Lower-case members of exported types
//     (spec field names such as KvEvent.data) and types the module does not declare (spec
//     names, other libraries) are not citations.
//  4. A setting's default: an inline code span that is exactly a setting path of app/config
//     followed by "(V", "(default V" or ", default V", where V is a number, a duration, on,
//     off, true, false or a code span. V must equal the default that processor help config
//     prints.

// pathExts are the file extensions that make a slash-separated word of prose a path citation.
var pathExts = []string{".go", ".md", ".s", ".avsc", ".yaml", ".yml", ".json", ".sh", ".py", ".csv", ".png", ".txt", ".toml", ".xml", ".log"}

// repoIndex is what the citation checker resolves against.
type repoIndex struct {
	// exists reports whether a slash path from the repository root exists.
	exists func(p string) bool
	// glob returns the slash paths from the root that match a glob.
	glob func(pattern string) []string
	// rootEntries are the names at the repository root; dirEntries those of a directory.
	dirEntries func(dir string) map[string]bool
	// baseNames are the names of the repository's .go, .s and .avsc files.
	baseNames map[string]bool
	// tests are the top-level funcs of *_test.go files.
	tests map[string]bool
	// pkgDecls maps a package name to the top-level names its packages declare.
	pkgDecls map[string]map[string]bool
	// dirDecls maps a package directory (slash path from the root) to its top-level names.
	dirDecls map[string]map[string]bool
	// pkgTypes maps "pkg.Type" and "dir.Type" to the type's members, and types maps a type name
	// to the members of every type of that name in the module.
	pkgTypes map[string]map[string]bool
	types    map[string]map[string]bool
	// generated are the directories the root .gitignore names ("/testenv/kafka/libs/"): build
	// and download output, which a document may name before it exists.
	generated []string
	// defaults maps a setting path to the default processor help config prints.
	defaults map[string]string
	// counts counts the citations checked, by kind (test, path, link, ident, default).
	counts map[string]int
}

var (
	testNameRE = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])((?:Test|Benchmark|Fuzz|Example)[A-Z0-9_][A-Za-z0-9_]*)(\*|…)?`)
	codeSpanRE = regexp.MustCompile("`([^`\n]+)`")
	// prosePathRE matches slash-separated words ending in an extension; pathExts filters them.
	prosePathRE = regexp.MustCompile(`(?:^|[\s(\[,;"'])((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_*-]+\.[a-z]+)\b`)
	bareFileRE  = regexp.MustCompile(`^[A-Za-z0-9_-]+\.(?:go|s|avsc)$`)
	linkRE      = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	pathSpanRE  = regexp.MustCompile(`^(?:\./)?[A-Za-z0-9_.*=-]+(?:/[A-Za-z0-9_.*=-]*)+$`)
	// identRE matches [dir/]pkg-or-Type.Name[.Member].
	identRE = regexp.MustCompile(`^[*&]?((?:[a-z0-9_]+/)*)([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?(?:\(.*\))?$`)
	// defaultRE matches the default quoted after a setting's code span: "(V" right after it, or
	// "(default V" / ", default V" later in the same clause (no other code span, period or
	// semicolon between).
	defaultRE = regexp.MustCompile("^(?:\\s*\\(\\s*(" + scalarRE + ")|[^`.;]{0,40}?(?:\\(\\s*|,\\s+)default\\s+(`[^`]+`|" + scalarRE + "))(?:[),;:\\s]|$)")
)

// scalarRE is a number (with thousands commas), a duration or a boolean word.
const scalarRE = `[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?(?:\s?(?:ns|µs|ms|s|min|m|h)\b)?|on\b|off\b|true\b|false\b`

// lineOf returns the 1-based line of byte offset off in text.
func lineOf(text string, off int) int { return strings.Count(text[:off], "\n") + 1 }

// fencedRanges returns the byte ranges of fenced code blocks of a Markdown text.
func fencedRanges(text string) [][2]int {
	var out [][2]int
	start, off := -1, 0
	for _, line := range strings.SplitAfter(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if start < 0 {
				start = off
			} else {
				out = append(out, [2]int{start, off + len(line)})
				start = -1
			}
		}
		off += len(line)
	}
	if start >= 0 {
		out = append(out, [2]int{start, len(text)})
	}
	return out
}

func inRanges(rs [][2]int, off int) bool {
	for _, r := range rs {
		if off >= r[0] && off < r[1] {
			return true
		}
	}
	return false
}

// checkCitations returns the citations of the Markdown file name (slash path from the root)
// that do not resolve in idx.
func checkCitations(name, text string, idx *repoIndex) []finding {
	var out []finding
	add := func(off int, format string, args ...any) {
		out = append(out, finding{name, lineOf(text, off), fmt.Sprintf(format, args...)})
	}
	fences := fencedRanges(text)
	docDir := path.Dir(name)

	for _, m := range testNameRE.FindAllStringSubmatchIndex(text, -1) {
		test, star := text[m[2]:m[3]], m[4] >= 0
		idx.counts["test"]++
		if star {
			found := false
			for t := range idx.tests {
				found = found || strings.HasPrefix(t, test)
			}
			if !found {
				add(m[2], "cites tests %s*, and no test func starts so", test)
			}
		} else if !idx.tests[test] {
			add(m[2], "cites test %s, which is no func of a *_test.go file", test)
		}
	}

	// resolvePath reports whether p (a cited path) exists, from the root or from docDir; ok is
	// false when p is not a citation at all (its first element is no entry of either).
	resolvePath := func(p string) (exists, ok bool) {
		p = strings.TrimPrefix(p, "./")
		if i := strings.IndexAny(p, "#"); i >= 0 {
			p = p[:i]
		}
		p = regexp.MustCompile(`:[0-9]+(?:-[0-9]+)?$`).ReplaceAllString(p, "")
		first, _, _ := strings.Cut(p, "/")
		var bases []string
		if idx.dirEntries(".")[first] {
			bases = append(bases, "")
		}
		if docDir != "." && idx.dirEntries(docDir)[first] {
			bases = append(bases, docDir+"/")
		}
		if len(bases) == 0 {
			return false, false
		}
		for _, b := range bases {
			q := strings.TrimSuffix(b+p, "/")
			for _, g := range idx.generated {
				if q == g || strings.HasPrefix(q, g+"/") {
					return true, true
				}
			}
			switch {
			case strings.HasSuffix(q, "/..."):
				if idx.exists(strings.TrimSuffix(q, "/...")) {
					return true, true
				}
			case strings.ContainsAny(q, "*"):
				if len(idx.glob(q)) > 0 {
					return true, true
				}
			case idx.exists(q):
				return true, true
			}
		}
		return false, true
	}

	for _, m := range prosePathRE.FindAllStringSubmatchIndex(text, -1) {
		p := text[m[2]:m[3]]
		if inRanges(fences, m[2]) || !slices.Contains(pathExts, path.Ext(p)) {
			continue
		}
		if m[2] > 0 && text[m[2]-1] == '`' {
			continue // a code span; checked below
		}
		if exists, ok := resolvePath(p); ok {
			idx.counts["path"]++
			if !exists {
				add(m[2], "cites path %s, which does not exist", p)
			}
		}
	}
	for _, m := range linkRE.FindAllStringSubmatchIndex(text, -1) {
		target := text[m[2]:m[3]]
		if inRanges(fences, m[2]) || strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		t, _, _ := strings.Cut(target, "#")
		idx.counts["link"]++
		if !idx.exists(path.Clean(path.Join(docDir, t))) {
			add(m[2], "links to %s, which does not exist", target)
		}
	}

	for _, m := range codeSpanRE.FindAllStringSubmatchIndex(text, -1) {
		span := strings.TrimSpace(text[m[2]:m[3]])
		if inRanges(fences, m[2]) {
			continue
		}
		if def, ok := idx.defaults[span]; ok {
			if v := defaultRE.FindStringSubmatch(text[m[1]:]); v != nil {
				idx.counts["default"]++
				if q := v[1] + v[2]; !sameSetting(q, def) {
					add(m[2], "quotes %s's default as %s, but it is %q (processor help config)", span, q, def)
				}
			}
			continue
		}
		if bareFileRE.MatchString(span) {
			idx.counts["path"]++
			if !idx.baseNames[span] {
				add(m[2], "cites file %s, and no file of the repository has that name", span)
			}
			continue
		}
		if isDirIdent(span, idx) {
			if msg := checkIdent(span, idx); msg != "" {
				add(m[2], "%s", msg)
			}
			continue
		}
		if pathSpanRE.MatchString(span) && !strings.HasPrefix(span, "/") {
			if exists, ok := resolvePath(span); ok {
				idx.counts["path"]++
				if !exists {
					add(m[2], "cites path %s, which does not exist", span)
				}
				continue
			}
		}
		if msg := checkIdent(span, idx); msg != "" {
			add(m[2], "%s", msg)
		}
	}
	slices.SortStableFunc(out, func(a, b finding) int { return a.line - b.line })
	return out
}

// isDirIdent reports whether s has the form dir/pkg.Name of a package directory of the module.
func isDirIdent(s string, idx *repoIndex) bool {
	m := identRE.FindStringSubmatch(s)
	return m != nil && m[1] != "" && idx.dirDecls[m[1]+m[2]] != nil
}

// checkIdent returns why the code span s, if it cites a Go identifier, does not resolve; ""
// when it resolves or is no citation.
func checkIdent(s string, idx *repoIndex) string {
	m := identRE.FindStringSubmatch(s)
	if m == nil {
		return ""
	}
	dir, x, y, z := strings.TrimSuffix(m[1], "/"), m[2], m[3], m[4]
	exported := func(n string) bool { return n != "" && n[0] >= 'A' && n[0] <= 'Z' }
	counted := func(msg string) string { idx.counts["ident"]++; return msg }
	var decls map[string]bool
	var typeKey string
	switch {
	case dir != "":
		decls = idx.dirDecls[dir+"/"+x]
		if decls == nil {
			return "" // not a directory of ours: no citation
		}
		typeKey = dir + "/" + x + "." + y
	case idx.pkgDecls[x] != nil:
		decls = idx.pkgDecls[x]
		typeKey = x + "." + y
	default:
		// Type.Member
		if z != "" || idx.types[x] == nil || exported(x) != exported(y) || strings.Contains(x+y, "_") ||
			!exported(x) && strings.ToLower(y) == y { // report.json: a file name, not x.y
			return ""
		}
		if !idx.types[x][y] {
			return counted(fmt.Sprintf("cites %s, but no type %s of the module has a method or field %s", s, x, y))
		}
		return counted("")
	}
	if !exported(y) {
		return "" // a setting path or other dotted word, not a Go identifier
	}
	if !decls[y] && !decls["Benchmark"+y] { // pkg.Name also names BenchmarkName as benchstat prints it
		return counted(fmt.Sprintf("cites %s, but package %s declares no %s", s, m[1]+x, y))
	}
	if z != "" && exported(z) && !idx.pkgTypes[typeKey][z] {
		return counted(fmt.Sprintf("cites %s, but %s.%s has no method or field %s", s, x, y, z))
	}
	return counted("")
}

// sameSetting reports whether a quoted default equals what help config prints.
func sameSetting(quoted, def string) bool {
	q := strings.Trim(quoted, "`")
	switch q {
	case "on":
		q = "true"
	case "off":
		q = "false"
	}
	if strings.EqualFold(q, def) {
		return true
	}
	n := strings.ReplaceAll(strings.ReplaceAll(q, ",", ""), " ", "")
	if n == def {
		return true
	}
	n = strings.Replace(strings.Replace(n, "min", "m", 1), "µs", "us", 1)
	dq, err1 := time.ParseDuration(n)
	dd, err2 := time.ParseDuration(def)
	return err1 == nil && err2 == nil && dq == dd
}

// loadRepoIndex parses every Go file of the module and lists the repository's files.
func loadRepoIndex(t *testing.T) *repoIndex {
	t.Helper()
	idx := &repoIndex{
		tests:     map[string]bool{},
		baseNames: map[string]bool{},
		pkgDecls:  map[string]map[string]bool{},
		dirDecls:  map[string]map[string]bool{},
		pkgTypes:  map[string]map[string]bool{},
		types:     map[string]map[string]bool{},
		defaults:  settingDefaults(t),
		counts:    map[string]int{},
	}
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(ignore), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "/") && strings.HasSuffix(l, "/") && !strings.ContainsAny(l, "*?[") {
			idx.generated = append(idx.generated, strings.Trim(l, "/"))
		}
	}
	abs := func(p string) string { return filepath.Join(repoRoot, filepath.FromSlash(p)) }
	idx.exists = func(p string) bool { _, err := os.Stat(abs(p)); return err == nil }
	idx.glob = func(pattern string) []string { m, _ := filepath.Glob(abs(pattern)); return m }
	entries := map[string]map[string]bool{}
	idx.dirEntries = func(dir string) map[string]bool {
		if e, ok := entries[dir]; ok {
			return e
		}
		e := map[string]bool{}
		des, _ := os.ReadDir(abs(dir))
		for _, d := range des {
			e[d.Name()] = true
		}
		entries[dir] = e
		return e
	}

	embeds := map[string][]string{} // "dir.Type" -> embedded type names
	fset := token.NewFileSet()
	err = filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || slices.Contains(skippedDirs, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := path.Ext(rel); ext == ".go" || ext == ".s" || ext == ".avsc" {
			idx.baseNames[d.Name()] = true
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		dir := path.Dir(rel)
		pkg := strings.TrimSuffix(f.Name.Name, "_test")
		isTest := strings.HasSuffix(rel, "_test.go")
		declare := func(name string) {
			if pkg != "main" {
				if idx.pkgDecls[pkg] == nil {
					idx.pkgDecls[pkg] = map[string]bool{}
				}
				idx.pkgDecls[pkg][name] = true
			}
			if idx.dirDecls[dir] == nil {
				idx.dirDecls[dir] = map[string]bool{}
			}
			idx.dirDecls[dir][name] = true
		}
		member := func(typ, name string) {
			for _, k := range []string{pkg + "." + typ, dir + "." + typ} {
				if idx.pkgTypes[k] == nil {
					idx.pkgTypes[k] = map[string]bool{}
				}
				idx.pkgTypes[k][name] = true
			}
			if idx.types[typ] == nil {
				idx.types[typ] = map[string]bool{}
			}
			idx.types[typ][name] = true
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					declare(decl.Name.Name)
					if isTest {
						idx.tests[decl.Name.Name] = true
					}
					continue
				}
				if typ := recvType(decl.Recv.List[0].Type); typ != "" {
					member(typ, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							declare(n.Name)
						}
					case *ast.TypeSpec:
						name := spec.Name.Name
						declare(name)
						if idx.types[name] == nil {
							idx.types[name] = map[string]bool{}
						}
						var fields []*ast.Field
						switch tt := spec.Type.(type) {
						case *ast.StructType:
							fields = tt.Fields.List
						case *ast.InterfaceType:
							fields = tt.Methods.List
						}
						for _, fl := range fields {
							for _, n := range fl.Names {
								member(name, n.Name)
							}
							if len(fl.Names) == 0 {
								if e := recvType(fl.Type); e != "" {
									member(name, e)
									embeds[name] = append(embeds[name], e)
								}
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("parsing the module: %v", err)
	}
	// Promote the members of embedded types (one level is what the docs use; two are cheap).
	for range 2 {
		for typ, es := range embeds {
			for _, e := range es {
				for m := range idx.types[e] {
					idx.types[typ][m] = true
				}
			}
		}
	}
	return idx
}

// recvType returns the name of a receiver or embedded field type: T, *T, T[P], pkg.T.
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// citingDocs returns the Markdown files whose citations are checked: every .md file that
// scannedFiles returns (generated benchmark reports under docs/perf are skipped there).
func citingDocs(t *testing.T) []string {
	var out []string
	for _, f := range scannedFiles(t) {
		if strings.HasSuffix(f, ".md") {
			out = append(out, f)
		}
	}
	return out
}

// TestCitedNamesExist checks every citation (the rule above) of every document.
func TestCitedNamesExist(t *testing.T) {
	idx := loadRepoIndex(t)
	if !idx.tests["TestCitedNamesExist"] || !idx.pkgDecls["index"]["GlobalIndexer"] || len(idx.defaults) < 50 {
		t.Fatalf("the repository index looks wrong: %d tests, %d packages, %d settings", len(idx.tests), len(idx.pkgDecls), len(idx.defaults))
	}
	docs := citingDocs(t)
	if !slices.Contains(docs, "docs/spec/consumer.md") || !slices.Contains(docs, "README.md") {
		t.Fatalf("the walk missed known documents: %v", docs)
	}
	seen := map[string]bool{} // citationsFixedElsewhere entries that still occur
	for _, f := range docs {
		b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range checkCitations(f, string(b), idx) {
			if owner, ok := citationsFixedElsewhere[f+": "+v.msg]; ok {
				t.Logf("%s (left to %s)", v, owner)
				seen[f+": "+v.msg] = true
				continue
			}
			t.Error(v)
		}
	}
	t.Logf("citations checked: %v", idx.counts)
	for kind, least := range map[string]int{"test": 100, "path": 100, "link": 5, "ident": 100, "default": 10} {
		if idx.counts[kind] < least {
			t.Errorf("only %d %s citations checked (expected at least %d): the scan looks at the wrong text", idx.counts[kind], kind, least)
		}
	}
	for k, owner := range citationsFixedElsewhere {
		if seen[k] {
			continue
		}
		t.Errorf("%s no longer occurs: remove it from citationsFixedElsewhere (was left to %s)", k, owner)
	}
}

// settingDefaults maps every setting path to its default as processor help config prints it
// (config.Fields, which help config lists).
func settingDefaults(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range config.Fields() {
		out[f.Path] = f.Default
	}
	return out
}

// citationsFixedElsewhere are known false citations in files this change may not edit, keyed by
// "file: message" as TestCitedNamesExist reports them, with who fixes them. The test logs them
// instead of failing, and fails once one no longer occurs, so that the entry goes too.
var citationsFixedElsewhere = map[string]string{}

// TestCheckCitationsSample runs the citation checker on a small sample against a small index,
// one case of each kind, including the five false claims issue 26 found, so that a checker
// that stopped finding anything fails here.
func TestCheckCitationsSample(t *testing.T) {
	files := map[string]bool{"app": true, "app/indexer": true, "app/indexer/api.go": true, "deploy": true,
		"deploy/helm": true, "docs": true, "docs/design.md": true, "docs/perf": true, "docs/perf/e2e-a.json": true,
		"streams": true, "streams/lane.go": true, "ckf": true, "ckf/index": true, "ckf/index/table.go": true}
	idx := &repoIndex{
		exists: func(p string) bool { return files[p] },
		glob: func(pattern string) []string {
			var out []string
			for f := range files {
				if ok, _ := path.Match(pattern, f); ok {
					out = append(out, f)
				}
			}
			return out
		},
		dirEntries: func(dir string) map[string]bool {
			out := map[string]bool{}
			for f := range files {
				if path.Dir(f) == dir {
					out[path.Base(f)] = true
				}
			}
			return out
		},
		generated: []string{"testenv/kafka/libs"},
		baseNames: map[string]bool{"api.go": true, "lane.go": true, "table.go": true},
		tests:     map[string]bool{"TestBridgeLostHistoryIsLoud": true, "BenchmarkE2ERelay": true, "TestBehaviour01_Insert": true},
		pkgDecls: map[string]map[string]bool{
			"streams": {"DefaultRelayConfig": true, "Answerer": true},
			"index":   {"GlobalIndexer": true, "BenchmarkConsumerQuery128": true},
			"pool":    {"IngestionPool": true},
		},
		dirDecls: map[string]map[string]bool{"app/config": {"Indexer": true}},
		pkgTypes: map[string]map[string]bool{"app/config.Indexer": {"DomainID": true}},
		types: map[string]map[string]bool{
			"IngestionPool": {"SubmitDelta": true, "Close": true},
			"Indexer":       {"DomainID": true},
			"lane":          {"deadLetter": true},
		},
		defaults: map[string]string{"relay.publish_every_events": "64", "relay.publish_max_delay": "5ms",
			"indexer.freshness.max_record_lag": "10000", "http.listen": "127.0.0.1:8080", "bridge.resume": "true"},
		counts: map[string]int{},
	}
	sample := strings.Join([]string{
		"Good: `app/indexer/api.go`, `deploy/helm/...`, `docs/perf/e2e-*.json`, [design](../design.md), `api.go`.",                // 1
		"Good: TestBridgeLostHistoryIsLoud, `BenchmarkE2ERelay/window=64`, `BenchmarkE2E*`, `TestBehaviour01_…`.",                 // 2
		"Good: `streams.DefaultRelayConfig`, `*streams.Answerer`, `IngestionPool.Close()`, `index.ConsumerQuery128`.",             // 3
		"Good: `app/config.Indexer.DomainID`, `lane.deadLetter`, `testenv/kafka/libs/x.jar`, `KvEvent.data`, `zap.Logger`.",       // 4
		"Good: `relay.publish_every_events` events (default 64) or `relay.publish_max_delay` (5 ms).",                             // 5
		"Good: `indexer.freshness.max_record_lag` records (default 10,000); `http.listen`, default `127.0.0.1:8080`.",             // 6
		"Not citations: `relay.publish_every_events` (`--flag`), `bridge.resume`, default on, `report.json`, Tests.",              // 7
		"(a) closes after `relay.publish_every_events` events (default 1) or",                                                     // 8
		"(b) `IngestionPool.SubmitDeltas` and `IngestionPool.Backlog`.",                                                           // 9
		"(c) TestPoolSubmitDeltasSteadyStateAllocations and `streams/lane_slab.go`.",                                              // 10
		"(d) `ckf/index/table_linux.go`; in prose too: ckf/index/table_linux.go.",                                                 // 11
		"Others: `streams.Gone`, `index.IngestionPool`, `app/config.Indexer.Gone`, `lane.goneAway`, `gone.go`, `BenchmarkGone*`.", // 12
		"[missing](nowhere.md), `deploy/gone/...`, `docs/perf/*.csv`.",                                                            // 13
		"```",
		"go test -run TestInFence ./streams/ # `streams.InFence` is not checked in a fence",
		"```",
	}, "\n")
	var got []string
	for _, f := range checkCitations("docs/spec/sample.md", sample, idx) {
		got = append(got, f.String())
	}
	want := []string{
		"docs/spec/sample.md:8: quotes relay.publish_every_events's default as 1, but it is \"64\" (processor help config)",
		"docs/spec/sample.md:9: cites IngestionPool.SubmitDeltas, but no type IngestionPool of the module has a method or field SubmitDeltas",
		"docs/spec/sample.md:9: cites IngestionPool.Backlog, but no type IngestionPool of the module has a method or field Backlog",
		"docs/spec/sample.md:10: cites test TestPoolSubmitDeltasSteadyStateAllocations, which is no func of a *_test.go file",
		"docs/spec/sample.md:10: cites path streams/lane_slab.go, which does not exist",
		"docs/spec/sample.md:11: cites path ckf/index/table_linux.go, which does not exist",
		"docs/spec/sample.md:11: cites path ckf/index/table_linux.go, which does not exist",
		"docs/spec/sample.md:12: cites tests BenchmarkGone*, and no test func starts so",
		"docs/spec/sample.md:12: cites streams.Gone, but package streams declares no Gone",
		"docs/spec/sample.md:12: cites index.IngestionPool, but package index declares no IngestionPool",
		"docs/spec/sample.md:12: cites app/config.Indexer.Gone, but config.Indexer has no method or field Gone",
		"docs/spec/sample.md:12: cites lane.goneAway, but no type lane of the module has a method or field goneAway",
		"docs/spec/sample.md:12: cites file gone.go, and no file of the repository has that name",
		"docs/spec/sample.md:13: links to nowhere.md, which does not exist",
		"docs/spec/sample.md:13: cites path deploy/gone/..., which does not exist",
		"docs/spec/sample.md:13: cites path docs/perf/*.csv, which does not exist",
		"docs/spec/sample.md:15: cites test TestInFence, which is no func of a *_test.go file",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n  got  %q\n  want %q", got, want)
	}
}
