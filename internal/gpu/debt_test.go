package gpu

import (
	"context"
	"testing"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// waitIdle waits until the GPU is idle (the start-up probe done).
func waitIdle(t *testing.T, g *GPU) {
	t.Helper()
	waitStatus(t, g, "idle", func(st Status) bool { return st.State == "idle" && !g.Probing() })
}

// A free owed by an image engine is paid even after a reload dropped the
// engine while its job ran: the debt belongs to the engine, not to the
// config.
func TestFreeIsPaidAfterAReloadDropsTheEngine(t *testing.T) {
	t.Parallel()
	a, b := &fakeImage{name: "a"}, &fakeImage{name: "b"}
	c1 := testConfig()
	c1.Images = []ImageEngine{a}
	g := New("debt", &recorder{})
	defer g.Close()
	g.Apply(c1, zap.NewNop())
	waitIdle(t, g)
	frees := a.frees.Load() // the start-up free, a having answered
	job, err := g.BeginImage(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Prepare(); err != nil {
		t.Fatal(err)
	}
	job.Submitting()
	c2 := testConfig()
	c2.Images = []ImageEngine{b}
	g.Apply(c2, zap.NewNop())
	job.Ran("success")
	waitIdle(t, g)
	if got := a.frees.Load() - frees; got != 1 {
		t.Fatalf("engine a freed %d times after its job, want 1 although the reload dropped it", got)
	}
	if g.owed() {
		t.Fatal("a debt is still owed after the GPU went back to LLM use")
	}
}

// A job that waited across a reload runs on the engine as the new config
// has it.
func TestJobUsesTheEngineOfTheConfigCurrentWhenItGetsTheGPU(t *testing.T) {
	t.Parallel()
	old, renewed := &fakeImage{name: "a"}, &fakeImage{name: "a"}
	c1 := testConfig()
	c1.Images = []ImageEngine{old}
	g := New("reload", &recorder{})
	defer g.Close()
	g.Apply(c1, zap.NewNop())
	waitIdle(t, g)
	if err := g.lock.AcquireExclusive(context.Background(), lock.ImageJob); err != nil {
		t.Fatal(err)
	}
	got := make(chan *ImageJob, 1)
	go func() {
		j, err := g.BeginImage(context.Background(), "a")
		if err != nil {
			t.Error(err)
		}
		got <- j
	}()
	waitStatus(t, g, "the job queued", func(st Status) bool { return st.ImageWaiting > 0 })
	c2 := testConfig()
	c2.Images = []ImageEngine{renewed}
	g.Apply(c2, zap.NewNop())
	g.lock.ReleaseExclusive(false)
	j := <-got
	if j == nil {
		return
	}
	defer j.End("cancelled")
	if j.Engine() != ImageEngine(renewed) {
		t.Fatal("the job runs on the adapter of the config it started waiting under")
	}
}
