package realollama

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"

	"github.com/ollama/ollama/fs/ggml"
)

// Model describes a llama-architecture model with random (or zero)
// weights, small enough to write in a moment and load on a CPU. Nothing it
// generates is meaningful text; it exercises loading, generation, the KV
// cache and unloading exactly as a real model does.
type Model struct {
	Layers  int // transformer blocks
	Embd    int // embedding length
	FF      int // feed-forward length
	Heads   int // attention heads (Embd must be a multiple)
	HeadsKV int // key/value heads (Heads must be a multiple); 0: Heads
	Words   int // vocabulary beyond <unk>, <s>, </s> and the 256 byte tokens
	Context int // context_length; 0: 2048
	// NumCtx is the num_ctx parameter the model is registered with (the
	// KV cache Ollama allocates at each load); 0 leaves Ollama's default.
	NumCtx int
	// Threads is the num_thread parameter it is registered with; 0 leaves
	// Ollama's default (one per core).
	Threads int
	// Kind is the type of the two-dimensional weights: ggml.TensorTypeF32,
	// TensorTypeF16, TensorTypeQ8_0 or TensorTypeQ4_0. Norms are F32.
	Kind ggml.TensorType
	// Zero leaves the two-dimensional weights zero: the file is written
	// sparse, instantly, whatever its size. Norms are still ones.
	Zero bool
	Seed uint64
}

// Tiny is a model of 1 MB that loads in ~0.3 s on a CPU and generates
// ~1,800 tokens/s on one thread. One thread: ggml's threads meet at
// spinning barriers, and on a machine whose cores are busy with other work
// two threads generate up to ten times slower, in bursts.
var Tiny = Model{Layers: 2, Embd: 64, FF: 128, Heads: 4, Words: 1000, Kind: ggml.TensorTypeF32, Threads: 1, Seed: 1}

// Big is a model that takes seconds to load on a CPU (2-5 s on two cores):
// 1.3 GB of zero Q4_0 weights, a sparse file written instantly, and a
// 16k-token KV cache of 1.1 GB that Ollama allocates and clears at each
// load. Loaded, it holds ~2.4 GB.
var Big = Model{Layers: 24, Embd: 3072, FF: 8192, Heads: 16, HeadsKV: 4, Words: 1000, Context: 16384, NumCtx: 16384, Kind: ggml.TensorTypeQ4_0, Zero: true}

// eos is the id of </s>; firstWord the first token after the special
// and byte tokens.
const (
	eos       = 2
	firstWord = 3 + 256
)

// vocab returns the SPM vocabulary: <unk>, <s>, </s>, the 256 byte
// tokens llama.cpp's byte fallback needs (its newline token is <0x0A>),
// then Words distinct word pieces. llama.cpp aborts the whole server on a
// vocabulary with two equal tokens, so every string is unique.
func (m Model) vocab() (tokens []string, scores []float32, types []int32) {
	const (
		normal  = 1
		unknown = 2
		control = 3
		byteTok = 6
	)
	add := func(s string, score float32, typ int32) {
		tokens = append(tokens, s)
		scores = append(scores, score)
		types = append(types, typ)
	}
	add("<unk>", 0, unknown)
	add("<s>", 0, control)
	add("</s>", 0, control)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, byteTok)
	}
	letters := "abcdefghijklmnopqrstuvwxyz"
	for i := range m.Words {
		// ▁a ▁b ... ▁z ▁ba ▁bb ...: short, distinct, printable.
		w := ""
		for n := i; ; n = n/len(letters) - 1 {
			w = string(letters[n%len(letters)]) + w
			if n < len(letters) {
				break
			}
		}
		add("\u2581"+w, -float32(i+1), normal)
	}
	return tokens, scores, types
}

func (m Model) withDefaults() Model {
	if m.HeadsKV == 0 {
		m.HeadsKV = m.Heads
	}
	if m.Context == 0 {
		m.Context = 2048
	}
	return m
}

// File is a model written to disk.
type File struct {
	Path    string
	Digest  string // "sha256:<hex>", the name of its blob in Ollama
	NumCtx  int    // the num_ctx to register it with
	Threads int    // the num_thread to register it with
	Size    int64
}

// Write writes the model as a GGUF file at path.
func (m Model) Write(path string) (File, error) {
	digest, err := m.write(path)
	if err != nil {
		return File{}, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return File{}, err
	}
	return File{Path: path, Digest: digest, NumCtx: m.NumCtx, Threads: m.Threads, Size: fi.Size()}, nil
}

func (m Model) write(path string) (digest string, err error) {
	m = m.withDefaults()
	if m.Heads == 0 || m.Embd%m.Heads != 0 || m.Heads%m.HeadsKV != 0 {
		return "", fmt.Errorf("realollama: %d heads, %d kv heads do not divide embedding length %d", m.Heads, m.HeadsKV, m.Embd)
	}
	tokens, scores, types := m.vocab()
	kv, err := m.metadata(tokens, scores, types)
	if err != nil {
		return "", err
	}
	return writeHashed(path, kv, m.tensors(len(tokens)))
}

// metadata is the GGUF file's key-value section: a llama architecture of
// the model's sizes, and its vocabulary.
func (m Model) metadata(tokens []string, scores []float32, types []int32) (ggml.KV, error) {
	fileType := map[ggml.TensorType]ggml.FileType{
		ggml.TensorTypeF32:  ggml.FileTypeF32,
		ggml.TensorTypeF16:  ggml.FileTypeF16,
		ggml.TensorTypeQ8_0: ggml.FileTypeQ8_0,
		ggml.TensorTypeQ4_0: ggml.FileType(2), // MOSTLY_Q4_0, unexported in fs/ggml
	}[m.Kind]
	if fileType == 0 && m.Kind != ggml.TensorTypeF32 {
		return nil, fmt.Errorf("realollama: unsupported weight type %v", m.Kind)
	}
	return ggml.KV{
		"general.architecture":                   "llama",
		"general.name":                           "random",
		"general.file_type":                      fileType,
		"llama.context_length":                   uint32(m.Context),
		"llama.embedding_length":                 uint32(m.Embd),
		"llama.block_count":                      uint32(m.Layers),
		"llama.feed_forward_length":              uint32(m.FF),
		"llama.attention.head_count":             uint32(m.Heads),
		"llama.attention.head_count_kv":          uint32(m.HeadsKV),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"llama.rope.dimension_count":             uint32(m.Embd / m.Heads),
		"llama.rope.freq_base":                   float32(10000),
		"llama.vocab_size":                       uint32(len(tokens)),
		"tokenizer.ggml.model":                   "llama",
		"tokenizer.ggml.tokens":                  tokens,
		"tokenizer.ggml.scores":                  scores,
		"tokenizer.ggml.token_type":              types,
		"tokenizer.ggml.unknown_token_id":        uint32(0),
		"tokenizer.ggml.bos_token_id":            uint32(1),
		"tokenizer.ggml.eos_token_id":            uint32(eos),
		"tokenizer.ggml.add_bos_token":           true,
		"tokenizer.ggml.add_eos_token":           false,
	}, nil
}

// tensors are the model's weights for a vocabulary of vocab tokens, each
// written from its own seed when the file is.
func (m Model) tensors(vocab int) []*ggml.Tensor {
	kvDim := m.Embd / m.Heads * m.HeadsKV
	seed := m.Seed
	var ts []*ggml.Tensor
	norm := func(name string, n int) {
		ts = append(ts, &ggml.Tensor{Name: name, Kind: uint32(ggml.TensorTypeF32), Shape: []uint64{uint64(n)}, WriterTo: ones{n}})
	}
	weight := func(name string, cols, rows int, first func(row int) float32) {
		seed++
		t := &ggml.Tensor{Name: name, Kind: uint32(m.Kind), Shape: []uint64{uint64(cols), uint64(rows)}}
		t.WriterTo = weights{kind: m.Kind, elems: cols * rows, cols: cols, size: int64(t.Size()), zero: m.Zero, seed: seed, first: first}
		ts = append(ts, t)
	}
	// With F32 weights, generations run to num_predict and are plain
	// words: every token's embedding has a large first component, which
	// survives the small random layers and the final norm, and the output
	// rows of the special and byte tokens turn it into logits so negative
	// that they are never sampled (</s> would end a generation early; a
	// lone byte is invalid UTF-8, which Ollama holds back, rescanning it at
	// each token).
	weight("token_embd.weight", m.Embd, vocab, func(int) float32 { return 1 })
	norm("output_norm.weight", m.Embd)
	weight("output.weight", m.Embd, vocab, func(row int) float32 {
		if row < firstWord {
			return -100
		}
		return 0
	})
	for i := range m.Layers {
		blk := func(s string) string { return fmt.Sprintf("blk.%d.%s", i, s) }
		norm(blk("attn_norm.weight"), m.Embd)
		weight(blk("attn_q.weight"), m.Embd, m.Embd, nil)
		weight(blk("attn_k.weight"), m.Embd, kvDim, nil)
		weight(blk("attn_v.weight"), m.Embd, kvDim, nil)
		weight(blk("attn_output.weight"), m.Embd, m.Embd, nil)
		norm(blk("ffn_norm.weight"), m.Embd)
		weight(blk("ffn_gate.weight"), m.Embd, m.FF, nil)
		weight(blk("ffn_up.weight"), m.Embd, m.FF, nil)
		weight(blk("ffn_down.weight"), m.FF, m.Embd, nil)
	}
	return ts
}

// writeHashed writes a GGUF file at path and returns its digest, the name
// of its blob in Ollama.
func writeHashed(path string, kv ggml.KV, ts []*ggml.Tensor) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := ggml.WriteGGUF(f, kv, ts); err != nil {
		return "", fmt.Errorf("realollama: writing %s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), f.Close()
}

// ones writes n float32 ones (an RMS norm that changes nothing).
type ones struct{ n int }

func (o ones) WriteTo(w io.Writer) (int64, error) {
	b := make([]byte, 4*o.n)
	for i := range o.n {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(1))
	}
	n, err := w.Write(b)
	return int64(n), err
}

// weights writes one tensor's data: small random values from a cheap
// generator, or nothing but its last byte when zero (the rest stays a hole
// in a sparse file, which reads as zeros).
type weights struct {
	kind  ggml.TensorType
	elems int
	cols  int // elements in a row (ne0)
	size  int64
	zero  bool
	seed  uint64
	// first, if set, gives each row's first element (F32 only).
	first func(row int) float32
}

func (t weights) WriteTo(w io.Writer) (int64, error) {
	if t.zero {
		wa, ok := w.(io.WriterAt)
		if !ok {
			return 0, fmt.Errorf("realollama: sparse tensor needs an io.WriterAt, got %T", w)
		}
		n, err := wa.WriteAt([]byte{0}, t.size-1)
		return int64(n), err
	}
	rng := rand.New(rand.NewPCG(t.seed, t.seed^0x9e3779b97f4a7c15))
	const chunk = 1 << 16 // elements per write, a multiple of the 32-element blocks
	var written int64
	buf := make([]byte, 0, chunk*4)
	for done := 0; done < t.elems; done += chunk {
		n := min(chunk, t.elems-done)
		buf = buf[:0]
		switch t.kind {
		case ggml.TensorTypeF32:
			for i := done; i < done+n; i++ {
				v := (rng.Float32() - 0.5) * 0.1
				if t.first != nil && i%t.cols == 0 {
					v = t.first(i / t.cols)
				}
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
			}
		case ggml.TensorTypeF16:
			for range n {
				buf = binary.LittleEndian.AppendUint16(buf, smallHalf(rng))
			}
		case ggml.TensorTypeQ8_0:
			for range n / 32 {
				buf = binary.LittleEndian.AppendUint16(buf, 0x2000) // scale 2^-7
				for range 32 {
					buf = append(buf, byte(rng.IntN(16)-8))
				}
			}
		case ggml.TensorTypeQ4_0:
			for range n / 32 {
				buf = binary.LittleEndian.AppendUint16(buf, 0x2000)
				for range 16 {
					buf = append(buf, byte(rng.Uint32()))
				}
			}
		default:
			return written, fmt.Errorf("realollama: unsupported weight type %v", t.kind)
		}
		k, err := w.Write(buf)
		written += int64(k)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// smallHalf returns a random float16 below 2^-4 in magnitude.
func smallHalf(rng *rand.Rand) uint16 {
	sign := uint16(rng.IntN(2)) << 15
	exp := uint16(8+rng.IntN(3)) << 10 // 2^-7 .. 2^-5, times 1.mantissa
	return sign | exp | uint16(rng.IntN(1024))
}
