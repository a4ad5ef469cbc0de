package gpu

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// startJob begins an image job and readies the GPU for it, up to the
// point where the request would be forwarded.
func (f *fixture) startJob(t *testing.T) *ImageJob {
	t.Helper()
	job, err := f.g.BeginImage(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Prepare(); err != nil {
		t.Fatal(err)
	}
	return job
}

// submitRunning queues a job on the fake ComfyUI and waits until it runs:
// ComfyUI drops an interrupt that comes before.
func (f *fixture) submitRunning(t *testing.T, d time.Duration) string {
	t.Helper()
	id := f.comfy.Submit(d)
	f.waitTimeline(t, "job "+id+" start", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "comfy", "job "+id+" start") >= 0
	})
	return id
}

func (f *fixture) waitTimeline(t *testing.T, what string, cond func([]gputest.Event) bool) {
	t.Helper()
	if !f.card.WaitFor(10*time.Second, cond) {
		t.Fatalf("timed out waiting for %s:\n%s", what, gputest.Dump(f.card.Events()))
	}
}

type cancelResult struct {
	res Cancelled
	err error
}

// cancelAsync cancels the running job in the background, and returns
// once the cancel has been asked for.
func (f *fixture) cancelAsync(t *testing.T, job *ImageJob) <-chan cancelResult {
	t.Helper()
	ch := make(chan cancelResult, 1)
	go func() {
		res, err := f.g.CancelJob(context.Background())
		ch <- cancelResult{res, err}
	}()
	select {
	case <-job.stop.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the cancel was never asked for")
	}
	return ch
}

func notYet(t *testing.T, ch <-chan cancelResult, before string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("the cancel answered %+v before %s", r, before)
	default:
	}
}

// TestCancelAnswersOnceComfyUIHasStoppedTheJob: ComfyUI stops an
// interrupted job only at its next node (InterruptDelay later); the cancel
// answers after that, and the job's watch records the interrupt.
func TestCancelAnswersOnceComfyUIHasStoppedTheJob(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	job := f.startJob(t)
	job.Submitting()
	id := f.submitRunning(t, time.Hour)
	job.Submitted(id)

	res, err := f.g.CancelJob(context.Background())
	f.card.Mark("test", "cancel answered")
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != "interrupted" || res.PromptID == nil || *res.PromptID != id || res.Engine != "comfyui" {
		t.Fatalf("cancel answered %+v, want job %s interrupted", res, id)
	}
	ev := f.card.Events()
	asked := gputest.Index(ev, 0, "comfy", "interrupt requested "+id)
	stopped := gputest.Index(ev, asked, "comfy", "job "+id+" end execution_interrupted")
	answered := gputest.Index(ev, stopped, "test", "cancel answered")
	if asked < 0 || stopped < 0 || answered < 0 {
		t.Fatalf("the cancel did not answer after the job stopped:\n%s", gputest.Dump(ev))
	}
	f.waitState(t, "idle after the cancel", func(st Status) bool { return st.State == "idle" })
	if jobs := f.m.get(&f.m.jobs); len(jobs) != 1 || jobs[0] != "interrupted" {
		t.Fatalf("jobs ended %v, want one interrupted", jobs)
	}
	if f.comfy.Frees() == 0 {
		t.Fatal("ComfyUI not freed after the cancelled job")
	}
}

// A cancel while the LLM engines are emptied for the job: the job is
// never sent, and the cancel answers once it has ended.
func TestCancelBeforeTheJobIsSentEndsItUnsent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	job, err := f.g.BeginImage(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	ch := f.cancelAsync(t, job)
	if err := job.Prepare(); err != nil {
		t.Fatal(err)
	}
	notYet(t, ch, "the job ended")
	if err := job.Submitting(); !errors.Is(err, ErrCancelledBeforeSent) {
		t.Fatalf("Submitting a cancelled job: %v, want ErrCancelledBeforeSent", err)
	}
	r := <-ch
	if r.err != nil || r.res.Outcome != "cancelled" || r.res.PromptID != nil {
		t.Fatalf("cancel answered %+v %v, want cancelled with no prompt_id", r.res, r.err)
	}
	if f.comfy.Prompts() != 0 {
		t.Fatal("the cancelled job reached ComfyUI")
	}
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })
}

// A cancel while the prompt is being forwarded waits for its prompt_id,
// then interrupts it.
func TestCancelWhileSubmittingInterruptsOnceQueued(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	job := f.startJob(t)
	job.Submitting()
	ch := f.cancelAsync(t, job)
	id := f.submitRunning(t, time.Hour)
	notYet(t, ch, "the job had a prompt_id")
	job.Submitted(id)
	r := <-ch
	if r.err != nil || r.res.Outcome != "interrupted" || r.res.PromptID == nil || *r.res.PromptID != id {
		t.Fatalf("cancel answered %+v %v, want %s interrupted", r.res, r.err, id)
	}
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })
}

// A job that has ended while the GPU drains work queued on ComfyUI behind
// it: the cancel says how it ended, interrupting nothing.
func TestCancelOfAnEndedJobSaysHowItEnded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	job := f.startJob(t)
	job.Submitting()
	id := f.comfy.Submit(20 * time.Millisecond)
	other := f.comfy.Submit(time.Hour) // queued on ComfyUI directly
	job.Submitted(id)
	f.waitState(t, "draining the queue", func(st Status) bool { return st.Job != nil && st.Job.Phase == "draining queue" })
	res, err := f.g.CancelJob(context.Background())
	if err != nil || res.Outcome != "success" || *res.PromptID != id {
		t.Fatalf("cancel answered %+v %v, want %s success", res, err, id)
	}
	if ev := f.card.Events(); gputest.Index(ev, 0, "comfy", "interrupt requested") >= 0 {
		t.Fatalf("the cancel interrupted other work:\n%s", gputest.Dump(ev))
	}
	f.waitTimeline(t, "the other job running", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "comfy", "job "+other+" start") >= 0
	})
	f.clients.comfy.Interrupt(context.Background(), other)
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })
}

// A job that does not stop within interrupt_grace gets an error, not a
// claim that it stopped; it keeps the GPU.
func TestCancelNotStoppedWithinGraceIsAnError(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, comfytest.Options{InterruptDelay: time.Hour}, func(c *Config) { c.InterruptGrace = 300 * time.Millisecond })
	job := f.startJob(t)
	job.Submitting()
	id := f.submitRunning(t, time.Hour)
	job.Submitted(id)
	res, err := f.g.CancelJob(context.Background())
	if !errors.Is(err, ErrNotStopped) || res.Outcome != "" || *res.PromptID != id {
		t.Fatalf("cancel answered %+v %v, want ErrNotStopped for %s", res, err, id)
	}
	if st := f.g.Status(); st.State != "image" || st.Job == nil || st.Job.PromptID != id {
		t.Fatalf("the job no longer holds the GPU: %+v", st)
	}
	f.comfy.Restart() // the only way to stop it now
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })
}

func TestCancelWithoutAJobOfOurs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	if _, err := f.g.CancelJob(context.Background()); !errors.Is(err, ErrNoJob) {
		t.Fatalf("idle: %v, want ErrNoJob", err)
	}
	h, err := f.g.TakeHold(context.Background(), "game", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.CancelJob(context.Background()); !errors.Is(err, ErrNoJob) {
		t.Fatalf("held: %v, want ErrNoJob", err)
	}
	h.End("released")
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })

	f.bypassed = true // work queued on ComfyUI directly runs before the turnstile sees it
	id := f.submitRunning(t, time.Hour)
	f.waitState(t, "direct work holding the GPU", func(st Status) bool { return st.Job != nil && st.Job.Source == "comfyui" })
	if _, err := f.g.CancelJob(context.Background()); !errors.Is(err, ErrNotOurJob) {
		t.Fatalf("direct work: %v, want ErrNotOurJob", err)
	}
	f.clients.comfy.Interrupt(context.Background(), id)
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })
}

// A cancel whose caller goes away while the prompt is being forwarded
// stands: the job is interrupted once queued all the same.
func TestCancelStandsWhenItsCallerLeaves(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	job := f.startJob(t)
	job.Submitting()
	ctx, leave := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := f.g.CancelJob(ctx)
		left <- err
	}()
	select {
	case <-job.stop.asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the cancel was never asked for")
	}
	leave()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel whose caller left: %v", err)
	}
	id := f.submitRunning(t, time.Hour)
	job.Submitted(id)
	f.waitState(t, "idle after the interrupt", func(st Status) bool { return st.State == "idle" })
	if h := f.g.History(time.Time{}).Jobs; len(h) != 1 || h[0].Outcome != "interrupted" {
		t.Fatalf("history %+v, want the job interrupted", h)
	}
}
