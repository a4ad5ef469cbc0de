package realollama

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ollama/ollama/fs/ggml"
)

func TestModelFilesDecode(t *testing.T) {
	dir := t.TempDir()
	shallowBig := Big
	shallowBig.Layers = 2 // Big's shape, cheaper to hash
	for name, m := range map[string]Model{"tiny": Tiny, "big": shallowBig} {
		f, err := m.Write(filepath.Join(dir, name+".gguf"))
		if err != nil {
			t.Fatal(err)
		}
		r, err := os.Open(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		g, err := ggml.Decode(r, -1)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		kv := g.KV()
		if kv.Architecture() != "llama" || kv.BlockCount() != uint64(m.Layers) || kv.EmbeddingLength() != uint64(m.Embd) {
			t.Errorf("%s: arch %s, %d blocks, embedding %d", name, kv.Architecture(), kv.BlockCount(), kv.EmbeddingLength())
		}
		// llama.cpp aborts on a vocabulary with a repeated token.
		tokens := kv.Strings("tokenizer.ggml.tokens")
		if want := firstWord + m.Words; len(tokens) != want {
			t.Errorf("%s: %d tokens, want %d", name, len(tokens), want)
		}
		sorted := slices.Clone(tokens)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) != len(tokens) {
			t.Errorf("%s: repeated tokens", name)
		}
		if tokens[eos] != "</s>" || tokens[3+0x0A] != "<0x0A>" {
			t.Errorf("%s: tokens %q, %q", name, tokens[eos], tokens[3+0x0A])
		}
		if n := len(g.Tensors().Items()); n != 3+9*m.Layers {
			t.Errorf("%s: %d tensors, want %d", name, n, 3+9*m.Layers)
		}
		if f.Digest == "" || f.Size < int64(g.Tensors().Offset) {
			t.Errorf("%s: %+v", name, f)
		}
	}
}
