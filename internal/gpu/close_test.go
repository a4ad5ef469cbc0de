package gpu

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

// fakeImage is an ImageEngine in memory whose jobs run until cancelled and
// take a while to notice.
type fakeImage struct {
	name    string
	stopped atomic.Bool // a job watch returned
	frees   atomic.Int64
	// freeing, if set, holds each free until it is closed.
	freeing chan struct{}
}

type fakeWatch struct{ changed chan struct{} }

func (w fakeWatch) Run(ctx context.Context)             { <-ctx.Done() }
func (w fakeWatch) Changed() <-chan struct{}            { return w.changed }
func (w fakeWatch) QueueRemaining() (n int, known bool) { return 0, false }

func (f *fakeImage) Kind() string { return "fakeimg" }
func (f *fakeImage) Name() string {
	if f.name != "" {
		return f.name
	}
	return "fake image engine"
}
func (f *fakeImage) URL() string { return "mem://image" }

func (f *fakeImage) Synchronous() bool { return false }

func (f *fakeImage) Watch(string, func(bool, error)) Watch {
	return fakeWatch{changed: make(chan struct{})}
}

func (f *fakeImage) Queue(context.Context) (int, int, error) { return 0, 0, nil }

func (f *fakeImage) WaitJob(ctx context.Context, _ string, _ Watch) (string, error) {
	<-ctx.Done()
	time.Sleep(100 * time.Millisecond) // the engine answers late
	f.stopped.Store(true)
	return "", ctx.Err()
}

func (f *fakeImage) WaitIdle(ctx context.Context, _ Watch) error { return nil }
func (f *fakeImage) Interrupt(context.Context, string) error     { return nil }
func (f *fakeImage) Free(ctx context.Context) (bool, error) {
	f.frees.Add(1)
	if f.freeing != nil {
		select {
		case <-f.freeing:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return true, nil
}

func TestCloseWaitsForTheJobWatch(t *testing.T) {
	t.Parallel()
	img := &fakeImage{}
	c := testConfig()
	c.LLMs, c.Images = []LLMEngine{&fakeLLM{}}, []ImageEngine{img}
	g := New("close", &recorder{})
	g.Apply(c, zap.NewNop())
	waitStatus(t, g, "the start-up probe's end", func(st Status) bool { return !g.Probing() && st.State == "idle" })
	job, err := g.BeginImage(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Prepare(); err != nil {
		t.Fatal(err)
	}
	job.Submitted("p1")
	g.Close()
	if !img.stopped.Load() {
		t.Fatal("Close returned before the job's watch did")
	}
	if s := g.State().String(); s != "idle" {
		t.Fatalf("state %s after Close, want the job's end to have given the GPU back", s)
	}
}

// Close cancels first, then ends the holds: the image engine a hold left
// owing a free is not freed, and the warm model is not loaded again, for
// a GPU nobody will use after.
func TestCloseEndsHoldsWithoutFreesOrWarmUps(t *testing.T) {
	t.Parallel()
	img, llm := &fakeImage{}, &fakeLLM{}
	c := testConfig()
	c.LLMs, c.Images, c.WarmModel = []LLMEngine{llm}, []ImageEngine{img}, "m1"
	g := New("t", &recorder{})
	g.Apply(c, zap.NewNop())
	waitIdle(t, g)
	if _, err := g.TakeHold(context.Background(), "game", time.Minute); err != nil {
		t.Fatal(err)
	}
	g.owe(img) // the game left memory in the image engine, say
	frees := img.frees.Load()
	llm.mu.Lock()
	warmed := len(llm.warmed)
	llm.mu.Unlock()
	g.Close()
	if n := img.frees.Load(); n != frees {
		t.Fatalf("Close freed the image engine (%d frees, %d before)", n, frees)
	}
	llm.mu.Lock()
	defer llm.mu.Unlock()
	if len(llm.warmed) != warmed {
		t.Fatalf("Close warmed %v", llm.warmed[warmed:])
	}
}
