package presence

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// fakeSampler answers what the test last set, and counts its samples.
type fakeSampler struct {
	mu      sync.Mutex
	owner   string
	present bool
	err     error
	samples int
}

func (f *fakeSampler) set(owner string, present bool, err error) {
	f.mu.Lock()
	f.owner, f.present, f.err = owner, present, err
	f.mu.Unlock()
}

func (f *fakeSampler) Sample(ctx context.Context) (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.samples++
	if f.err != nil {
		return "", false, f.err
	}
	if !f.present {
		return "", false, nil
	}
	return f.owner, true, nil
}

func (f *fakeSampler) String() string { return "fake" }

// calls records engage and release, in order.
type calls struct {
	mu  sync.Mutex
	got []string
}

func (c *calls) add(s string) {
	c.mu.Lock()
	c.got = append(c.got, s)
	c.mu.Unlock()
}

func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

const (
	poll         = 2 * time.Second
	releaseAfter = 30 * time.Second
)

// watch starts a Watcher on f in the bubble; samples happen at t = 0,
// poll, 2*poll... from the call. step sleeps to the middle between two
// samples, so that a check never races a sample.
func watch(t *testing.T, f *fakeSampler, log *zap.Logger) (*Watcher, *calls, context.CancelFunc) {
	t.Helper()
	c := &calls{}
	w := NewWatcher(f, poll, releaseAfter, log, func(owner string) { c.add("engage " + owner) }, func() { c.add("release") })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	time.Sleep(poll / 2)
	synctest.Wait()
	t.Cleanup(func() { cancel(); <-done })
	return w, c, cancel
}

// step lets n samples happen.
func step(n int) {
	time.Sleep(time.Duration(n) * poll)
	synctest.Wait()
}

func wantCalls(t *testing.T, c *calls, want ...string) {
	t.Helper()
	got := c.list()
	if len(got) != len(want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("calls %q, want %q", got, want)
		}
	}
}

func TestWatcherEngagesFastReleasesSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSampler{}
		w, c, _ := watch(t, f, nil)
		step(3)
		wantCalls(t, c) // clear from the start: nothing to release

		f.set("process:steam", true, nil)
		step(1)
		wantCalls(t, c, "engage process:steam")
		if owner, engaged, err := w.Status(); owner != "process:steam" || !engaged || err != nil {
			t.Fatalf("Status() = %q, %v, %v", owner, engaged, err)
		}
		// Presence that goes on, even by another owner, engages nothing more.
		f.set("process:game", true, nil)
		step(5)
		wantCalls(t, c, "engage process:steam")

		// Clear for a little less than releaseAfter: held. The first clear
		// sample starts the period; release needs releaseAfter/poll more.
		f.set("", false, nil)
		step(int(releaseAfter / poll)) // clear samples at 0 .. releaseAfter-poll
		wantCalls(t, c, "engage process:steam")
		if _, engaged, _ := w.Status(); !engaged {
			t.Fatal("released before releaseAfter of clear")
		}
		// One positive sample restarts the clear period.
		f.set("process:steam", true, nil)
		step(1)
		f.set("", false, nil)
		step(int(releaseAfter / poll))
		wantCalls(t, c, "engage process:steam")
		step(1)
		wantCalls(t, c, "engage process:steam", "release")
		if owner, engaged, _ := w.Status(); owner != "" || engaged {
			t.Fatalf("Status() after release = %q, %v", owner, engaged)
		}

		// And engages again at once.
		f.set("gpu_process:game.exe (pid 4242)", true, nil)
		step(1)
		wantCalls(t, c, "engage process:steam", "release", "engage gpu_process:game.exe (pid 4242)")
	})
}

func TestWatcherErrorsChangeNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		core, logs := observer.New(zapcore.InfoLevel)
		f := &fakeSampler{}
		f.set("", false, errors.New("nvidia-smi: exit status 9"))
		w, c, _ := watch(t, f, zap.New(core))
		step(3)
		wantCalls(t, c) // an error is no presence
		if _, _, err := w.Status(); err == nil {
			t.Fatal("Status() shows no error")
		}
		if n := logs.FilterMessageSnippet("sample failed").Len(); n != 1 {
			t.Fatalf("the same error logged %d times, want once", n)
		}
		f.set("", false, errors.New("nvidia-smi: context deadline exceeded"))
		step(2)
		if n := logs.FilterMessageSnippet("sample failed").Len(); n != 2 {
			t.Fatalf("a new error logged %d times in all, want 2", n)
		}

		f.set("process:steam", true, nil)
		step(1)
		wantCalls(t, c, "engage process:steam")
		if n := logs.FilterMessageSnippet("works again").Len(); n != 1 {
			t.Fatalf("recovery logged %d times, want once", n)
		}
		if _, _, err := w.Status(); err != nil {
			t.Fatalf("Status() error after a good sample: %v", err)
		}
		// Errors while engaged: no release, however long they last.
		f.set("", false, errors.New("nvidia-smi: exit status 9"))
		step(int(3 * releaseAfter / poll))
		wantCalls(t, c, "engage process:steam")
		// Errors inside the clear period neither release nor restart it:
		// release comes on the first clear sample releaseAfter after the
		// period began.
		f.set("", false, nil)
		step(1) // the period begins
		f.set("", false, errors.New("nvidia-smi: exit status 9"))
		step(int(releaseAfter/poll) + 2)
		wantCalls(t, c, "engage process:steam")
		f.set("", false, nil)
		step(1)
		wantCalls(t, c, "engage process:steam", "release")
	})
}

func TestWatcherReturnsAtCancelWithoutRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSampler{}
		f.set("process:steam", true, nil)
		w, c, cancel := watch(t, f, nil)
		wantCalls(t, c, "engage process:steam") // the first sample, at once
		cancel()
		synctest.Wait()
		f.mu.Lock()
		n := f.samples
		f.mu.Unlock()
		step(3)
		f.mu.Lock()
		after := f.samples
		f.mu.Unlock()
		if after != n {
			t.Fatalf("%d samples after cancel", after-n)
		}
		wantCalls(t, c, "engage process:steam")
		if _, engaged, _ := w.Status(); !engaged {
			t.Fatal("Status() not engaged after Run returned: the caller ends its hold")
		}
	})
}
