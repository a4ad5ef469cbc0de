//go:build unix

package turnstile

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// A llama.cpp router and a vLLM whose processes are real: the router's
// children, and vLLM's engine core, are processes charged on the
// simulated GPU for as long as they live. Any image job that starts while
// one lives shares the GPU, which fails the test.

// engineOfKind is the status's entry of the engine of kind.
func engineOfKind(st Status, kind string) gpu.EngineStatus {
	for _, e := range st.Engines {
		if e.Kind == kind {
			return e
		}
	}
	return gpu.EngineStatus{}
}

// procMix runs the LLM engine of kind with its processes real, and
// ComfyUI, behind a real Caddy.
func procMix(t *testing.T, kind string, cpp llamacpptest.Options, vllm vllmtest.Options, settings string) *mix {
	t.Helper()
	cpp.Processes, vllm.Processes = t, t
	cpp.ModelBytes, vllm.ModelBytes = 4<<30, 4<<30
	return newMix(t, mixOptions{engines: []string{kind, "comfyui"}, llamacpp: cpp, vllm: vllm, settings: settings})
}

// waitSeen waits until the turnstile has seen n processes serving the
// models of the engine of kind.
func (m *mix) waitSeen(kind string, n int) {
	m.t.Helper()
	m.waitStatus("the model servers seen", func(st Status) bool { return engineOfKind(st, kind).Processes >= n })
}

// jobAfter checks on the GPU's timeline that the image job began after
// the event gone of svc, and with none of svc's occupancies left.
func (m *mix) jobAfter(t *testing.T, svc, gone string) {
	t.Helper()
	ev := m.gpu.Events()
	start := gputest.Index(ev, 0, service("comfyui"), imageStartMark("comfyui"))
	at := gputest.Index(ev, 0, svc, gone)
	if start < 0 || at < 0 || start < at || usersAt(ev, svc, start) != 0 {
		t.Fatalf("want the job (%d) after %q (%d), with %s holding nothing:\n%s", start, gone, at, svc, gputest.Dump(ev))
	}
}

const (
	cppQuick = "qwen3-8b"   // loads at once
	cppSlow  = "gemma-3-4b" // loads for as long as the test says
)

// loadTwo chats with the quick model, then starts a chat with the slow
// one, whose child is loading when it returns, seen by the turnstile
// with the quick one's. It returns the slow child and its chat's answer.
func (m *mix) loadTwo(t *testing.T) (<-chan result, int) {
	t.Helper()
	ctx := context.Background()
	if r := m.post(ctx, m.chatPath("llamacpp"), chatBody(cppQuick, false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	slow := m.postAsync(ctx, m.chatPath("llamacpp"), chatBody(cppSlow, false))
	m.waitTimeline("the slow child's spawn", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, service("llamacpp"), "load "+cppSlow) >= 0
	})
	m.waitSeen("llamacpp", 2)
	c := m.llamacpp.Child(cppSlow)
	if c == nil || m.llamacpp.Status(cppSlow) != "loading" {
		t.Fatalf("%s: %q, want a child loading", cppSlow, m.llamacpp.Status(cppSlow))
	}
	return slow, c.PID()
}

// A llama.cpp router killed (SIGKILL) while a model loads: its loaded
// child exits at once, but the loading one lives until its load ends,
// holding its memory. The image job waits for it, then starts.
func TestKilledLlamaCppRoutersLoadingChildKeepsTheGPU(t *testing.T) {
	m := procMix(t, "llamacpp", llamacpptest.Options{LoadDelays: map[string]time.Duration{cppSlow: 3 * time.Second}},
		vllmtest.Options{}, "unload_timeout 20s")
	slow, pid := m.loadTwo(t)
	loading := m.llamacpp.Child(cppSlow)
	m.llamacpp.Kill()
	<-slow // cut with the router
	job := m.postAsync(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(20))
	select {
	case <-loading.Exited():
		t.Fatal("the loading child exited with its router")
	default:
	}
	promptID(t, <-job)
	if !closedChan(loading.Exited()) {
		t.Fatalf("the job ran while the loading child %d lived", pid)
	}
	m.waitIdle()
	m.jobAfter(t, service("llamacpp"), "load "+cppSlow+" exit")
}

// The same child held past unload_timeout: the job is refused, naming
// the engine and the child's PID; once the child is gone, a job runs.
func TestKilledLlamaCppRoutersChildPastUnloadTimeout(t *testing.T) {
	m := procMix(t, "llamacpp", llamacpptest.Options{LoadDelays: map[string]time.Duration{cppSlow: time.Hour}},
		vllmtest.Options{}, "unload_timeout 2s")
	slow, pid := m.loadTwo(t)
	loading := m.llamacpp.Child(cppSlow)
	m.llamacpp.Kill()
	<-slow
	r := m.post(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(20))
	if r.status != 503 || !strings.Contains(r.body, "llamacpp") || !strings.Contains(r.body, strconv.Itoa(pid)) {
		t.Fatalf("job with the loading child alive: %d %s; want 503 naming llamacpp and pid %d", r.status, r.body, pid)
	}
	if m.comfy.Prompts() != 0 {
		t.Fatal("ComfyUI got the prompt")
	}
	loading.Kill()
	m.runJob(t)
	m.jobAfter(t, service("llamacpp"), "load "+cppSlow+" exit")
}

// vLLM's memory is its engine core's: its API server killed (SIGKILL),
// the engine core lives on, holding it. The job is refused past
// unload_timeout, naming the engine core's PID; once it is gone, a job
// runs.
func TestKilledVLLMsEngineCoreKeepsTheGPU(t *testing.T) {
	m := procMix(t, "vllm", llamacpptest.Options{}, vllmtest.Options{}, "unload_timeout 2s")
	if r := m.post(context.Background(), m.chatPath("vllm"), chatBody(m.chatModel("vllm"), false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	m.waitSeen("vllm", 1)
	w := m.vllm.Worker()
	m.vllm.Kill()
	started := time.Now()
	r := m.post(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(20))
	if r.status != 503 || !strings.Contains(r.body, "vllm") || !strings.Contains(r.body, strconv.Itoa(w.PID())) {
		t.Fatalf("job with the engine core alive: %d %s; want 503 naming vllm and pid %d", r.status, r.body, w.PID())
	}
	if d := time.Since(started); d > 10*time.Second {
		t.Fatalf("refused after %v", d)
	}
	if m.comfy.Prompts() != 0 || closedChan(w.Exited()) {
		t.Fatal("ComfyUI got the prompt, or the engine core died with its API server")
	}
	w.Kill()
	m.runJob(t)
	m.jobAfter(t, service("vllm"), "weights "+m.chatModel("vllm")+" exit")
}

// runJob runs an image job to its end: the process left is gone, so
// nothing is in its way.
func (m *mix) runJob(t *testing.T) {
	t.Helper()
	promptID(t, m.post(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(20)))
	m.waitIdle()
}

func closedChan(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
