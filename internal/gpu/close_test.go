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
func (f *fakeImage) Free(context.Context) (bool, error)          { f.frees.Add(1); return true, nil }

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
