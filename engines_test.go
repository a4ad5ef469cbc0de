package turnstile

import (
	"context"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

var allLLMKinds = func() []string {
	var ns []string
	for _, k := range kinds.Of(engine.ClassLLM) {
		ns = append(ns, k.Name)
	}
	return ns
}()

// Chats to every kind of LLM engine share the GPU.
func TestLLMEnginesShareTheGPU(t *testing.T) {
	m := newMix(t, mixOptions{engines: append(append([]string{}, allLLMKinds...), "comfyui")})
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, kind := range allLLMKinds {
		for range 3 {
			wg.Go(func() {
				if r := m.post(ctx, m.chatPath(kind), chatBody(m.chatModel(kind), false)); r.status != 200 {
					t.Errorf("%s chat: %d %s %v", kind, r.status, r.body, r.err)
				}
			})
		}
	}
	wg.Wait()
	for _, kind := range allLLMKinds {
		if m.gpu.Users(kind) == 0 && kind != "vllm" {
			t.Errorf("%s holds no model after its chats", kind)
		}
	}
	if m.gpu.Users("vllm") == 0 {
		t.Error("vllm's weights are not on the GPU")
	}
}

// An image job of each image engine waits until every LLM engine has been
// emptied and the emptying confirmed; the overlap check fails the test
// otherwise.
func TestImageJobsEmptyEveryLLMEngine(t *testing.T) {
	for _, image := range []string{"comfyui", "a1111"} {
		t.Run(image, func(t *testing.T) {
			m := newMix(t, mixOptions{engines: append(append([]string{}, allLLMKinds...), image)})
			ctx := context.Background()
			for _, kind := range allLLMKinds {
				if r := m.post(ctx, m.chatPath(kind), chatBody(m.chatModel(kind), false)); r.status != 200 {
					t.Fatalf("%s chat: %d %s", kind, r.status, r.body)
				}
			}
			m.runImageJob(t, image)
			m.waitIdle()
			ev := m.gpu.Events()
			start := gputest.Index(ev, 0, service(image), imageStartMark(image))
			if start < 0 {
				t.Fatalf("no image job on the timeline:\n%s", gputest.Dump(ev))
			}
			for _, kind := range allLLMKinds {
				if users := usersAt(ev, kind, start); users != 0 {
					t.Errorf("%s still held %d occupancies when the %s job started:\n%s", kind, users, image, gputest.Dump(ev))
				}
			}
			st := m.status()
			if len(st.Engines) != len(allLLMKinds)+1 {
				t.Fatalf("engines %+v, want all %d", st.Engines, len(allLLMKinds)+1)
			}
			for _, e := range st.Engines {
				if e.Reachable == nil || !*e.Reachable {
					t.Errorf("engine %s not reachable in the status: %+v", e.Name, e)
				}
			}
		})
	}
}

// usersAt is a service's occupancy just before event i.
func usersAt(ev []gputest.Event, service string, i int) int {
	n := 0
	for _, e := range ev[:i] {
		if e.Service == service {
			n = e.Users
		}
	}
	return n
}

// imageStartMark is how a fake image engine marks a job's start.
func imageStartMark(kind string) string {
	if kind == "a1111" {
		return "job"
	}
	return "load models"
}

// vLLM asleep queues requests and never wakes by itself: it is woken,
// and the wake confirmed, before a chat that waited for the job goes to
// it; no chat is forwarded while it sleeps.
func TestVLLMIsWokenBeforeTheNextChat(t *testing.T) {
	m := newMix(t, mixOptions{engines: []string{"vllm", "comfyui"}, comfy: comfyOpts(300 * time.Millisecond),
		vllm: vllmtest.Options{WakeDelay: 100 * time.Millisecond}})
	ctx := context.Background()
	if r := m.post(ctx, m.chatPath("vllm"), chatBody(m.chatModel("vllm"), false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	promptID(t, m.post(ctx, m.sites["comfyui"]+"/prompt", promptBody(300)))
	m.waitStatus("vllm asleep", func(st Status) bool { return engineState(st, "vllm") == "asleep" })
	chat := m.postAsync(ctx, m.chatPath("vllm"), chatBody(m.chatModel("vllm"), false))
	m.waitStatus("the chat waits", func(st Status) bool { return st.LLMWaiting == 1 })
	if r := <-chat; r.status != 200 {
		t.Fatalf("chat after the job: %d %s", r.status, r.body)
	}
	if m.vllm.Queued() != 0 || m.vllm.Wakes() != 1 {
		t.Fatalf("vllm queued %d requests while asleep, woke %d times; want 0 and 1", m.vllm.Queued(), m.vllm.Wakes())
	}
	ev := m.gpu.Events()
	jobEnd := gputest.Index(ev, 0, "comfy", " end ")
	free := gputest.Index(ev, jobEnd, "comfy", "free requested")
	wake := gputest.Index(ev, 0, "vllm", "wake")
	served := gputest.Index(ev, wake, "vllm", "request /v1/chat/completions")
	if jobEnd < 0 || free < 0 || wake < free || served < wake {
		t.Fatalf("want ComfyUI's free, then vLLM's wake, then the chat:\n%s", gputest.Dump(ev))
	}
	if st := m.status(); engineState(st, "vllm") != "ready" {
		t.Fatalf("vllm %q after the wake, want ready", engineState(st, "vllm"))
	}
}

// A1111 gets its checkpoint back before a job after a free, and its free
// after the last job of a batch; back-to-back jobs are handed over with no
// free or reload between them.
func TestA1111ReloadBeforeFreeAfterAndBatches(t *testing.T) {
	m := newMix(t, mixOptions{engines: []string{"ollama", "a1111"}, a1111: a1111test.Options{JobDuration: 80 * time.Millisecond}})
	ctx := context.Background()
	m.waitIdle()
	if m.a1111.OnGPU() {
		t.Fatal("A1111's checkpoint, loaded at its launch, is still on the GPU after the start-up probe")
	}
	if r := m.post(ctx, m.chatPath("ollama"), chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d", r.status)
	}
	m.runImageJob(t, "a1111")
	m.waitIdle()
	if m.a1111.Reloads() != 1 || m.a1111.OnGPU() {
		t.Fatalf("reloads %d, on GPU %v after one job; want a reload before it and a free after", m.a1111.Reloads(), m.a1111.OnGPU())
	}
	hold := m.takeHold(t, "batch", "1m")
	var results []<-chan result
	for i := range 3 {
		results = append(results, m.postAsync(ctx, m.sites["a1111"]+"/sdapi/v1/txt2img", txt2imgBody()))
		m.waitStatus("job queued", func(st Status) bool { return st.ImageWaiting == i+1 })
	}
	unloads, reloads := m.a1111.Unloads(), m.a1111.Reloads()
	m.releaseHold(t, hold)
	for _, ch := range results {
		if r := <-ch; r.status != 200 {
			t.Fatalf("txt2img: %d %s", r.status, r.body)
		}
	}
	m.waitIdle()
	if got := m.a1111.Unloads() - unloads; got != 1 {
		t.Fatalf("A1111 unloaded %d times for a batch of 3, want once at the end", got)
	}
	if got := m.a1111.Reloads() - reloads; got != 1 {
		t.Fatalf("A1111 reloaded %d times for a batch of 3, want once before the first", got)
	}
	if n := count(m.gpu.Events(), "a1111", "unload during job"); n != 0 {
		t.Fatalf("%d unloads during a job", n)
	}
}

// An engine that cannot be emptied is reported, and exclusive use is then
// refused with 503 rather than sharing the GPU.
func TestUnemptiableEngineRefusesExclusiveUse(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts mixOptions
	}{
		{"single-model llama-server", mixOptions{engines: []string{"llamacpp", "comfyui"}, llamacpp: llamacpptest.Options{Single: "qwen3-8b"}}},
		{"vllm without sleep mode", mixOptions{engines: []string{"vllm", "comfyui"}, vllm: vllmtest.Options{NoDevMode: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMix(t, tc.opts)
			kind := tc.opts.engines[0]
			m.waitStatus("the engine reported", func(st Status) bool { return engineState(st, kind) == "cannot_empty" })
			if kind == "llamacpp" {
				m.waitTimeline("the model loaded", func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "llamacpp", "ready") >= 0 })
				if r := m.post(context.Background(), m.chatPath(kind), chatBody(m.chatModel(kind), false)); r.status != 200 {
					t.Fatalf("chat: %d %s", r.status, r.body)
				}
			}
			r := m.post(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(50))
			if r.status != 503 || !strings.Contains(r.body, "cannot be emptied") {
				t.Fatalf("prompt: %d %s; want 503 naming the engine that cannot be emptied", r.status, r.body)
			}
			if m.comfy.Prompts() != 0 {
				t.Fatal("the prompt reached ComfyUI")
			}
			hold := m.post(context.Background(), m.admin+"/gpu_turnstile/holds", `{"turnstile":"default","owner":"game","ttl":"1m"}`)
			if hold.status != 503 {
				t.Fatalf("hold: %d %s, want 503", hold.status, hold.body)
			}
		})
	}
}

// A job started in A1111's own UI is seen through /progress and guarded:
// the LLM engines are emptied and LLM requests wait until it has ended and
// A1111 has been freed. Until the next poll sees it, it shares the GPU
// (docs/engines.md says so): the only overlaps are at its start. Forge, since
// A1111's UI does not reload a checkpoint that a free unloaded.
func TestA1111UIJobIsGuarded(t *testing.T) {
	m := newMix(t, mixOptions{engines: []string{"llamacpp", "a1111"}, a1111: a1111test.Options{Forge: true}})
	m.overlapExpected = true
	ctx := context.Background()
	m.waitIdle()
	if r := m.post(ctx, m.chatPath("llamacpp"), chatBody("qwen3-8b", false)); r.status != 200 {
		t.Fatalf("chat: %d", r.status)
	}
	done := m.a1111.StartUIJob(500 * time.Millisecond)
	m.waitStatus("the UI job holds the GPU", func(st Status) bool { return st.State == "image" && st.Job != nil && st.Job.Source == "a1111" })
	chat := m.postAsync(ctx, m.chatPath("llamacpp"), chatBody("qwen3-8b", false))
	<-done
	if r := <-chat; r.status != 200 {
		t.Fatalf("chat after the UI job: %d", r.status)
	}
	ev := m.gpu.Events()
	end := gputest.Index(ev, 0, "a1111", "ui end")
	freed := gputest.Index(ev, end, "a1111", "checkpoint off GPU")
	reload := gputest.Index(ev, gputest.Index(ev, 0, "a1111", "ui start"), "llamacpp", "load qwen3-8b")
	if end < 0 || freed < 0 || reload < freed {
		t.Fatalf("want the UI job's end, A1111's free, then the chat's model loaded:\n%s", gputest.Dump(ev))
	}
	for _, o := range m.gpu.Overlaps() {
		if !strings.Contains(o, "ui)") {
			t.Errorf("overlap beyond the UI job's start: %s\n%s", o, gputest.Dump(ev))
		}
	}
}

// Ollama and llama.cpp with ComfyUI and A1111 on one turnstile, under a
// random mixed load with cancellations: the GPU is never shared, every
// request is answered, and the turnstile ends idle.
func TestEngineMixUnderMixedLoad(t *testing.T) {
	m := newMix(t, mixOptions{engines: []string{"ollama", "llamacpp", "comfyui", "a1111"},
		comfy: comfyOpts(40 * time.Millisecond), a1111: a1111test.Options{JobDuration: 40 * time.Millisecond}})
	deadline := time.Now().Add(*chaosDuration)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for time.Now().Before(deadline) {
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(6) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(50))*time.Millisecond, cancel)
				}
				var r result
				switch rng.IntN(4) {
				case 0:
					r = m.post(ctx, m.chatPath("ollama"), chatBody("llama3.2", rng.IntN(2) == 0))
				case 1:
					r = m.post(ctx, m.chatPath("llamacpp"), chatBody("qwen3-8b", rng.IntN(2) == 0))
				case 2:
					r = m.post(ctx, m.sites["comfyui"]+"/prompt", promptBody(40))
				default:
					r = m.post(ctx, m.sites["a1111"]+"/sdapi/v1/txt2img", txt2imgBody())
				}
				if r.err == nil && r.status != 200 {
					t.Errorf("answer %d: %s", r.status, r.body)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	m.waitIdle()
}

// On a turnstile without an A1111 engine, A1111's routes are served by
// llama-swap (stable-diffusion.cpp behind it), which loads a model for
// them: they are LLM work, held back while an image job runs.
func TestA1111RoutesOnLlamaSwapAreLLMWork(t *testing.T) {
	m := newMix(t, mixOptions{engines: []string{"llamaswap", "comfyui"}, comfy: comfyOpts(300 * time.Millisecond)})
	ctx := context.Background()
	promptID(t, m.post(ctx, m.sites["comfyui"]+"/prompt", promptBody(300)))
	m.waitStatus("the job holds the GPU", func(st Status) bool { return st.State == "image" })
	sd := m.postAsync(ctx, m.sites["llamaswap"]+"/sdapi/v1/txt2img", `{"model":"qwen3-8b","prompt":"a lighthouse"}`)
	m.waitStatus("the request waits", func(st Status) bool { return st.LLMWaiting == 1 })
	// The fake's model server answers only the chat routes (a 404 from
	// it here); what matters is when the request got to llama-swap.
	if r := <-sd; r.err != nil || r.status == 0 {
		t.Fatalf("txt2img through llama-swap: %d %v", r.status, r.err)
	}
	ev := m.gpu.Events()
	end, req := gputest.Index(ev, 0, "comfy", " end "), gputest.Index(ev, 0, "llamaswap", "request /sdapi/v1/txt2img")
	if end < 0 || req < end {
		t.Fatalf("want the job's end, then the txt2img reaching llama-swap:\n%s", gputest.Dump(ev))
	}
}
