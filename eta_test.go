package turnstile

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// checkpointPrompt is a prompt whose workflow has a signature (the
// checkpoint it loads), which runs for ms on the fake.
func checkpointPrompt(ms int) string {
	return fmt.Sprintf(`{"prompt":{"4":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":"sd15.safetensors"}},`+
		`"3":{"class_type":"KSampler","inputs":{"seed":%d}},"9":{"class_type":"SaveImage","inputs":{}}},"client_id":"browser","extra_data":{"fake_duration_ms":%d}}`,
		promptSeed.Add(1), ms)
}

// waiterOf returns the first waiter of kind in st, if any.
func waiterOf(st Status, kind string) (gpu.WaiterStatus, bool) {
	for _, w := range st.Waiters {
		if w.Kind == kind {
			return w, true
		}
	}
	return gpu.WaiterStatus{}, false
}

// predicted waits until the waiter of kind has an expected start, and
// returns it.
func (h *harness) predicted(what, kind string) gpu.WaiterStatus {
	h.t.Helper()
	st := h.waitStatus(what, func(st Status) bool {
		w, ok := waiterOf(st, kind)
		return ok && w.ExpectedStart != nil
	})
	w, _ := waiterOf(st, kind)
	return w
}

// startedAt waits until no waiter of kind is left, and returns when that
// was seen.
func (h *harness) startedAt(what, kind string) time.Time {
	h.t.Helper()
	h.waitStatus(what, func(st Status) bool { _, ok := waiterOf(st, kind); return !ok })
	return time.Now()
}

// closeEnough checks a predicted start against the actual one: within
// 25 % of the wait, or a second.
func closeEnough(t *testing.T, what string, since time.Time, predicted, actual time.Time) {
	t.Helper()
	wait := actual.Sub(since)
	t.Logf("%s: predicted %v, started %v after it began to wait", what, predicted.Sub(since), wait)
	if off := predicted.Sub(actual).Abs(); off > max(wait/4, time.Second) {
		t.Errorf("%s: predicted %v after it began to wait, started after %v", what, predicted.Sub(since), wait)
	}
}

// Once a workflow has run three times, the waiters behind its next job
// see their positions and expected starts, within 25 % of when they
// start; the figures are in the status, and still there after a restart
// of Caddy on the same storage.
func TestExpectedStartsBehindAJob(t *testing.T) {
	const jobMS = 1500
	h := newHarness(t, harnessOptions{comfy: comfyOpts(jobMS * time.Millisecond)})
	_, cf := h.withStorage()
	h.load(cf)
	h.waitIdle()
	ctx := context.Background()
	for i := range 3 {
		promptID(t, h.post(ctx, h.image+"/prompt", checkpointPrompt(jobMS)))
		h.waitStatus("job ended", func(st Status) bool {
			return st.Learned != nil && st.Learned.AnyJob.Len() == i+1 && st.State == "idle"
		})
	}
	st := h.status()
	if len(st.Learned.Jobs) != 1 {
		t.Fatalf("learned %+v, want one workflow", st.Learned)
	}

	job := h.postAsync(ctx, h.image+"/prompt", checkpointPrompt(jobMS))
	h.waitStatus("the job running", func(st Status) bool { return st.Job != nil && st.Job.Phase == "running" })
	since := time.Now()
	next := h.postAsync(ctx, h.image+"/prompt", checkpointPrompt(jobMS))
	img := h.predicted("the image waiter's expected start", "image")
	chat := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	llm := h.predicted("the LLM waiter's expected start", "llm")
	if img.Position != 1 || img.WaitingFor != "job" || llm.Position != 2 || llm.WaitingFor != "job" {
		t.Fatalf("waiters %+v %+v: want the image job 1st and the LLM request 2nd, both waiting for the job", img, llm)
	}
	if !llm.ExpectedStart.After(*img.ExpectedStart) {
		t.Fatalf("the LLM request expected at %v, before the image job it waits behind (%v)", llm.ExpectedStart, img.ExpectedStart)
	}
	closeEnough(t, "image waiter", since, *img.ExpectedStart, h.startedAt("the image waiter started", "image"))
	closeEnough(t, "LLM waiter", since, *llm.ExpectedStart, h.startedAt("the LLM waiter started", "llm"))
	promptID(t, <-job)
	promptID(t, <-next)
	if r := <-chat; r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	h.waitIdle()

	before := h.status().Learned
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	h.load(cf)
	st = h.waitStatus("the figures read again", func(st Status) bool { return st.Learned != nil && !st.Learned.Empty() })
	for w, f := range before.Jobs {
		got, ok := st.Learned.Jobs[w]
		if !ok || got.Len() != f.Len() {
			t.Fatalf("after the restart: jobs %+v, want %+v", st.Learned.Jobs, before.Jobs)
		}
	}
	if st.Learned.Engines["comfyui"].Free.Len() == 0 && st.Learned.Engines["comfy"].Free.Len() == 0 {
		t.Fatalf("after the restart, no free time: %+v", st.Learned.Engines)
	}
}

// A hold's waiters expect it at its lease's end, and say they wait for
// it.
func TestExpectedStartsBehindAHold(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	ctx := context.Background()
	id := h.takeHold(t, "trainer", "2s")
	expires := h.ts().gpu.FindHold(id).Status().ExpiresAt
	chat := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	llm := h.predicted("the LLM waiter's expected start", "llm")
	if llm.Position != 1 || llm.WaitingFor != "hold" {
		t.Fatalf("waiter %+v: want 1st, waiting for the hold", llm)
	}
	if off := llm.ExpectedStart.Sub(expires).Abs(); off > time.Second {
		t.Fatalf("expected at %v, the hold ends at %v", llm.ExpectedStart, expires)
	}
	h.releaseHold(t, id)
	if r := <-chat; r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
}

// While the LLM engine is emptied for an image job, its waiters wait for
// the unload.
func TestWaitersSeeTheUnload(t *testing.T) {
	h := newHarness(t, harnessOptions{ollama: ollamatest.Options{UnloadDelay: 1500 * time.Millisecond}})
	ctx := context.Background()
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	job := h.postAsync(ctx, h.image+"/prompt", promptBody(50))
	h.waitStatus("the job unloading", func(st Status) bool { return st.Job != nil && st.Job.Phase == "unloading" })
	chat := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	st := h.waitStatus("the LLM waiter", func(st Status) bool {
		w, ok := waiterOf(st, "llm")
		return ok && w.WaitingFor == "unload" || st.Job == nil
	})
	if w, ok := waiterOf(st, "llm"); !ok || w.Position != 1 {
		t.Fatalf("status %+v: want an LLM waiter 1st, waiting for the unload", st.Waiters)
	}
	promptID(t, <-job)
	if r := <-chat; r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
}

// A busy answer says where the request would stand and when it would
// start, and its Retry-After (busy_retry_after auto) is that wait.
func TestBusyAnswerSaysThePlaceInLine(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "llm_busy_mode reject\nbusy_retry_after auto 10m"})
	h.takeHold(t, "game", "40s")
	r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false))
	want := "the GPU is busy with an external hold; you would be 1st in line, expected to start in about 4"
	if r.status != 503 || !strings.Contains(r.body, want) {
		t.Fatalf("busy answer %d %s, want it to say %q", r.status, r.body, want)
	}
	if secs, _ := strconv.Atoi(r.header.Get("Retry-After")); secs < 38 || secs > 40 {
		t.Fatalf("Retry-After %q during a 40s hold", r.header.Get("Retry-After"))
	}
}
