package turnstile

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// The tests here are the cases in which the GPU was handed over while in
// use in front of the real Ollama and ComfyUI. The fakes behave as those
// servers do, and the simulated GPU's overlap count (checked when each
// harness ends) is the judge.

// ComfyUI stops an interrupted job only at its next node: the GPU stays
// ComfyUI's until the job has ended, and the free comes after it.
func TestInterruptedJobKeepsTheGPUUntilItStops(t *testing.T) {
	h := newHarness(t, harnessOptions{
		settings: "job_timeout 300ms",
		comfy:    comfytest.Options{JobDuration: time.Hour, InterruptDelay: 1500 * time.Millisecond},
	})
	ctx := context.Background()
	id := promptID(t, h.post(ctx, h.image+"/prompt", promptBody(3_600_000)))
	h.waitTimeline("interrupt", func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "comfy", "interrupt requested "+id) >= 0 })
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("LLM request after the interrupted job: %d %s", r.status, r.body)
	}
	ev := h.gpu.Events()
	end := gputest.Index(ev, 0, "comfy", "job "+id+" end execution_interrupted")
	free := gputest.Index(ev, end, "comfy", "free requested")
	llm := gputest.Index(ev, 0, "ollama", "request /api/chat")
	if end < 0 || free < end || llm < free {
		t.Fatalf("want the job's real end, then the free, then the LLM request:\n%s", gputest.Dump(ev))
	}
	if r := h.ts().gpu.History(time.Time{}).Jobs; len(r) == 0 || r[len(r)-1].Outcome != "timeout" {
		t.Fatalf("job history %+v, want the job recorded as timed out", r)
	}
}

// ComfyUI's free gives PyTorch's reserved memory back only at its very
// end; a reading that has not moved for a second is no confirmation.
func TestSlowFreeIsWaitedFor(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfytest.Options{JobDuration: 50 * time.Millisecond, FreeDelay: 1500 * time.Millisecond}})
	ctx := context.Background()
	id := promptID(t, h.post(ctx, h.image+"/prompt", promptBody(50)))
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("LLM request after the job: %d %s", r.status, r.body)
	}
	ev := h.gpu.Events()
	freed := gputest.Index(ev, gputest.Index(ev, 0, "comfy", "job "+id+" end"), "comfy", "free")
	if llm := gputest.Index(ev, 0, "ollama", "request /api/chat"); freed < 0 || llm < freed {
		t.Fatalf("the LLM request went before ComfyUI's free took effect:\n%s", gputest.Dump(ev))
	}
}

// A CPU device gives no GPU reading: with min_free_vram on the comfy
// probe, jobs go ahead (the status says so) instead of each waiting out
// unload_timeout and failing.
func TestNoGPUReadingIsReportedNotWaitedOut(t *testing.T) {
	h := newHarness(t, harnessOptions{
		settings: "min_free_vram 1GiB\nunload_timeout 2s",
		comfy:    comfytest.Options{JobDuration: 20 * time.Millisecond, Device: "cpu"},
	})
	if r := h.post(context.Background(), h.image+"/prompt", promptBody(20)); r.status != 200 {
		t.Fatalf("image job with a CPU ComfyUI: %d %s", r.status, r.body)
	}
	h.waitIdle()
	st := h.status()
	if gr := st.Upstreams["comfy"].GPUReading; gr == nil || *gr {
		t.Fatalf("status upstreams.comfy %+v, want gpu_reading false", st.Upstreams["comfy"])
	}
	h.overlapExpected = true // nothing on a CPU can be confirmed; the point is the answer
}

// A client that goes away while its model loads: Ollama aborts the load,
// but the runner holds memory some 300 ms more and is never listed.
func TestClientGoneMidLoadDelaysTheHandOver(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts ollamatest.Options
	}{
		{"settle", ollamatest.Options{LoadDelay: time.Hour, AbortDelay: 400 * time.Millisecond}},
		// A runner that outlives the settle is still seen, as a process.
		{"runner process", ollamatest.Options{LoadDelay: time.Hour, AbortDelay: 2500 * time.Millisecond, RunnerProcesses: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{ollama: tc.opts, comfy: comfyOpts(20 * time.Millisecond)})
			ctx, cancel := context.WithCancel(context.Background())
			chat := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
			h.waitTimeline("load", func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "ollama", "load llama3.2") >= 0 })
			cancel()
			<-chat
			h.waitTimeline("abort", func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "ollama", "abort llama3.2") >= 0 })
			if r := h.post(context.Background(), h.image+"/prompt", promptBody(20)); r.status != 200 {
				t.Fatalf("image job after the aborted load: %d %s", r.status, r.body)
			}
			h.waitIdle()
		})
	}
}

// A warm-up that hits warm_timeout is cancelled mid-load, with the same
// lingering runner.
func TestWarmTimeoutDelaysTheHandOver(t *testing.T) {
	h := newHarness(t, harnessOptions{
		settings: "warm_model llama3.2\nwarm_timeout 200ms",
		ollama:   ollamatest.Options{LoadDelay: time.Hour, AbortDelay: 400 * time.Millisecond},
		comfy:    comfyOpts(20 * time.Millisecond),
	})
	ctx := context.Background()
	h.releaseHold(t, h.takeHold(t, "first", "1m")) // its end starts the warm-up
	h.waitTimeline("warm-up cut short", func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "ollama", "abort llama3.2") >= 0 })
	h.waitStatus("warm-up over", func(st Status) bool { return !st.Warming })
	if r := h.post(ctx, h.image+"/prompt", promptBody(20)); r.status != 200 {
		t.Fatalf("image job after the failed warm-up: %d %s", r.status, r.body)
	}
	h.waitIdle()
}

// A request with its own keep_alive reaching Ollama while an unload is
// pending cancels it; the unload is sent again instead of polling until
// unload_timeout. Here the requests come from clients on Ollama's own port,
// which the turnstile cannot hold back.
func TestCancelledUnloadIsSentAgain(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "unload_timeout 3s", comfy: comfyOpts(20 * time.Millisecond)})
	h.overlapExpected = true // the direct requests bypass the turnstile
	ctx := context.Background()
	resume := h.ollama.HoldChats()
	direct := func(body string) <-chan result { return h.postAsync(ctx, h.ollama.URL+"/api/generate", body) }
	first := direct(`{"model":"llama3.2","prompt":"x","stream":false}`)
	h.waitTimeline("direct request running", func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "ollama", "ready llama3.2") >= 0 })
	img := h.postAsync(ctx, h.image+"/prompt", promptBody(20))
	h.waitTimeline("unload pending", func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "ollama", "unload requested") >= 0 })
	second := direct(`{"model":"llama3.2","prompt":"y","stream":false,"keep_alive":"5m"}`)
	h.waitTimeline("unload cancelled", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "ollama", "keep_alive cancels the pending stop") >= 0
	})
	resume()
	<-first
	<-second
	if r := <-img; r.status != 200 {
		t.Fatalf("image job after a cancelled unload: %d %s", r.status, r.body)
	}
	ev := h.gpu.Events()
	if gputest.Index(ev, 0, "ollama", "unload llama3.2") > gputest.Index(ev, 0, "comfy", "queued") {
		t.Fatalf("ComfyUI got the prompt before Ollama was empty:\n%s", gputest.Dump(ev))
	}
	h.waitIdle()
}

// `ollama serve` killed hard: the port refuses, the runners live on with
// their memory. The GPU is not handed over until they are gone.
func TestKilledOllamaWithOrphanedRunner(t *testing.T) {
	h := newHarness(t, harnessOptions{
		settings: "unload_timeout 20s",
		ollama:   ollamatest.Options{RunnerProcesses: true},
		comfy:    comfyOpts(20 * time.Millisecond),
	})
	ctx := context.Background()
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	pids := h.ollama.RunnerPIDs()
	h.ollama.Kill()
	if len(pids) != 1 || !isRunnerProcess(pids[0]) {
		t.Fatalf("runner processes %v: want one alive after the kill", pids)
	}
	img := h.postAsync(ctx, h.image+"/prompt", promptBody(20))
	h.waitStatus("job waiting on the orphan", func(st Status) bool { return st.Job != nil && st.Job.Phase == "unloading" })
	select {
	case r := <-img:
		t.Fatalf("image job answered %d %s while an orphaned runner holds the GPU", r.status, r.body)
	default:
	}
	h.ollama.KillRunners()
	if r := <-img; r.status != 200 {
		t.Fatalf("image job once the orphan is gone: %d %s", r.status, r.body)
	}
	h.waitIdle()
}

// An orphan that never exits: the job is refused, with a message that
// says why.
func TestKilledOllamaOrphanRefusesTheJob(t *testing.T) {
	h := newHarness(t, harnessOptions{
		settings: "unload_timeout 2s",
		ollama:   ollamatest.Options{RunnerProcesses: true},
	})
	ctx := context.Background()
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	pids := h.ollama.RunnerPIDs()
	if len(pids) != 1 {
		t.Fatalf("runner processes %v; want one", pids)
	}
	h.ollama.Kill()
	r := h.post(ctx, h.image+"/prompt", promptBody(20))
	if r.status != 503 || !strings.Contains(r.body, strconv.Itoa(pids[0])) {
		t.Fatalf("got %d %s, want 503 naming the runner process %d", r.status, r.body, pids[0])
	}
	if h.comfy.Prompts() != 0 {
		t.Fatal("ComfyUI got the prompt")
	}
}

// isRunnerProcess reports whether pid is alive with a runner's command line.
func isRunnerProcess(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && strings.HasPrefix(string(b), "ollama\x00runner\x00")
}
