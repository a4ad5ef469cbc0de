package turnstile

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// fragmentMark, on the line just before a ```caddyfile fence, marks a block
// that is deliberately not a whole Caddyfile (a syntax summary, lines that
// go inside a site or a gpu_turnstile block); docs/development.md says so.
const fragmentMark = "<!-- fragment"

// docBlock is one fenced caddyfile block of a Markdown file.
type docBlock struct {
	fence    int // the line of its opening fence
	text     string
	fragment bool
}

// caddyfileBlocks reads the ```caddyfile blocks of the Markdown file f.
func caddyfileBlocks(f string) ([]docBlock, error) {
	file, err := os.Open(f)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var blocks []docBlock
	var cur *docBlock
	var prev string
	sc := bufio.NewScanner(file)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.text += sc.Text() + "\n"
		case strings.HasPrefix(line, "```"):
			info := strings.Fields(strings.TrimPrefix(line, "```"))
			if len(info) > 0 && strings.EqualFold(info[0], "caddyfile") {
				cur = &docBlock{fence: n, fragment: strings.HasPrefix(prev, fragmentMark)}
			}
		}
		prev = line
	}
	return blocks, sc.Err()
}

// checkDocCaddyfiles adapts every whole caddyfile block of f, counting
// them; each failure names f and the line, as the adapter saw it.
func checkDocCaddyfiles(f string) (adapted int, failures []error, err error) {
	blocks, err := caddyfileBlocks(f)
	if err != nil {
		return 0, nil, err
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	for _, b := range blocks {
		if b.fragment {
			continue
		}
		adapted++
		// Blank lines before the block give its lines the file's numbers.
		body := strings.Repeat("\n", b.fence) + b.text
		if _, _, err := adapter.Adapt([]byte(body), map[string]any{"filename": f}); err != nil {
			failures = append(failures, fmt.Errorf("%s:%d: the caddyfile block does not adapt (a deliberate fragment needs %q on the line before its fence): %v", f, b.fence, fragmentMark+" -->", err))
		}
	}
	return adapted, failures, nil
}

// Every caddyfile block of the README and the docs is a whole Caddyfile
// that adapts, or is marked as a fragment.
func TestDocsCaddyfilesAdapt(t *testing.T) {
	files, _ := filepath.Glob("docs/*.md")
	total := 0
	for _, f := range append(files, "README.md") {
		n, failures, err := checkDocCaddyfiles(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range failures {
			t.Error(e)
		}
		total += n
	}
	if total < 10 {
		t.Errorf("only %d whole caddyfile blocks found in README.md and docs/", total)
	}
}

// The check fails on a broken block unless it is marked as a fragment.
func TestDocsCheckFindsABrokenBlock(t *testing.T) {
	f := filepath.Join(t.TempDir(), "page.md")
	page := "# A page\n\n```caddyfile\n:8080 {\n\trespond ok\n}\n```\n\n" +
		"<!-- fragment: lines of a site -->\n```caddyfile\ngpu_turnstile @x passthrough\n```\n\n" +
		"```caddyfile\n:8080 {\n\tgpu_turnstile {\n\t\tno_such_option 1\n\t}\n}\n```\n"
	if err := os.WriteFile(f, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	n, failures, err := checkDocCaddyfiles(f)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || len(failures) != 1 || !strings.Contains(failures[0].Error(), "page.md:17") ||
		!strings.Contains(failures[0].Error(), "no_such_option") {
		t.Fatalf("adapted %d blocks, failures %v; want 2 and one at page.md:17 naming no_such_option", n, failures)
	}
}

// docs/configuration.md names every JSON field of the app and the handler
// modules (their Caddyfile subdirectives have the same names).
func TestDocsListEveryModuleField(t *testing.T) {
	b, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []any{App{}, Handler{}, StatusHandler{}, HoldsHandler{}} {
		typ := reflect.TypeOf(m)
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if typ.Field(i).IsExported() && name != "" && name != "-" && !strings.Contains(string(b), `"`+name+`"`) {
				t.Errorf("docs/configuration.md does not name %s's JSON field %q", typ.Name(), name)
			}
		}
	}
}
