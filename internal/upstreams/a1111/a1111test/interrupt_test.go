package a1111test_test

import (
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// POST /sdapi/v1/interrupt answers {} at once; the job stops at its next
// step, and the txt2img call then answers 200 with what it has.
// state.interrupted stays set after an API job (State.end keeps it).
func TestInterruptStopsTheJobAtItsNextStep(t *testing.T) {
	t.Parallel()
	// Steps of 500ms: the interrupt's answer comes long before the next one.
	srv, gpu := newFake(t, a1111test.Options{JobDuration: 3 * time.Second, Steps: 6})
	resume := srv.HoldJobs()
	defer resume()
	res := postAsync(srv.URL()+"/sdapi/v1/txt2img", txt2img)
	waitEvent(t, gpu, 0, "job 1 txt2img held after step 1")
	a := post(t, srv.URL()+"/sdapi/v1/interrupt", "")
	if a.status != 200 || a.body != "{}" {
		t.Fatalf("interrupt: %d %s, want 200 {}", a.status, a.body)
	}
	if gputest.Index(gpu.Events(), 0, "a1111", "job 1 txt2img end") >= 0 {
		t.Fatal("the job ended before the interrupt answered")
	}
	a = recv(t, res)
	if a.status != 200 || len(decode(t, a.body)["images"].([]any)) != 1 {
		t.Fatalf("interrupted txt2img: %d %s, want 200 with the image made so far", a.status, a.body)
	}
	waitEvent(t, gpu, 0, "job 1 txt2img end: interrupted")
	_, st := progressState(t, srv)
	if num(st["sampling_step"]) != 2 || st["interrupted"] != true || num(st["job_count"]) != 0 {
		t.Fatalf("state after the interrupt %v, want it stopped at step 2 of 6, interrupted, idle", st)
	}
}

// State.begin clears the interrupt flag: an interrupt sent while no job
// runs (or while one waits for the lock) does not stop the next job.
func TestInterruptBeforeAJobBeginsDoesNothingToIt(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, a1111test.Options{Steps: 3})
	post(t, srv.URL()+"/sdapi/v1/interrupt", "")
	if _, st := progressState(t, srv); st["interrupted"] != true {
		t.Fatalf("state %v, want interrupted set while idle", st)
	}
	if a := post(t, srv.URL()+"/sdapi/v1/txt2img", txt2img); a.status != 200 {
		t.Fatalf("txt2img: %d %s", a.status, a.body)
	}
	if _, st := progressState(t, srv); num(st["sampling_step"]) != 3 || st["interrupted"] != false {
		t.Fatalf("state %v, want all 3 steps run and the flag cleared", st)
	}
}

// A UI job takes the same lock, shows in /progress as "task(…)", and is
// interrupted alike; after it, wrap_gradio_call clears the flags.
func TestUIJobShowsInProgressAndClearsItsFlags(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{})
	resume := srv.HoldJobs()
	defer resume()
	done := srv.StartUIJob(60 * time.Millisecond)
	waitEvent(t, gpu, 0, "job 1 ui held after step 1")
	if _, st := progressState(t, srv); st["job"] != "task(0000000000000001)" || num(st["job_count"]) != 1 {
		t.Fatalf("state %v, want the UI job", st)
	}
	post(t, srv.URL()+"/sdapi/v1/interrupt", "")
	closed(t, done)
	waitEvent(t, gpu, 0, "job 1 ui end: interrupted")
	if _, st := progressState(t, srv); st["interrupted"] != false || num(st["job_count"]) != 0 || st["job"] != "" {
		t.Fatalf("state after the UI job %v, want idle with the flags cleared", st)
	}
	if srv.Jobs() != 1 {
		t.Fatalf("Jobs %d, want 1", srv.Jobs())
	}
}
