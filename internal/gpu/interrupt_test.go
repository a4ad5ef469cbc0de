package gpu

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// takeWindow is how long the fake ComfyUI takes from taking a job off its
// queue to starting it: an interrupt in that instant is dropped. Long
// here, so that the first interrupt of each test lands in it.
const takeWindow = 800 * time.Millisecond

// queueTaken queues a job on the fake ComfyUI for job and returns its
// prompt_id once the worker has taken it, not started.
func (f *fixture) queueTaken(t *testing.T, job *ImageJob) string {
	t.Helper()
	job.Submitting()
	id := f.comfy.Submit(time.Hour)
	f.waitTimeline(t, "job "+id+" taken", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "comfy", "taken "+id) >= 0
	})
	job.Submitted(id)
	return id
}

// llmAdmitted marks on the timeline when an LLM request gets the GPU.
func (f *fixture) llmAdmitted(t *testing.T) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f.g.AcquireShared(context.Background()); err != nil {
			t.Error(err)
			return
		}
		f.card.Mark("test", "llm admitted")
		f.g.lock.ReleaseShared()
	}()
	f.waitState(t, "the LLM request waiting", func(st Status) bool { return st.LLMWaiting == 1 })
	return done
}

// assertEndedBeforeLLM checks that the job stopped on ComfyUI before the
// GPU went to LLM use.
func (f *fixture) assertEndedBeforeLLM(t *testing.T, id string) {
	t.Helper()
	ev := f.card.Events()
	dropped := gputest.Index(ev, 0, "comfy", "interrupt dropped "+id)
	landed := gputest.Index(ev, dropped, "comfy", "interrupt requested "+id)
	ended := gputest.Index(ev, landed, "comfy", "job "+id+" end execution_interrupted")
	admitted := gputest.Index(ev, 0, "test", "llm admitted")
	if dropped < 0 || landed < 0 || ended < 0 || admitted < ended {
		t.Fatalf("want the first interrupt dropped, a later one to stop the job, and LLM use only after:\n%s", gputest.Dump(ev))
	}
}

// A job_timeout whose first interrupt ComfyUI drops (it came as the job
// was taken from the queue) is sent again until the job stops; past
// interrupt_grace that is counted and shown, and the GPU stays the job's.
func TestJobTimeoutInterruptIsSentAgainUntilTheJobEnds(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, comfytest.Options{TakeDelay: takeWindow, HistoryLag: 5 * time.Millisecond}, func(c *Config) {
		c.JobTimeout, c.InterruptGrace = 300*time.Millisecond, 200*time.Millisecond
	})
	job := f.startJob(t)
	id := f.queueTaken(t, job)
	llm := f.llmAdmitted(t)
	st := f.waitState(t, "the interrupt overdue", func(st Status) bool { return st.Job != nil && st.Job.InterruptOverdue })
	if st.State != "image" || st.Job.OverdueSince == nil || st.Job.PromptID != id {
		t.Fatalf("overdue status %+v", st)
	}
	<-llm
	f.assertEndedBeforeLLM(t, id)
	if got := f.m.get(&f.m.overdue); len(got) != 1 || got[0] != "comfyui" {
		t.Fatalf("overdue counted %v, want once for comfyui", got)
	}
	if jobs := f.m.get(&f.m.jobs); len(jobs) != 1 || jobs[0] != "timeout" {
		t.Fatalf("jobs ended %v, want one timeout", jobs)
	}
}

// A cancel whose first interrupt ComfyUI drops still stops the job.
func TestCancelInterruptIsSentAgainUntilTheJobEnds(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, comfytest.Options{TakeDelay: takeWindow, HistoryLag: 5 * time.Millisecond}, nil)
	job := f.startJob(t)
	id := f.queueTaken(t, job)
	ch := f.cancelAsync(t, job)
	llm := f.llmAdmitted(t)
	r := <-ch
	if r.err != nil || r.res.Outcome != "interrupted" {
		t.Fatalf("cancel answered %+v %v, want interrupted", r.res, r.err)
	}
	<-llm
	f.assertEndedBeforeLLM(t, id)
}

// An operator abandons a job that does not stop: the job ends as
// abandoned and gives the GPU back after ComfyUI's free.
func TestForceEndJobHandsTheGPUOn(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, comfytest.Options{InterruptDelay: time.Hour, HistoryLag: 5 * time.Millisecond}, func(c *Config) {
		c.InterruptGrace, c.FreeTimeout = 200*time.Millisecond, 300*time.Millisecond
	})
	f.bypassed = true // the abandoned job computes on beside LLM use: the operator's call
	job := f.startJob(t)
	job.Submitting()
	id := f.submitRunning(t, time.Hour)
	job.Submitted(id)
	if _, err := f.g.CancelJob(context.Background()); !errors.Is(err, ErrNotStopped) {
		t.Fatalf("cancel of a job that does not stop: %v, want ErrNotStopped", err)
	}
	if st := f.g.Status(); st.State != "image" {
		t.Fatalf("the GPU left the job past interrupt_grace: %+v", st)
	}
	frees := f.comfy.Frees()
	res, err := f.g.ForceEndJob(context.Background(), "test")
	if err != nil || res.Outcome != "abandoned" || res.PromptID == nil || *res.PromptID != id {
		t.Fatalf("force answered %+v %v, want %s abandoned", res, err, id)
	}
	if f.comfy.Frees() == frees {
		t.Fatal("ComfyUI not freed before the GPU was handed on")
	}
	// The job is no longer the turnstile's; ComfyUI still runs it, which
	// the watch then guards as work on it that the turnstile did not send.
	if st := f.g.Status(); st.Job != nil && st.Job.Source == "proxy" {
		t.Fatalf("the job still holds the GPU after the forced end: %+v", st.Job)
	}
	if jobs := f.m.get(&f.m.jobs); len(jobs) != 1 || jobs[0] != "abandoned" {
		t.Fatalf("jobs ended %v, want one abandoned", jobs)
	}
	f.comfy.Restart()
}
