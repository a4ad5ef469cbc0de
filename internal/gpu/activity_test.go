package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

func TestWaitersShowInTheStatus(t *testing.T) {
	t.Parallel()
	g, _ := newFakeGPU(t, &fakeLLM{}, nil)
	h, err := g.TakeHold(context.Background(), "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error)
	go func() { waited <- g.AcquireShared(ctx) }()
	waitStatus(t, g, "the waiting LLM request in the status", func(st Status) bool { return len(st.Waiters) > 0 })
	if g.Status().OldestWaitSeconds == 0 {
		t.Fatal("the waiting LLM request's wait does not show in the status")
	}
	cancel()
	if err := <-waited; err == nil {
		t.Fatal("AcquireShared succeeded during a hold")
	}
	if st := g.Status(); st.OldestWaitSeconds != 0 || st.LLMWaiting != 0 {
		t.Fatalf("a cancelled waiter stays in the status: %+v", st)
	}
	h.End("released")
}

func TestDirectWorkIsTakenOnlyWhenNoJobOnItsEngineHoldsTheGPU(t *testing.T) {
	t.Parallel()
	g := New("direct", &recorder{})
	defer g.Close()
	img, other := &fakeImage{}, &fakeImage{name: "other"}
	g.setJob(&Job{Engine: img.Name(), Source: "proxy", Phase: "running", Started: time.Now()})
	if g.takeDirect(img) {
		t.Fatal("direct work taken while a job of ours on its engine holds the GPU")
	}
	// Work started on another engine while the job runs waits its turn
	// for the GPU: it is taken care of now.
	if !g.takeDirect(other) {
		t.Fatal("direct work on another engine not taken while a job holds the GPU")
	}
	g.endDirect(other)
	g.setJob(nil)
	if !g.takeDirect(img) || g.takeDirect(img) {
		t.Fatal("direct work must be taken exactly once")
	}
	g.endDirect(img)
	if !g.takeDirect(img) {
		t.Fatal("direct work not taken again after the last ended")
	}
}

func TestUseGivesTheGPUBackOnce(t *testing.T) {
	t.Parallel()
	g := New("use", &recorder{})
	defer g.Close()
	if err := g.lock.AcquireExclusive(context.Background(), lock.ImageJob); err != nil {
		t.Fatal(err)
	}
	u := &use{g: g, c: testConfig()}
	u.end()
	u.end() // a second end must not release a lock someone else may hold
	if !g.lock.TryAcquireShared() {
		t.Fatal("the GPU was not given back")
	}
	g.lock.ReleaseShared()
}
