package gpu

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
)

// newRunGPU is a GPU with one queueing image engine in memory, idle.
func newRunGPU(t *testing.T) (*GPU, *fakeImage) {
	t.Helper()
	e := &fakeImage{name: "img"}
	c := testConfig()
	c.Images = []ImageEngine{e}
	g := New("run", &recorder{})
	t.Cleanup(g.Close)
	g.Apply(c, zap.NewNop())
	waitIdle(t, g)
	return g, e
}

func imageRun(forward func(context.Context, *Forwarded)) ImageRun {
	return ImageRun{Engine: "img", Deadline: time.Now().Add(5 * time.Second), Forward: forward}
}

// runAborted runs a job whose forward panics with v after filling f as
// seen, and returns what RunImage panicked with.
func runAborted(g *GPU, seen Forwarded, v any) (got any) {
	defer func() { got = recover() }()
	g.RunImage(context.Background(), imageRun(func(_ context.Context, f *Forwarded) {
		*f = seen
		panic(v)
	}))
	return nil
}

// A forward that panics before its engine named a job ends the job as
// failed, and the panic goes on with the same value. The engine may have
// the work all the same: it is freed before the GPU goes back.
func TestRunImageAbortedBeforeAPromptID(t *testing.T) {
	g, e := newRunGPU(t)
	frees := e.frees.Load()
	abort := errors.New("abort handler")
	if got := runAborted(g, Forwarded{Status: 200}, abort); got != abort {
		t.Fatalf("RunImage panicked with %v, want the forward's own value", got)
	}
	waitIdle(t, g)
	if n := e.frees.Load() - frees; n != 1 {
		t.Fatalf("the engine was freed %d times after the job ended, want 1", n)
	}
}

// A forward that panics once its answer named the job leaves the GPU to
// the job, as a forward that returned would.
func TestRunImageAbortedAfterAPromptID(t *testing.T) {
	g, _ := newRunGPU(t)
	if got := runAborted(g, Forwarded{Status: 200, PromptID: "p1"}, "cut"); got != "cut" {
		t.Fatalf("RunImage panicked with %v, want the forward's own value", got)
	}
	st := g.Status()
	if st.State != "image" || st.Job == nil || st.Job.PromptID != "p1" {
		t.Fatalf("status %+v, want the GPU held for job p1", st)
	}
}

// The outcome of a forward that returned, by what the engine answered.
func TestRunImageOutcomes(t *testing.T) {
	boom := errors.New("upstream broke off")
	for _, tc := range []struct {
		seen Forwarded
		want string
	}{
		{Forwarded{Status: 200, PromptID: "p1"}, "queued"},
		{Forwarded{Status: 400}, "rejected"},
		{Forwarded{Status: 200}, "rejected"}, // no prompt_id: nothing queued
		{Forwarded{Status: 200, PromptID: "p1", Err: boom}, "failed"},
	} {
		g, _ := newRunGPU(t)
		outcome, err := g.RunImage(context.Background(), imageRun(func(_ context.Context, f *Forwarded) { *f = tc.seen }))
		if outcome != tc.want || err != tc.seen.Err {
			t.Errorf("%+v: %q, %v; want %q, %v", tc.seen, outcome, err, tc.want, tc.seen.Err)
		}
		if tc.want != "queued" {
			waitIdle(t, g)
		}
	}
}

// A job that cannot have the GPU by its deadline is told so, and one
// whose client goes away while it waits is told that; neither forwards.
func TestRunImageWithoutTheGPU(t *testing.T) {
	g, _ := newRunGPU(t)
	h, err := g.TryHold(context.Background(), "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	forward := func(context.Context, *Forwarded) { t.Error("forwarded without the GPU") }
	run := imageRun(forward)
	run.Deadline = time.Now().Add(50 * time.Millisecond)
	waited := false
	run.Waited = func() { waited = true }
	if _, err := g.RunImage(context.Background(), run); !errors.Is(err, ErrWaitTimeout) || !waited {
		t.Fatalf("past the deadline: %v (waited told: %v), want ErrWaitTimeout", err, waited)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var gone *ClientGoneError
	if _, err := g.RunImage(ctx, imageRun(forward)); !errors.As(err, &gone) {
		t.Fatalf("client gone: %v, want a *ClientGoneError", err)
	}
	if _, err := g.RunImage(context.Background(), ImageRun{Engine: "none", Forward: forward}); !errors.Is(err, ErrNoEngine) {
		t.Fatalf("no such engine: %v, want ErrNoEngine", err)
	}
}
