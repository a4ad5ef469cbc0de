package turnstile

import (
	"context"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/metrics"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// TestImageJobLifecycle follows one job through every step of the design
// and checks the order of the GPU's timeline.
func TestImageJobLifecycle(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "warm_model llama3.2", comfy: comfyOpts(200 * time.Millisecond)})
	ctx := context.Background()

	// LLM streams hold the GPU; the image request must wait for them.
	resume := h.ollama.HoldChats()
	finishA := h.streamStart(ctx, "/api/chat", chatBody("llama3.2", true))
	finishB := h.streamStart(ctx, "/v1/chat/completions", `{"model":"qwen3:8b","stream":true,"messages":[]}`)
	img := h.postAsync(ctx, h.image+"/api/prompt", promptBody(200))
	h.waitStatus("image waiting", func(st Status) bool { return st.ImageWaiting == 1 && st.ImagePending })
	if h.comfy.Prompts() != 0 {
		t.Fatal("ComfyUI got the prompt while LLM streams were in flight")
	}
	// New LLM requests queue behind the image (writer preference).
	late := h.postAsync(ctx, h.llm+"/api/generate", `{"model":"llama3.2","prompt":"hi","stream":false}`)
	h.waitStatus("LLM waiting behind the image", func(st Status) bool { return st.LLMWaiting == 1 })
	resume()
	finishA()
	finishB()
	id := promptID(t, <-img)

	if r := <-late; r.status != 200 {
		t.Fatalf("late LLM request: %d %s", r.status, r.body)
	}
	h.waitTimeline("warm-up after the job", func(ev []gputest.Event) bool {
		return gputest.Index(ev, gputest.Index(ev, 0, "comfy", "job "+id+" end"), "ollama", "load llama3.2") >= 0
	})
	h.waitIdle()

	ev := h.gpu.Events()
	unloadA := gputest.Index(ev, 0, "ollama", "unload llama3.2:latest")
	unloadB := gputest.Index(ev, 0, "ollama", "unload qwen3:8b")
	queued := gputest.Index(ev, 0, "comfy", "queued "+id)
	end := gputest.Index(ev, queued, "comfy", "job "+id+" end execution_success")
	freed := gputest.Index(ev, end, "comfy", "free")
	lateReq := gputest.Index(ev, end, "ollama", "request /api/generate")
	if unloadA < 0 || unloadB < 0 || queued < unloadA || queued < unloadB {
		t.Fatalf("ComfyUI got the prompt before Ollama was empty:\n%s", gputest.Dump(ev))
	}
	if end < 0 || freed < end || lateReq < freed {
		t.Fatalf("the waiting LLM request reached Ollama before the job ended and ComfyUI was freed:\n%s", gputest.Dump(ev))
	}
	if h.ollama.Warmups() != 1 {
		t.Fatalf("warm-ups %d, want 1", h.ollama.Warmups())
	}
}

func TestConsecutiveImageJobsSkipFreeAndWarm(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "warm_model llama3.2", comfy: comfyOpts(50 * time.Millisecond)})
	ctx := context.Background()
	// The GPU is held, so all three queue up and are served in a row.
	hold := h.takeHold(t, "batch", "1m")
	var results []<-chan result
	for i := range 3 {
		results = append(results, h.postAsync(ctx, h.image+"/prompt", promptBody(50)))
		h.waitStatus("image queued", func(st Status) bool { return st.ImageWaiting == i+1 })
	}
	freesBefore := h.comfy.Frees()
	h.releaseHold(t, hold)
	for _, ch := range results {
		promptID(t, <-ch)
	}
	h.waitTimeline("warm-up", func(ev []gputest.Event) bool { return count(ev, "ollama", "load") == 1 })
	h.waitIdle() // the warm-up answered (the fake counts it as it answers)
	if got := h.comfy.Frees() - freesBefore; got != 1 {
		t.Fatalf("ComfyUI was freed %d times for a batch of 3 jobs, want once at the end", got)
	}
	if h.ollama.Warmups() != 1 {
		t.Fatalf("warm-ups %d, want one after the batch", h.ollama.Warmups())
	}
}

func TestValidationErrorReleasesAtOnce(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.waitIdle()
	frees := h.comfy.Frees() // the start-up free, if ComfyUI answered the probe
	r := h.post(context.Background(), h.image+"/prompt", `{"prompt":{"1":{"class_type":"ImageBlur","inputs":{"blur_radius":40}},"9":{"class_type":"PreviewImage"}}}`)
	if r.status != 400 || !strings.Contains(r.body, "prompt_outputs_failed_validation") || !strings.Contains(r.body, "node_errors") {
		t.Fatalf("got %d %s, want ComfyUI's 400 unchanged", r.status, r.body)
	}
	h.waitIdle()
	if h.comfy.Frees() != frees {
		t.Fatal("freed after a prompt that queued nothing")
	}
	// Non-JSON gets ComfyUI's 500, and releases too.
	if r := h.post(context.Background(), h.image+"/api/prompt", `nope`); r.status != 500 {
		t.Fatalf("non-JSON prompt: %d", r.status)
	}
	h.waitIdle()
}

// A request handed the GPU straight after a job, which then fails, must
// still free the previous job's models before LLM use.
func TestFailedHandOverStillFrees(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfyOpts(100 * time.Millisecond)})
	ctx := context.Background()
	hold := h.takeHold(t, "x", "1m")
	good := h.postAsync(ctx, h.image+"/prompt", promptBody(100))
	h.waitStatus("first queued", func(st Status) bool { return st.ImageWaiting == 1 })
	bad := h.postAsync(ctx, h.image+"/prompt", `{"prompt":{"1":{"class_type":"Invalid"}}}`)
	h.waitStatus("second queued", func(st Status) bool { return st.ImageWaiting == 2 })
	llm := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("LLM queued", func(st Status) bool { return st.LLMWaiting == 1 })
	h.releaseHold(t, hold)
	promptID(t, <-good)
	if r := <-bad; r.status != 400 {
		t.Fatalf("bad prompt: %d", r.status)
	}
	if r := <-llm; r.status != 200 {
		t.Fatalf("LLM after the batch: %d %s", r.status, r.body)
	}
	h.waitIdle()
	ev := h.gpu.Events()
	if gputest.Index(ev, 0, "comfy", "free") < 0 || h.comfy.Reserved() != 0 {
		t.Fatalf("ComfyUI was not freed before the GPU went to Ollama:\n%s", gputest.Dump(ev))
	}
}

// A client that goes away once ComfyUI has its prompt does not free the
// GPU: ComfyUI runs the job anyway.
func TestClientGoneAfterSubmitStillHoldsForTheJob(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfyOpts(300 * time.Millisecond)})
	ctx, cancel := context.WithCancel(context.Background())
	ch := h.postAsync(ctx, h.image+"/prompt", promptBody(300))
	h.waitTimeline("prompt queued", func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "queued") >= 0 })
	cancel()
	<-ch
	st := h.waitStatus("job held", func(st Status) bool { return st.Job != nil && st.Job.PromptID != "" })
	llm := h.postAsync(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false))
	if r := <-llm; r.status != 200 {
		t.Fatalf("LLM: %d", r.status)
	}
	ev := h.gpu.Events()
	end := gputest.Index(ev, 0, "comfy", "job "+st.Job.PromptID+" end")
	if end < 0 || gputest.Index(ev, end, "ollama", "request") < 0 {
		t.Fatalf("LLM ran before the abandoned job ended:\n%s", gputest.Dump(ev))
	}
	h.waitIdle()
}

func TestComfyRestartMidJobReleases(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfyOpts(time.Hour)})
	id := promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(3_600_000)))
	h.waitStatus("job running", func(st Status) bool { return st.Job != nil && st.Job.PromptID == id })
	h.comfy.Restart()
	h.waitIdle()
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("LLM after the restart: %d", r.status)
	}
}

func TestLostWebsocketFallsBackToPolling(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "backoff 50ms 200ms", comfy: comfyOpts(100 * time.Millisecond)})
	// Up on both sides: the client sees the upgrade before the fake has
	// registered the socket that DropSockets closes.
	h.waitStatus("websocket up", func(st Status) bool { return *st.Upstreams["comfy"].Websocket && h.comfy.Sockets() > 0 })
	h.comfy.RefuseSockets(true) // it stays down, however often the watch retries
	h.comfy.DropSockets()
	h.waitStatus("websocket down", func(st Status) bool { return !*st.Upstreams["comfy"].Websocket })
	promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(100)))
	h.waitIdle()
}

func TestJobTimeoutInterruptsAndReleases(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "job_timeout 300ms", comfy: comfyOpts(time.Hour)})
	id := promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(3_600_000)))
	h.waitIdle()
	ev := h.gpu.Events()
	if gputest.Index(ev, 0, "comfy", "job "+id+" end execution_interrupted") < 0 {
		t.Fatalf("the job was not interrupted at job_timeout:\n%s", gputest.Dump(ev))
	}
}

func TestUnloadTimeoutRefusesTheJob(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "unload_timeout 200ms"})
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatal(r.status)
	}
	h.ollama.SetUnloadStuck(true)
	r := h.post(context.Background(), h.image+"/prompt", promptBody(10))
	if r.status != 503 || !strings.Contains(r.body, "llama3.2:latest") {
		t.Fatalf("got %d %s, want 503 naming the model", r.status, r.body)
	}
	if h.comfy.Prompts() != 0 {
		t.Fatal("the prompt reached ComfyUI with Ollama still loaded")
	}
	h.waitIdle()
}

func TestComfyUnreachableGives502AndReleases(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.comfy.Close()
	r := h.post(context.Background(), h.image+"/prompt", promptBody(10))
	if r.status != 502 {
		t.Fatalf("got %d, want the proxy's 502", r.status)
	}
	h.waitIdle()
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("LLM after: %d", r.status)
	}
}

func TestOllamaOnlyPassesImagesThrough(t *testing.T) {
	h := newHarness(t, harnessOptions{noComfy: true})
	r := h.post(context.Background(), h.image+"/prompt", promptBody(10))
	if r.status != 200 {
		t.Fatal(r.status)
	}
	if st := h.ts().status(); st.State != "idle" {
		t.Fatalf("state %s", st.State)
	}
	// The GPU was shared in the fake, by design: nothing to arbitrate.
	h.waitTimeline("job ran", func(ev []gputest.Event) bool { return count(ev, "comfy", "end") == 1 })
}

func TestComfyOnlySkipsUnloadAndWarm(t *testing.T) {
	h := newHarness(t, harnessOptions{noOllama: true})
	promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(10)))
	h.waitIdle()
	if h.ollama.Unloads() != 0 {
		t.Fatal("unloaded a disabled Ollama")
	}
}

func TestWorkQueuedAtStartHoldsTheGPU(t *testing.T) {
	var id string
	h := newHarness(t, harnessOptions{beforeLoad: func(h *harness) { id = h.comfy.Submit(300 * time.Millisecond) }})
	// The first request after start-up must wait for the job queued
	// before Caddy started.
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatal(r.status)
	}
	ev := h.gpu.Events()
	if end, req := gputest.Index(ev, 0, "comfy", "job "+id+" end"), gputest.Index(ev, 0, "ollama", "request"); end < 0 || req < end {
		t.Fatalf("LLM ran during work queued before start-up:\n%s", gputest.Dump(ev))
	}
	h.waitIdle()
}

func TestForeignWorkTakesTheGPU(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.waitStatus("websocket up", func(st Status) bool { return *st.Upstreams["comfy"].Websocket })
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatal(r.status)
	}
	h.overlapExpected = true                     // until the turnstile has reacted
	id := h.comfy.Submit(300 * time.Millisecond) // ComfyUI's own UI, not through Caddy
	// The lock is taken a moment before the work is recorded as its job.
	st := h.waitStatus("image for foreign work", func(st Status) bool { return st.State == "image" && st.Job != nil })
	if st.Job.Source != "comfyui" {
		t.Fatalf("status %+v, want the job's source named", st)
	}
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatal(r.status)
	}
	ev := h.gpu.Events()
	end := gputest.Index(ev, 0, "comfy", "job "+id+" end")
	if end < 0 || gputest.Index(ev, end, "ollama", "request") < 0 {
		t.Fatalf("LLM ran during work queued directly on ComfyUI:\n%s", gputest.Dump(ev))
	}
	if unload := gputest.Index(ev, gputest.Index(ev, 0, "comfy", "queued "+id), "ollama", "unload"); unload < 0 || unload > end {
		t.Fatalf("Ollama was not emptied for the foreign job:\n%s", gputest.Dump(ev))
	}
	h.waitIdle()
}

// Ollama not running (nothing listens) holds no GPU memory: the job runs.
func TestOllamaRefusingConnectionsLetsTheJobRun(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ollama.Close()
	promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(10)))
	h.waitIdle()
}

// Ollama answering errors may still hold models: the job is refused.
func TestOllamaFailingRefusesTheJob(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.ollama.SetPSStatus(500)
	r := h.post(context.Background(), h.image+"/prompt", promptBody(10))
	if r.status != 503 || !strings.Contains(r.body, "ollama") || h.comfy.Prompts() != 0 {
		t.Fatalf("got %d %s, want 503 and no prompt at ComfyUI", r.status, r.body)
	}
	h.waitIdle()
	if got := counterValue(t, metrics.UpstreamErrors.WithLabelValues("default", "ollama", "ollama", "unload")); got < 1 {
		t.Fatal("the failed unload was not counted")
	}
}

// A free that does not take effect within free_timeout is reported, and
// the GPU is released anyway (nothing may hold it forever).
func TestFreeTimeoutReleases(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "free_timeout 200ms"})
	h.comfy.SetFreeStuck(true)
	before := counterValue(t, metrics.UpstreamErrors.WithLabelValues("default", "comfy", "comfyui", "free"))
	promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(10)))
	h.waitIdle()
	if got := counterValue(t, metrics.UpstreamErrors.WithLabelValues("default", "comfy", "comfyui", "free")) - before; got != 1 {
		t.Fatalf("free failures counted %v, want 1", got)
	}
}
