package kinds

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// No code outside a kind's own packages names the kind: its name, its
// shorthand option, its legacy label and its probe's name (the registry's
// words for it) appear, in any case, as no identifier and as no word of a
// string literal in a non-test file of the module, but in the kind's
// package under internal/engine, the client packages only it imports
// under internal/upstreams, the registration files (of the kinds and of
// their fakes), bench/ and examples/
// (programs that drive the fakes). Comments do not count; struct tags do
// (the shorthands' JSON fields are read and written through the registry,
// config's Settings.Shorthands).
func TestNoKindNamedOutsideItsPackages(t *testing.T) {
	root := moduleRoot(t)
	mod := modulePath(t, root)
	words := registryWords()
	exempt := exemptDirs(t, root, mod)
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor" || exempt[rel]) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || registrationFiles[rel] {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, hit := range kindsNamedIn(f, words) {
			t.Errorf("%s: names a kind (%s): ask the registry (internal/engine/kinds) instead", fset.Position(hit.pos), hit.text)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// registrationFiles are the files that list the kinds and their fakes.
var registrationFiles = map[string]bool{"internal/engine/kinds/kinds.go": true, "internal/engine/kinds/kindstest/fakes.go": true}

// registryWords are the words that name a kind, lower case.
func registryWords() []string {
	seen := map[string]bool{}
	var ws []string
	for _, k := range All {
		for _, w := range []string{k.Name, k.Shorthand, k.Label, k.Probe} {
			if w = strings.ToLower(w); w != "" && !seen[w] {
				seen[w] = true
				ws = append(ws, w)
			}
		}
	}
	return ws
}

// exemptDirs are the directories (slash-separated, relative to the
// module's root) where kinds are named: each kind's package, the client
// packages that only one kind imports (and their subdirectories: its
// fakes), bench and examples.
func exemptDirs(t *testing.T, root, mod string) map[string]bool {
	exempt := map[string]bool{"bench": true, "examples": true}
	importers := map[string]int{}
	for _, k := range All {
		dir := "internal/engine/" + k.Name
		exempt[dir] = true
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatalf("kind %s has no package %s: %v", k.Name, dir, err)
		}
		imports := map[string]bool{}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, dir, e.Name()), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, is := range f.Imports {
				p, _ := strconv.Unquote(is.Path.Value)
				if rel, ok := strings.CutPrefix(p, mod+"/"); ok && strings.HasPrefix(rel, "internal/upstreams/") {
					imports[rel] = true
				}
			}
		}
		for p := range imports {
			importers[p]++
		}
	}
	for p, n := range importers {
		if n == 1 {
			exempt[p] = true
		}
	}
	return exempt
}

// hit is a kind named in code.
type hit struct {
	pos  token.Pos
	text string
}

// kindsNamedIn finds words in f's identifiers and string literals,
// struct tags included.
func kindsNamedIn(f *ast.File, words []string) []hit {
	res := make([]*regexp.Regexp, len(words))
	for i, w := range words {
		res[i] = regexp.MustCompile(`(?i)(^|[^a-z0-9_])` + regexp.QuoteMeta(w) + `($|[^a-z0-9_])`)
	}
	var hits []hit
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			for _, w := range words {
				if strings.EqualFold(n.Name, w) {
					hits = append(hits, hit{n.Pos(), "identifier " + n.Name})
				}
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(n.Value)
			if err != nil {
				v = n.Value
			}
			for _, re := range res {
				if re.MatchString(v) {
					hits = append(hits, hit{n.Pos(), "string " + n.Value})
					break
				}
			}
		}
		return true
	})
	return hits
}

// moduleRoot is the directory of the module's go.mod.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// modulePath is the module's path, from go.mod.
func modulePath(t *testing.T, root string) string {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(m)
		}
	}
	t.Fatal("go.mod names no module")
	return ""
}
