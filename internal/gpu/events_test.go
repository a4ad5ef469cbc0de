package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// received is one event as a test reads it.
type received struct {
	name   string
	status Status
	step   StepEvent
	job    JobEvent
}

func (r received) String() string {
	switch r.name {
	case "status":
		return "status " + r.status.State
	case "step":
		return "step " + r.step.Kind
	}
	return "job " + r.job.Outcome
}

// collect reads events from s until until says stop, and returns them.
func collect(t *testing.T, s *Subscription, until func(received) bool) []received {
	t.Helper()
	var got []received
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.C:
			if !ok {
				t.Fatalf("subscription ended (dropped %v) after %v", s.Dropped(), got)
			}
			r := decode(t, ev)
			got = append(got, r)
			if until(r) {
				return got
			}
		case <-timeout:
			t.Fatalf("timed out; events so far %v", got)
		}
	}
}

func decode(t *testing.T, ev Event) received {
	t.Helper()
	r := received{name: ev.Name}
	var v any
	switch ev.Name {
	case "status":
		v = &r.status
	case "step":
		v = &r.step
	case "job":
		v = &r.job
	default:
		t.Fatalf("unknown event %q", ev.Name)
	}
	if err := json.Unmarshal(ev.Data, v); err != nil {
		t.Fatalf("%s event %s: %v", ev.Name, ev.Data, err)
	}
	return r
}

func indexOf(evs []received, from int, match func(received) bool) int {
	for i := from; i < len(evs); i++ {
		if match(evs[i]) {
			return i
		}
	}
	return -1
}

// TestEventsFollowAnLLMRequestAndAnImageJob checks the events of a short
// LLM request and an image job, in order: each state the lock went
// through, the unload and the free with their durations, and the job's
// end with its outcome before the GPU goes back to idle.
func TestEventsFollowAnLLMRequestAndAnImageJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.loadModel(t, "llama3.2")
	s := subscribe(t, f.g)
	defer s.Close()

	// A request far shorter than the pacing of the stream still shows.
	if !f.g.lock.TryAcquireShared() {
		t.Fatal("GPU not free for LLM use")
	}
	f.g.lock.ReleaseShared()
	job, err := f.g.BeginImage(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Prepare(); err != nil {
		t.Fatal(err)
	}
	job.Submitting()
	id := f.comfy.Submit(30 * time.Millisecond)
	job.Submitted(id)

	// The free's step and the idle status that follows it come in
	// either order when the stream runs late: a round renders the
	// GPU's newest state.
	var sawJob, sawFree, sawIdle bool
	evs := collect(t, s, func(r received) bool {
		sawJob = sawJob || r.name == "job"
		sawFree = sawFree || sawJob && r.name == "step" && r.step.Kind == "free"
		sawIdle = sawIdle || sawJob && r.name == "status" && r.status.State == "idle"
		return sawFree && sawIdle
	})
	llm := indexOf(evs, 0, func(r received) bool {
		return r.name == "status" && r.status.State == "llm" && r.status.LLMInflight == 1
	})
	idle := indexOf(evs, llm+1, func(r received) bool { return r.name == "status" && r.status.State == "idle" })
	image := indexOf(evs, idle+1, func(r received) bool { return r.name == "status" && r.status.State == "image" })
	unload := indexOf(evs, image+1, func(r received) bool { return r.name == "step" && r.step.Kind == "unload" })
	// A round renders each lock state's status with the GPU's newest
	// state: when the stream runs late (a loaded machine), the image
	// status itself may already show the job running, ahead of the
	// unload's step of the same round.
	running := indexOf(evs, image, func(r received) bool {
		return r.name == "status" && r.status.Job != nil && r.status.Job.PromptID == id && r.status.Job.Phase == "running"
	})
	end := indexOf(evs, max(running, unload)+1, func(r received) bool { return r.name == "job" })
	free := indexOf(evs, end+1, func(r received) bool { return r.name == "step" && r.step.Kind == "free" })
	if llm < 0 || idle < 0 || image < 0 || unload < 0 || running < 0 || end < 0 || free < 0 {
		t.Fatalf("events out of order or missing (llm %d, idle %d, image %d, unload %d, running %d, job %d, free %d): %v",
			llm, idle, image, unload, running, end, free, evs)
	}
	if j := evs[end].job; j.PromptID != id || j.Outcome != "success" || j.Turnstile != "test" || j.Seconds <= 0 {
		t.Errorf("job event %+v", j)
	}
	if st := evs[unload].step; st.Turnstile != "test" || st.Seconds <= 0 || st.Detail == "" {
		t.Errorf("unload step event %+v", st)
	}
	if last := evs[len(evs)-1].status; last.Job != nil || last.LLMInflight != 0 {
		t.Errorf("last status %+v", last)
	}
}

// TestSlowSubscriberIsDropped switches the lock while one subscriber
// reads nothing and another reads every event: the first is dropped once
// its buffer is full, the switching never waits for it, and the reader
// goes on getting the events.
func TestSlowSubscriberIsDropped(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	slow := subscribe(t, f.g)
	reader := subscribe(t, f.g)
	defer reader.Close()
	l := f.g.lock
	for i := 0; !slow.Dropped(); i++ {
		if i > eventBuffer {
			t.Fatalf("a subscriber that reads nothing was not dropped after %d switches", 2*i)
		}
		if !l.TryAcquireExclusive(lock.ExternalHold) {
			t.Fatal("lock not free")
		}
		collect(t, reader, func(r received) bool { return r.name == "status" && r.status.State == "hold" })
		l.ReleaseExclusive(false)
		collect(t, reader, func(r received) bool { return r.name == "status" && r.status.State == "idle" })
	}
	n := 0
	for range slow.C {
		n++ // what it had buffered, then the end
	}
	if n != eventBuffer {
		t.Errorf("the dropped subscriber had %d events buffered, want %d", n, eventBuffer)
	}
	if reader.Dropped() {
		t.Fatal("a subscriber that reads was dropped")
	}
}

// TestWaitersListedOldestFirst queues three LLM requests naming their
// models behind a hold, and an image job: the status lists them in the
// order they came, with their paths and models.
func TestWaitersListedOldestFirst(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	h, err := f.g.TakeHold(context.Background(), "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	models := []string{"llama3.2", "qwen3:8b", "gemma3"}
	errs := make(chan error, len(models)+1)
	for i, m := range models {
		wctx := WithWaiter(ctx, Waiter{Path: "/api/chat", Model: m})
		go func() { errs <- f.g.AcquireShared(wctx) }()
		f.waitState(t, fmt.Sprintf("waiter %d listed", i), func(st Status) bool { return len(st.Waiters) == i+1 })
	}
	go func() {
		_, err := f.g.BeginImage(WithWaiter(ctx, Waiter{Path: "/prompt"}), "")
		errs <- err
	}()
	st := f.waitState(t, "the image waiter listed", func(st Status) bool { return len(st.Waiters) == 4 })
	var got []string
	for _, w := range st.Waiters {
		got = append(got, w.Kind+" "+w.Path+" "+w.Model)
	}
	want := "llm /api/chat llama3.2|llm /api/chat qwen3:8b|llm /api/chat gemma3|image /prompt "
	if strings.Join(got, "|") != want {
		t.Fatalf("waiters %q, want %q", strings.Join(got, "|"), want)
	}
	for i := 1; i < len(st.Waiters); i++ {
		if st.Waiters[i].Since.Before(st.Waiters[i-1].Since) {
			t.Fatalf("waiters not oldest first: %+v", st.Waiters)
		}
	}
	cancel()
	for range len(models) + 1 {
		<-errs
	}
	h.End("released")
	f.waitState(t, "no waiters", func(st Status) bool { return len(st.Waiters) == 0 && st.State == "idle" })
}

// BenchmarkStatusEventLatency measures how long after a change of the
// lock its status event reaches a subscriber (the contract's bound is
// 100 ms): a hold taken, then given back, one subscriber waiting for each
// event. The second of two changes in a row waits out the stream's pacing
// (eventGap).
func BenchmarkStatusEventLatency(b *testing.B) {
	g := New("bench", &recorder{})
	g.Apply(testConfig(), zap.NewNop())
	defer g.Close()
	s := subscribe(b, g)
	defer s.Close()
	l := g.lock
	var took []time.Duration
	timed := func(change func(), want string) {
		start := time.Now()
		change()
		waitEvent(b, s, want)
		took = append(took, time.Since(start))
	}
	for b.Loop() {
		timed(func() { l.TryAcquireExclusive(lock.ExternalHold) }, `"state":"hold"`)
		timed(func() { l.ReleaseExclusive(false) }, `"state":"idle"`)
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
}

func waitEvent(b *testing.B, s *Subscription, want string) {
	for ev := range s.C {
		if ev.Name == "status" && strings.Contains(string(ev.Data), want) {
			return
		}
	}
	b.Fatal("subscription ended")
}

// BenchmarkLockWithSubscribers is an LLM request's lock cost with 0, 1
// and 100 subscribers to the live events, each reading as fast as it can.
func BenchmarkLockWithSubscribers(b *testing.B) {
	for _, n := range []int{0, 1, 100} {
		b.Run(fmt.Sprintf("subscribers=%d", n), func(b *testing.B) {
			g := New("bench", &recorder{})
			g.Apply(testConfig(), zap.NewNop())
			defer g.Close()
			for range n {
				s := subscribe(b, g)
				defer s.Close()
				go func() {
					for range s.C {
					}
				}()
			}
			l := g.lock
			b.ReportAllocs()
			for b.Loop() {
				l.TryAcquireShared()
				l.ReleaseShared()
			}
		})
	}
}

// TestRenewalIsSent renews a hold, which changes the status (its expiry)
// and nothing in the lock: the owner's change signal has it sent.
func TestRenewalIsSent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	h, err := f.g.TakeHold(context.Background(), "test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer h.End("released")
	s := subscribe(t, f.g)
	defer s.Close()
	// The first round sends the status once: nothing was sent to this
	// subscriber before it.
	collect(t, s, func(r received) bool { return r.name == "status" && len(r.status.Holds) == 1 })
	h.Renew(time.Hour)
	collect(t, s, func(r received) bool {
		return r.name == "status" && len(r.status.Holds) == 1 && time.Until(r.status.Holds[0].ExpiresAt) > 30*time.Minute
	})
}

func subscribe(tb testing.TB, g *GPU) *Subscription {
	tb.Helper()
	s, err := g.Subscribe()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestSubscribersAreBounded: past maxSubscribers, Subscribe refuses, and
// a place freed is taken again.
func TestSubscribersAreBounded(t *testing.T) {
	t.Parallel()
	g := New("bounded", &recorder{})
	defer g.Close()
	var subs []*Subscription
	for range maxSubscribers {
		subs = append(subs, subscribe(t, g))
	}
	if _, err := g.Subscribe(); !errors.Is(err, ErrTooManySubscribers) {
		t.Fatalf("subscriber %d: %v, want ErrTooManySubscribers", maxSubscribers+1, err)
	}
	subs[0].Close()
	subscribe(t, g).Close()
}
