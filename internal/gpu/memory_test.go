package gpu

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

const gib = int64(1) << 30

// memFixture is a fixture with a 24 GiB card read through the fake
// nvidia-smi, and memory-aware admission on.
func memFixture(t *testing.T, sizes map[string]int64, edit func(*MemoryConfig)) *fixture {
	t.Helper()
	return newMemFixture(t, gputest.New(), sizes, edit)
}

func newMemFixture(t *testing.T, card *gputest.GPU, sizes map[string]int64, edit func(*MemoryConfig)) *fixture {
	t.Helper()
	return newMemFixtureWith(t, card, sizes, comfytest.Options{JobDuration: 50 * time.Millisecond}, edit)
}

// newMemFixtureWith is newMemFixture with the fake ComfyUI shaped by
// copts.
func newMemFixtureWith(t *testing.T, card *gputest.GPU, sizes map[string]int64, copts comfytest.Options, edit func(*MemoryConfig)) *fixture {
	t.Helper()
	card.SetMemory(24 * gib)
	smi := card.FakeSMI(t.TempDir())
	f := newFixtureOn(t, card, ollamatest.Options{ModelSizes: sizes, Models: modelsOf(sizes)}, copts, func(c *Config) {
		c.Memory = &MemoryConfig{SMIPath: smi, Poll: 100 * time.Millisecond, Models: map[string]int64{}}
		if edit != nil {
			edit(c.Memory)
		}
	})
	t.Cleanup(func() {
		if o := card.OverCommits(); len(o) > 0 {
			t.Errorf("card over-committed: %v", o)
		}
	})
	f.waitState(t, "a first reading", func(st Status) bool { return st.VRAM != nil && !st.VRAM.Stale })
	return f
}

// admit admits model, holding a shared place first as the handler does.
func (f *fixture) admit(t *testing.T, model string, wait time.Duration, reject bool) (*Admission, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	deadline := time.Now().Add(wait)
	if _, err := f.g.WaitLLM(ctx, deadline, nil); err != nil {
		return nil, err
	}
	return f.g.AdmitModel(ctx, model, deadline, reject)
}

// done ends an admitted request as a 200 would.
func (f *fixture) done(a *Admission) {
	a.Done(200, nil)
	f.g.ReleaseLLM()
}

// A foreign process using most of the card lets a model that fits
// through, and a model that does not waits, shown waiting_for vram, until
// the foreign use drops.
func TestMemoryAdmitsWhatFitsAndWaitsForTheRest(t *testing.T) {
	t.Parallel()
	f := memFixture(t, nil, func(m *MemoryConfig) {
		m.Models["small"] = 4 * gib
		m.Models["large"] = 12 * gib
		m.Reserve = 1 * gib
	})
	game := f.card.Foreign("game", 4242, 16*gib)
	f.waitState(t, "the game's memory read", func(st Status) bool { return st.VRAM.FreeBytes == 8*gib })

	a, err := f.admit(t, "small", time.Second, false)
	if err != nil {
		t.Fatalf("small model, 4 GiB of 7 GiB free beyond the reserve: %v", err)
	}
	f.done(a)

	if _, err := f.admit(t, "large", time.Second, true); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("large model in reject mode: %v, want ErrNoMemory", err)
	}
	if st := f.g.Status(); st.LLMInflight != 0 {
		t.Fatalf("a refused request kept its shared place: %+v", st)
	}
	got := make(chan error, 1)
	go func() {
		a, err := f.admit(t, "large", 10*time.Second, false)
		if err == nil {
			f.done(a)
		}
		got <- err
	}()
	f.waitState(t, "the large model waiting for memory", func(st Status) bool {
		return len(st.Waiters) == 1 && st.Waiters[0].WaitingFor == "vram" && st.LLMInflight == 0
	})
	select {
	case err := <-got:
		t.Fatalf("admitted while the game holds the card: %v", err)
	default:
	}
	game()
	if err := <-got; err != nil {
		t.Fatalf("large model once the game has gone: %v", err)
	}
}

// Two models not loaded, admitted on one reading, both count: the second
// is refused until the first is seen loaded and the card read again.
func TestMemoryCountsAdmittedLoadsNotYetSeen(t *testing.T) {
	t.Parallel()
	f := memFixture(t, nil, func(m *MemoryConfig) {
		m.Models["a"] = 14 * gib
		m.Models["b"] = 14 * gib
	})
	a, err := f.admit(t, "a", time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.admit(t, "b", time.Second, true); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("second model on the same reading: %v, want ErrNoMemory (24 GiB card, 14 GiB pending)", err)
	}
	if st := f.g.Status(); st.VRAM.PendingBytes != 14*gib {
		t.Fatalf("pending %d, want 14 GiB", st.VRAM.PendingBytes)
	}
	f.done(a)
	f.waitState(t, "the pending load dropped", func(st Status) bool { return st.VRAM.PendingBytes == 0 })
}

// A loaded model is admitted without the check, and an idle model of
// Ollama (which evicts its own) counts as room for another.
func TestMemoryLoadedAndEvictable(t *testing.T) {
	t.Parallel()
	f := memFixture(t, map[string]int64{"big": 18 * gib}, func(m *MemoryConfig) {
		m.Models["other"] = 10 * gib
	})
	f.loadModel(t, "big")
	f.waitState(t, "big listed as loaded", func(st Status) bool {
		return len(st.VRAM.Loaded) == 1 && st.VRAM.Loaded[0].Bytes == 18*gib && st.VRAM.FreeBytes == 6*gib
	})
	game := f.card.Foreign("game", 4242, 6*gib)
	defer game()
	f.waitState(t, "the card full", func(st Status) bool { return st.VRAM.FreeBytes == 0 })

	a, err := f.admit(t, "big", time.Second, true)
	if err != nil {
		t.Fatalf("a loaded model: %v", err)
	}
	// big is busy now: it is not evictable.
	if _, err := f.admit(t, "other", time.Second, true); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("another model while big runs: %v, want ErrNoMemory", err)
	}
	f.done(a)
	b, err := f.admit(t, "other", time.Second, true)
	if err != nil {
		t.Fatalf("another model while big idles in Ollama: %v", err)
	}
	f.done(b)
}

// Footprints are learned from Ollama's report of a model wholly on the
// GPU, and not from one partly offloaded.
func TestMemoryLearnsFromOllama(t *testing.T) {
	t.Parallel()
	f := memFixture(t, map[string]int64{"m": 6 * gib, "huge": 30 * gib}, nil)
	a, err := f.admit(t, "m", time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	f.loadModel(t, "m")
	f.done(a)
	st := f.waitState(t, "m learned", func(st Status) bool { return len(st.VRAM.Footprints) == 1 })
	if fp := st.VRAM.Footprints[0]; fp.Model != "m" || fp.Bytes != 6*gib || fp.Source != "learned" || fp.Engine != "ollama" {
		t.Fatalf("footprint %+v", fp)
	}
	f.loadModel(t, "huge") // partly offloaded: 30 GiB on a 24 GiB card
	f.waitState(t, "huge loaded", func(st Status) bool {
		for _, l := range st.VRAM.Loaded {
			if l.Model == "huge" {
				return true
			}
		}
		return false
	})
	for _, fp := range f.g.Status().VRAM.Footprints {
		if fp.Model == "huge" {
			t.Fatalf("learned %+v from a model partly offloaded", fp)
		}
	}
}

// An engine's answer that it ran out of memory forgets the footprint: the
// model then runs alone, admitted only when the card is free for it.
func TestMemoryOutOfMemoryRunsTheModelAlone(t *testing.T) {
	t.Parallel()
	f := memFixture(t, nil, func(m *MemoryConfig) { m.Models["x"] = 2 * gib })
	a, err := f.admit(t, "m", time.Second, true)
	if err != nil {
		t.Fatal(err)
	}
	a.Done(500, []byte(`{"error":"llama runner process has terminated: cudaMalloc failed: out of memory"}`))
	f.g.ReleaseLLM()
	st := f.g.Status()
	if len(st.VRAM.Footprints) != 2 || !st.VRAM.Footprints[1].Alone || st.VRAM.Footprints[1].Bytes != 24*gib {
		t.Fatalf("footprints %+v, want m alone with the whole card", st.VRAM.Footprints)
	}
	game := f.card.Foreign("game", 4242, 1*gib)
	f.waitState(t, "the game read", func(st Status) bool { return st.VRAM.FreeBytes == 23*gib })
	if _, err := f.admit(t, "m", time.Second, true); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("m beside a game: %v, want ErrNoMemory", err)
	}
	game()
	f.waitState(t, "the card free", func(st Status) bool { return st.VRAM.FreeBytes == 24*gib })
	b, err := f.admit(t, "m", time.Second, true)
	if err != nil {
		t.Fatalf("m alone: %v", err)
	}
	f.done(b)
}

// With vram_stale admit, a stale reading falls back to the whole-card
// rules: a model that does not fit is admitted.
func TestMemoryStaleReadingAdmits(t *testing.T) {
	t.Parallel()
	f := memFixture(t, nil, func(m *MemoryConfig) { m.Models["large"] = 20 * gib; m.StaleAdmits = true })
	game := f.card.Foreign("game", 4242, 20*gib)
	defer game()
	f.waitState(t, "the game read", func(st Status) bool { return st.VRAM.FreeBytes == 4*gib })
	if _, err := f.admit(t, "large", time.Second, true); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("large: %v, want ErrNoMemory", err)
	}
	f.card.SetSMIStalled(true)
	f.waitState(t, "the reading stale", func(st Status) bool { return st.VRAM.Stale })
	a, err := f.admit(t, "large", time.Second, true)
	if err != nil {
		t.Fatalf("large with a stale reading: %v, want the whole-card rules (admitted)", err)
	}
	a.Done(200, nil)
	f.g.ReleaseLLM()
	f.card.SetSMIStalled(false)
	f.waitState(t, "fresh again", func(st Status) bool { return !st.VRAM.Stale })
}

// By default (vram_stale wait) a stale reading admits no model that is not
// loaded: in reject mode the busy answer says why; a request that may
// wait is shown waiting_for vram_reading and goes once a fresh reading
// shows room. A loaded model needs no reading.
func TestMemoryStaleReadingWaits(t *testing.T) {
	t.Parallel()
	f := memFixture(t, map[string]int64{"small": 2 * gib}, func(m *MemoryConfig) { m.Models["medium"] = 4 * gib })
	f.loadModel(t, "small")
	f.waitState(t, "small listed as loaded", func(st Status) bool { return len(st.VRAM.Loaded) == 1 })
	f.card.SetSMIStalled(true)
	f.waitState(t, "the reading stale", func(st Status) bool { return st.VRAM.Stale })
	if _, err := f.admit(t, "medium", time.Second, true); !errors.Is(err, ErrNoMemory) {
		t.Fatalf("medium in reject mode with a stale reading: %v, want ErrNoMemory", err)
	}
	if cause := f.g.memoryCause("medium"); !strings.Contains(cause, "no fresh reading") {
		t.Fatalf("cause %q, want it to say the reading is stale", cause)
	}
	loaded, err := f.admit(t, "small", time.Second, true)
	if err != nil {
		t.Fatalf("small, loaded, with a stale reading: %v, want admitted", err)
	}
	f.done(loaded)
	type result struct {
		a   *Admission
		err error
	}
	got := make(chan result, 1)
	go func() {
		a, err := f.admit(t, "medium", 20*time.Second, false)
		got <- result{a, err}
	}()
	f.waitState(t, "medium waiting for a reading", func(st Status) bool {
		return len(st.Waiters) == 1 && st.Waiters[0].WaitingFor == "vram_reading"
	})
	select {
	case r := <-got:
		t.Fatalf("medium admitted while the reading is stale: %v", r.err)
	default:
	}
	f.card.SetSMIStalled(false)
	r := <-got
	if r.err != nil {
		t.Fatalf("medium after a fresh reading: %v", r.err)
	}
	f.done(r.a)
}

// footprintStore is a FootprintStore in memory.
type footprintStore struct {
	mu    sync.Mutex
	data  map[string][]byte
	saved chan struct{} // told of each save
}

func (s *footprintStore) LoadFootprints(_ context.Context, card string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[card], nil
}

func (s *footprintStore) SaveFootprints(_ context.Context, card string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[card] = data
	select {
	case s.saved <- struct{}{}:
	default:
	}
	return nil
}

// What is learned is kept under the card's UUID, and a GPU started later
// knows it before the model is loaded again.
func TestMemoryFootprintsKept(t *testing.T) {
	t.Parallel()
	store := &footprintStore{data: map[string][]byte{}, saved: make(chan struct{}, 1)}
	f := memFixture(t, map[string]int64{"m": 6 * gib}, func(m *MemoryConfig) { m.Store = store })
	f.loadModel(t, "m")
	f.waitState(t, "m learned", func(st Status) bool { return len(st.VRAM.Footprints) == 1 })
	// The status shows a footprint as it is learned; the save follows.
	deadline := time.After(10 * time.Second)
	for {
		store.mu.Lock()
		var saved string
		for card, d := range store.data {
			saved = card + " " + string(d)
		}
		store.mu.Unlock()
		if strings.HasPrefix(saved, "GPU-") && strings.Contains(saved, `"model":"m"`) {
			break
		}
		select {
		case <-store.saved:
		case <-deadline:
			t.Fatalf("saved %q, want m under the card's UUID", saved)
		}
	}
	g := memFixture(t, nil, func(m *MemoryConfig) { m.Store = store })
	g.waitState(t, "m known from the store", func(st Status) bool {
		return len(st.VRAM.Footprints) == 1 && st.VRAM.Footprints[0].Bytes == 6*gib
	})
}

// modelsOf is the fake Ollama's library: the sized models and the usual.
func modelsOf(sizes map[string]int64) []string {
	models := []string{"llama3.2", "qwen3:8b"}
	for m := range sizes {
		models = append(models, m)
	}
	return models
}

// What each engine answers when a model does not fit is read as out of
// memory; other server errors are not.
func TestOutOfMemoryTexts(t *testing.T) {
	for _, tc := range []struct {
		body string
		oom  bool
	}{
		{`{"error":"llama runner process has terminated: cudaMalloc failed: out of memory"}`, true},                   // Ollama's runner
		{`{"error":"model requires more system memory (12.0 GiB) than is available (7.5 GiB)"}`, true},                // Ollama's scheduler
		{`{"error":{"message":"CUDA out of memory. Tried to allocate 2.00 GiB","type":"InternalServerError"}}`, true}, // vLLM
		{`{"error":{"code":500,"message":"failed to allocate buffer for kv cache","type":"server_error"}}`, true},     // llama.cpp
		{`{"error":"model 'x' not found"}`, false},
		{`{"error":"unexpected EOF"}`, false},
	} {
		if got := isOOM([]byte(tc.body)); got != tc.oom {
			t.Errorf("isOOM(%s) = %v, want %v", tc.body, got, tc.oom)
		}
	}
}
