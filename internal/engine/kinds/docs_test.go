package kinds

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
)

// The docs' lists of kinds are the registry's: the table of
// docs/engines.md has one row per kind, in the registry's order, and every
// sentence that lists kinds lists them all.
func TestDocsListEveryKind(t *testing.T) {
	root := moduleRoot(t)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(b)), " ")
	}

	var rows []string
	_, table, _ := strings.Cut(mustRead(t, filepath.Join(root, "docs/engines.md")), "## Each kind")
	for line := range strings.Lines(table) {
		if strings.HasPrefix(line, "## ") {
			break
		}
		if name, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ = strings.Cut(name, "`")
			rows = append(rows, name)
		}
	}
	var names []string
	for _, k := range All {
		names = append(names, k.Name)
	}
	if strings.Join(rows, " ") != strings.Join(names, " ") {
		t.Errorf("docs/engines.md's table of kinds has rows %v, the registry %v", rows, names)
	}

	llm, image := Of(engine.ClassLLM), Of(engine.ClassImage)
	var warm, probes []*engine.Kind
	for _, k := range All {
		if k.Warms {
			warm = append(warm, k)
		}
		if k.Probe != "" {
			probes = append(probes, k)
		}
	}
	var titles []string
	for _, k := range All {
		titles = append(titles, k.Title)
	}
	for _, want := range []struct{ file, text string }{
		{"docs/configuration.md", "LLM kinds: " + codes(llm, ", ", ", ") + "; image kinds: " + codes(image, ", ", ", ")},
		{"docs/configuration.md", "its kind (" + codes(All, ", ", ", ") + ")"},
		{"docs/configuration.md", "on the first " + codes(warm, " or ", " or ") + " engine"},
		{"docs/configuration.md", "| `vram_probe` | `" + probes[0].Probe + "` |"},
		{"docs/configuration.md", "vram_probe " + probeList(probes) + "|nvidia-smi [GPU_INDEX]"},
		{"docs/install.md", "one LLM kind, " + codes(llm, ", ", " or ") + ", and one image kind, " + codes(image, ", ", " or ")},
		{"README.md", strings.Join(titles, ", ")},
	} {
		if !strings.Contains(read(want.file), want.text) {
			t.Errorf("%s does not list the registry's kinds as %q", want.file, want.text)
		}
	}
}

// codes lists ks' names in backquotes, sep between them and last before
// the last one.
func codes(ks []*engine.Kind, sep, last string) string {
	var b strings.Builder
	for i, k := range ks {
		switch {
		case i == 0:
		case i == len(ks)-1:
			b.WriteString(last)
		default:
			b.WriteString(sep)
		}
		b.WriteString("`" + k.Name + "`")
	}
	return b.String()
}

// probeList is vram_probe's engine probes, as its syntax lists them.
func probeList(ks []*engine.Kind) string {
	var ps []string
	for _, k := range ks {
		ps = append(ps, k.Probe)
	}
	return strings.Join(ps, "|")
}

// mustRead is the file's text.
func mustRead(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
