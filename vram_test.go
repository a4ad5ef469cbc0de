package turnstile

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

const gib = int64(1) << 30

// vramHarness runs Caddy with vram_admission over a 24 GiB card, read
// through the fake nvidia-smi on PATH; llama3.2 takes 4 GiB and qwen3:8b
// 12 GiB when the fake Ollama loads them.
func vramHarness(t *testing.T, settings string) *harness {
	t.Helper()
	return newHarness(t, harnessOptions{
		ollama:     ollamatest.Options{ModelSizes: map[string]int64{"llama3.2": 4 * gib, "qwen3:8b": 12 * gib}},
		settings:   "vram_probe nvidia-smi\n\t\tvram_admission\n\t\tvram_poll_interval 100ms\n\t\t" + settings,
		beforeLoad: func(h *harness) { h.withMemory(24 * gib) },
	})
}

// A foreign process using most of the card lets a chat on a model that
// fits through, and has one on a model that does not wait, shown waiting
// for memory, until the foreign use drops. The first chat teaches the
// small model's footprint.
func TestVRAMAdmissionBesideAGame(t *testing.T) {
	h := vramHarness(t, "model_vram qwen3:8b 12GiB")
	h.waitStatus("a first reading", func(st Status) bool { return st.VRAM != nil && !st.VRAM.Stale })
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("first chat: %d %s", r.status, r.body)
	}
	h.waitStatus("llama3.2 learned", func(st Status) bool {
		for _, fp := range st.VRAM.Footprints {
			if fp.Model == "llama3.2" && fp.Bytes == 4*gib && fp.Source == "learned" {
				return true
			}
		}
		return false
	})

	game := h.gpu.Foreign("game", 4242, 16*gib)
	h.waitStatus("the game read", func(st Status) bool { return st.VRAM.FreeBytes == 4*gib })
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat on the loaded small model beside the game: %d %s", r.status, r.body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	large := h.postAsync(ctx, h.llm+"/api/chat", chatBody("qwen3:8b", false))
	h.waitStatus("qwen3:8b waiting for memory", func(st Status) bool {
		return len(st.Waiters) == 1 && st.Waiters[0].WaitingFor == "vram" && st.Waiters[0].Model == "qwen3:8b"
	})
	select {
	case r := <-large:
		t.Fatalf("qwen3:8b answered beside the game: %d %s", r.status, r.body)
	default:
	}
	game()
	if r := <-large; r.status != 200 {
		t.Fatalf("qwen3:8b once the game has gone: %d %s", r.status, r.body)
	}
}

// In reject mode a model that does not fit gets the busy answer at once,
// in Ollama's error shape, naming the model and the memory.
func TestVRAMAdmissionRejects(t *testing.T) {
	h := vramHarness(t, "model_vram qwen3:8b 12GiB\n\t\tllm_busy_mode reject\n\t\tllm_busy_status 429")
	game := h.gpu.Foreign("game", 4242, 20*gib)
	defer game()
	h.waitStatus("the game read", func(st Status) bool { return st.VRAM != nil && st.VRAM.FreeBytes == 4*gib })
	series := `gpu_turnstile_busy_total{reason="vram",turnstile="default"}`
	before, _ := h.metricIfAny(t, series)
	r := h.post(context.Background(), h.llm+"/api/chat", chatBody("qwen3:8b", false))
	if r.status != 429 || !strings.Contains(r.body, `"error":"gpu_turnstile: the GPU is busy with too little free video memory for qwen3:8b`) ||
		r.header.Get("Retry-After") == "" {
		t.Fatalf("qwen3:8b beside a game, reject mode: %d %q %v", r.status, r.body, r.header)
	}
	if after := h.metric(t, series); after != before+1 {
		t.Fatalf("%s: %v, then %v", series, before, after)
	}
	if free := h.metric(t, `gpu_turnstile_vram_free_bytes{turnstile="default"}`); free != float64(4*gib) {
		t.Fatalf("gpu_turnstile_vram_free_bytes %v, want 4 GiB", free)
	}
}

// A footprint learned at the first load is kept in Caddy's storage: after
// a restart it is known before the model is loaded again.
func TestVRAMFootprintKeptAcrossARestart(t *testing.T) {
	h := vramHarness(t, "")
	h.waitStatus("a first reading", func(st Status) bool { return st.VRAM != nil && !st.VRAM.Stale })
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("qwen3:8b", false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	h.waitStatus("qwen3:8b learned", func(st Status) bool { return len(st.VRAM.Footprints) == 1 })
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	oc, err := ollama.NewClient(h.ollama.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := oc.Unload(context.Background(), "qwen3:8b"); err != nil {
		t.Fatal(err)
	}
	h.waitTimeline("qwen3:8b unloaded", func([]gputest.Event) bool { return h.gpu.Used() == 0 })
	h.load(h.caddyfile(harnessOptions{settings: "vram_probe nvidia-smi\n\t\tvram_admission\n\t\tvram_poll_interval 100ms"}))
	st := h.waitStatus("qwen3:8b known after the restart", func(st Status) bool {
		return st.VRAM != nil && len(st.VRAM.Footprints) == 1
	})
	if fp := st.VRAM.Footprints[0]; fp.Model != "qwen3:8b" || fp.Bytes != 12*gib || len(st.VRAM.Loaded) != 0 {
		t.Fatalf("after the restart: footprints %+v, loaded %+v", st.VRAM.Footprints, st.VRAM.Loaded)
	}
}

// Where the engine reports no sizes (llama.cpp's router), a model's
// footprint is learned from what its engine's processes hold in
// nvidia-smi's compute list after its first load, over what they held
// before it (measured as the request was admitted).
func TestVRAMLearnsFromTheEngineProcesses(t *testing.T) {
	m := newMix(t, mixOptions{
		engines:  []string{"llamacpp", "comfyui"},
		llamacpp: llamacpptest.Options{ModelBytes: 5 * gib},
		memory:   24 * gib,
		settings: "vram_probe nvidia-smi\n\t\tvram_admission\n\t\tvram_poll_interval 100ms",
	})
	m.waitStatus("a first reading", func(st Status) bool { return st.VRAM != nil && !st.VRAM.Stale })
	if r := m.post(context.Background(), m.chatPath("llamacpp"), chatBody("qwen3-8b", false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	st := m.waitStatus("qwen3-8b learned", func(st Status) bool { return len(st.VRAM.Footprints) == 1 })
	if fp := st.VRAM.Footprints[0]; fp.Model != "qwen3-8b" || fp.Bytes != 5*gib || fp.Engine != "llamacpp" || fp.Source != "learned" {
		t.Fatalf("footprint %+v, want qwen3-8b's 5 GiB learned on llamacpp", fp)
	}
}

// sdxlPrompt is a ComfyUI job with a checkpoint loader and a latent size
// (its workflow signature), which runs durationMS on the fake.
func sdxlPrompt(durationMS int) string {
	return fmt.Sprintf(`{"prompt":{"4":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":"sd_xl_base_1.0.safetensors"}},`+
		`"5":{"class_type":"EmptyLatentImage","inputs":{"width":1024,"height":1024,"batch_size":1}},`+
		`"3":{"class_type":"KSampler","inputs":{"seed":%d,"model":["4",0],"latent_image":["5",0]}},"9":{"class_type":"SaveImage","inputs":{}}},`+
		`"client_id":"browser","extra_data":{"fake_duration_ms":%d}}`, promptSeed.Add(1), durationMS)
}

// A co_resident small model is served during a render once the render's
// workflow has been measured, while a large model waits for the render's
// end; the first render of a workflow never measured runs alone.
func TestCoResidentDuringARender(t *testing.T) {
	h := newHarness(t, harnessOptions{
		ollama: ollamatest.Options{ModelSizes: map[string]int64{"llama3.2": 4 * gib, "qwen3:8b": 16 * gib}},
		comfy:  comfytest.Options{JobBytes: 10 * gib},
		settings: "vram_probe nvidia-smi\n\t\tvram_admission\n\t\tvram_poll_interval 100ms\n\t\t" +
			"model_vram llama3.2 4GiB\n\t\tmodel_vram qwen3:8b 16GiB\n\t\tco_resident llama3.2 qwen3:8b",
		beforeLoad: func(h *harness) {
			h.withMemory(24 * gib)
			h.gpu.ShareAmong("ollama", "comfy") // co-residency shares the card; over-commitment fails the test
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first render is measured only if ComfyUI owes no free by then:
	// the start-up's free of it comes first.
	h.waitStatus("a first reading, and ComfyUI freed at start-up", func(st Status) bool {
		return st.VRAM != nil && !st.VRAM.Stale && engineState(st, "comfyui") == "freed" && !st.FreeOwed
	})
	rendering := func(st Status) bool {
		return st.State == "image" && st.VRAM.Job != nil && st.Job != nil && st.Job.Phase == "running"
	}

	// The first render: its workflow was never measured, so a chat waits.
	promptID(t, h.post(ctx, h.image+"/prompt", sdxlPrompt(600)))
	h.waitStatus("the first render running", rendering)
	first := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("the chat waiting for the render", func(st Status) bool { return st.LLMWaiting == 1 && st.State == "image" })
	if r := <-first; r.status != 200 {
		t.Fatalf("chat after the first render: %d %s", r.status, r.body)
	}
	h.waitStatus("the workflow measured", func(st Status) bool {
		for _, fp := range st.VRAM.Footprints {
			if strings.HasPrefix(fp.Model, "comfyui:sd_xl_base_1.0.safetensors@1024x1024x1") && fp.Bytes == 10*gib {
				return true
			}
		}
		return false
	})
	h.waitIdle()

	// The second render of the same workflow: llama3.2 (4 GiB), loaded
	// by the chat, stays loaded through it (20 GiB free beside it, 10
	// needed) and is served during it with nothing to load; qwen3:8b
	// (16 GiB) does not fit: 24 - 4 - 10 = 10 GiB.
	loads := func() int {
		n := 0
		for _, e := range h.gpu.Events() {
			if e.Service == "ollama" && strings.HasPrefix(e.What, "load llama3.2") {
				n++
			}
		}
		return n
	}
	before := loads()
	promptID(t, h.post(ctx, h.image+"/prompt", sdxlPrompt(3000)))
	h.waitStatus("the second render running, measured", func(st Status) bool { return rendering(st) && st.VRAM.Job.PeakBytes == 10*gib })
	if !slices.Contains(h.ollama.Loaded(), "llama3.2:latest") {
		t.Fatalf("llama3.2 unloaded for a render it fits beside: loaded %v", h.ollama.Loaded())
	}
	large := h.postAsync(ctx, h.llm+"/api/chat", chatBody("qwen3:8b", false))
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("co-resident chat during the render: %d %s", r.status, r.body)
	}
	if n := loads() - before; n != 0 {
		t.Errorf("llama3.2 loaded %d times for the chat beside the render, want 0: it was kept", n)
	}
	if st := h.status(); st.State != "image" {
		t.Fatalf("the co-resident chat was served after the render, not during it: %+v", st)
	}
	select {
	case r := <-large:
		t.Fatalf("qwen3:8b served beside the render: %d %s", r.status, r.body)
	default:
	}
	if r := <-large; r.status != 200 {
		t.Fatalf("qwen3:8b after the render: %d %s", r.status, r.body)
	}
	if n := h.metric(t, `gpu_turnstile_coresident_total{turnstile="default"}`); n < 1 {
		t.Fatalf("gpu_turnstile_coresident_total %v", n)
	}
}

// With wait_notice, a streaming chat that has its place but waits for
// video memory is told so in its own stream, then gets its answer.
func TestVRAMWaitIsNoticed(t *testing.T) {
	h := vramHarness(t, "model_vram qwen3:8b 12GiB\n\t\twait_notice 200ms")
	h.waitStatus("a first reading", func(st Status) bool { return st.VRAM != nil && !st.VRAM.Stale })
	game := h.gpu.Foreign("game", 4242, 16*gib)
	h.waitStatus("the game read", func(st Status) bool { return st.VRAM.FreeBytes == 8*gib })

	resp, err := h.client.Post(h.llm+"/api/chat", "application/json", strings.NewReader(chatBody("qwen3:8b", true)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan map[string]any)
	go func() {
		defer close(lines)
		dec := json.NewDecoder(resp.Body)
		for {
			var m map[string]any
			if dec.Decode(&m) != nil {
				return
			}
			lines <- m
		}
	}()
	thinking := func(m map[string]any) string {
		msg, _ := m["message"].(map[string]any)
		s, _ := msg["thinking"].(string)
		return s
	}
	var first map[string]any
	select {
	case first = <-lines:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing in the stream while the chat waits for memory")
	}
	if n := thinking(first); !strings.HasPrefix(n, "waiting for video memory: too little free video memory for qwen3:8b") {
		t.Fatalf("first line %v; want a notice of the memory wait", first)
	}
	game()
	var last string
	var content strings.Builder
	for m := range lines {
		if n := thinking(m); n != "" {
			last = n
		}
		msg, _ := m["message"].(map[string]any)
		c, _ := msg["content"].(string)
		content.WriteString(c)
	}
	if !regexp.MustCompile(`^waited \d+ s for video memory$`).MatchString(last) || content.Len() == 0 {
		t.Fatalf("last notice %q, answer %q", last, content.String())
	}
}
