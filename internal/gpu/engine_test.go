package gpu

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// fakeLLM is an LLMEngine in memory: the orchestration needs nothing more
// of an engine than the interface.
type fakeLLM struct {
	mu       sync.Mutex
	loaded   []string
	abnormal []time.Time // what each Empty was told
	fail     error
	warmed   []string
}

func (f *fakeLLM) Kind() string { return "fake" }
func (f *fakeLLM) Name() string { return "fake llm" }
func (f *fakeLLM) URL() string  { return "mem://fake" }

func (f *fakeLLM) Loaded(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.loaded...), nil
}

func (f *fakeLLM) Empty(_ context.Context, _ *zap.Logger, abnormal time.Time) ([]string, error, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.abnormal = append(f.abnormal, abnormal)
	if f.fail != nil {
		return nil, nil, f.fail
	}
	names := f.loaded
	f.loaded = nil
	return names, nil, nil
}

func (f *fakeLLM) UnloadSoon(context.Context) (int, error) { return 0, nil }

func (f *fakeLLM) Warm(_ context.Context, model string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.warmed = append(f.warmed, model)
	f.loaded = append(f.loaded, model)
	return nil
}

func newFakeGPU(t *testing.T, e *fakeLLM, edit func(*Config)) (*GPU, *recorder) {
	t.Helper()
	c := testConfig()
	c.LLMs = []LLMEngine{e}
	if edit != nil {
		edit(c)
	}
	m := &recorder{}
	g := New("fake", m)
	t.Cleanup(g.Close)
	g.Apply(c, zap.NewNop())
	return g, m
}

func TestHoldEmptiesAnyLLMEngineAndWarmsAfter(t *testing.T) {
	t.Parallel()
	e := &fakeLLM{loaded: []string{"m1", "m2"}}
	g, m := newFakeGPU(t, e, func(c *Config) { c.WarmModel = "m1" })
	h, err := g.TakeHold(context.Background(), "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.get(&m.steps); len(got) != 1 || got[0] != "unload" {
		t.Fatalf("steps %v, want one unload", got)
	}
	h.End("released")
	// The hold's end gives the GPU back in the background: it is idle for
	// a moment before the warm-up takes its shared place, so idle and not
	// warming is not yet after the warm-up.
	warmed := func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.warmed) > 0
	}
	waitStatus(t, g, "the warm-up done after the hold", func(st Status) bool { return !st.Warming && st.State == "idle" && warmed() })
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.warmed) != 1 || e.warmed[0] != "m1" {
		t.Fatalf("warmed %v, want m1 once", e.warmed)
	}
	// The first emptying after start-up is confirmed as after an abnormal end.
	if len(e.abnormal) != 1 || e.abnormal[0].IsZero() {
		t.Fatalf("Empty told abnormal %v, want a time", e.abnormal)
	}
}

func TestAbnormalLLMEndReachesTheEngine(t *testing.T) {
	t.Parallel()
	e := &fakeLLM{}
	g, _ := newFakeGPU(t, e, nil)
	for range 2 {
		h, err := g.TakeHold(context.Background(), "test", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		h.End("released")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g.NoteLLMEnd(ctx, nil) // a client that went away
	before := time.Now()
	h, err := g.TakeHold(context.Background(), "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	h.End("released")
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.abnormal) != 3 || !e.abnormal[1].IsZero() || e.abnormal[2].IsZero() || e.abnormal[2].After(before) {
		t.Fatalf("Empty told abnormal %v: want a time, then none once confirmed, then the request's end", e.abnormal)
	}
}

func TestHoldRefusedWhenTheLLMEngineCannotBeEmptied(t *testing.T) {
	t.Parallel()
	e := &fakeLLM{fail: errors.New("stuck")}
	g, m := newFakeGPU(t, e, nil)
	_, err := g.TakeHold(context.Background(), "test", time.Minute)
	if !errors.Is(err, ErrHoldPrepare) {
		t.Fatalf("TakeHold: %v, want ErrHoldPrepare", err)
	}
	if got := m.get(&m.errors); len(got) != 1 || got[0] != "fake unload" {
		t.Fatalf("upstream errors %v, want the engine's kind", got)
	}
	if s := g.State().String(); s != "idle" {
		t.Fatalf("state %s after a refused hold", s)
	}
}

// The free after a hold runs on the GPU's own goroutine: End (a DELETE,
// the presence watcher) returns while it runs, and LLM use resumes once
// it is done.
func TestHoldEndDoesNotWaitForTheFree(t *testing.T) {
	t.Parallel()
	img := &fakeImage{}
	g, _ := newFakeGPU(t, &fakeLLM{}, func(c *Config) { c.Images = []ImageEngine{img} })
	waitIdle(t, g)
	h, err := g.TakeHold(context.Background(), "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The frees from now on wait; the image engine loaded memory during
	// the hold.
	img.freeing = make(chan struct{})
	g.owe(img)
	ended := make(chan bool)
	go func() { ended <- h.End("released") }()
	select {
	case ok := <-ended:
		if !ok {
			t.Fatal("End did not end the hold")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("End waited for the free")
	}
	waitStatus(t, g, "the free running", func(st Status) bool { return st.Freeing })
	if g.lock.TryAcquireShared() {
		t.Fatal("an LLM request got in while the free ran")
	}
	close(img.freeing)
	waitStatus(t, g, "idle after the free", func(st Status) bool { return st.State == "idle" && !st.Freeing })
}
