package presence

import (
	"context"
	"testing"
	"testing/synctest"
)

// A condition that turns off counts as clear: its hold is released after
// releaseAfter, and the status says why it is off.
func TestWatcherOffCountsAsClear(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSampler{}
		f.set("gpu_busy:game (pid 9)", true, nil)
		w, c, _ := watch(t, f, nil)
		wantCalls(t, c, "engage gpu_busy:game (pid 9)")
		f.set("", false, offf("the engine at http://127.0.0.1:11434 runs in a container"))
		step(int(releaseAfter / poll))
		wantCalls(t, c, "engage gpu_busy:game (pid 9)")
		step(1)
		wantCalls(t, c, "engage gpu_busy:game (pid 9)", "release")
		if _, engaged, err := w.Status(); engaged || !IsOff(err) {
			t.Fatalf("Status() = %v, %v; want off and not engaged", engaged, err)
		}
	})
}

// streamingSampler has a source that runs beside the samples.
type streamingSampler struct {
	fakeSampler
	running chan bool
}

func (s *streamingSampler) Run(ctx context.Context) {
	s.running <- true
	<-ctx.Done()
	s.running <- false
}

// A Sampler's source runs while the Watcher runs, and has stopped when
// Run returns.
func TestWatcherRunsTheSource(t *testing.T) {
	s := &streamingSampler{running: make(chan bool)}
	w := NewWatcher(s, poll, releaseAfter, nil, func(string) {}, func() {})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	if !<-s.running {
		t.Fatal("the source did not start")
	}
	cancel()
	if <-s.running {
		t.Fatal("the source did not stop")
	}
	<-done
}
