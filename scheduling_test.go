package turnstile

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

func TestMaxImageStreakGivesLLMATurn(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "max_image_streak 2", comfy: comfyOpts(30 * time.Millisecond)})
	ctx := context.Background()
	hold := h.takeHold(t, "x", "1m")
	llm := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("LLM waiting", func(st Status) bool { return st.LLMWaiting == 1 })
	var imgs []<-chan result
	for i := range 3 {
		imgs = append(imgs, h.postAsync(ctx, h.image+"/prompt", promptBody(30)))
		h.waitStatus("image queued", func(st Status) bool { return st.ImageWaiting == i+1 })
	}
	h.releaseHold(t, hold)
	var ids []string
	for _, ch := range imgs {
		ids = append(ids, promptID(t, <-ch))
	}
	if r := <-llm; r.status != 200 {
		t.Fatal(r.status)
	}
	h.waitIdle()
	ev := h.gpu.Events()
	second := gputest.Index(ev, 0, "comfy", "job "+ids[1]+" end")
	chat := gputest.Index(ev, 0, "ollama", "request /api/chat")
	third := gputest.Index(ev, 0, "comfy", "queued "+ids[2])
	if !(second >= 0 && second < chat && chat < third) {
		t.Fatalf("the LLM request did not get its turn after two jobs:\n%s", gputest.Dump(ev))
	}
}

func TestDuringJob(t *testing.T) {
	for _, mode := range []string{"allow", "reject"} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, harnessOptions{comfy: comfyOpts(time.Hour)})
			cf := strings.Replace(h.caddyfile(harnessOptions{}), "\tgpu_turnstile\n\treverse_proxy "+h.ollama.URL,
				"\t@from_comfy header X-From-Comfy 1\n\tgpu_turnstile @from_comfy {\n\t\tduring_job "+mode+"\n\t}\n\tgpu_turnstile\n\treverse_proxy "+h.ollama.URL, 1)
			h.load(cf)
			id := promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(3_600_000)))
			h.waitStatus("job running", func(st Status) bool { return st.Job != nil && st.Job.PromptID == id })
			req, _ := http.NewRequest("POST", h.llm+"/v1/chat/completions", strings.NewReader(`{"model":"llama3.2","messages":[]}`))
			req.Header.Set("X-From-Comfy", "1")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := h.client.Do(req.WithContext(ctx))
			if err != nil {
				t.Fatalf("the marked request hung: %v", err)
			}
			resp.Body.Close()
			want := map[string]int{"allow": 200, "reject": 409}[mode]
			if resp.StatusCode != want {
				t.Fatalf("status %d, want %d", resp.StatusCode, want)
			}
			h.overlapExpected = mode == "allow" // the documented trade-off
			h.interruptRunning(h.comfy.URL)
			h.waitIdle()
		})
	}
}

// Drivers give memory back a while after a model leaves /api/ps. With
// min_free_vram the prompt waits for it; without, the GPU is shared.
func TestMinFreeVRAM(t *testing.T) {
	for _, guard := range []bool{true, false} {
		name := map[bool]string{true: "guarded", false: "unguarded"}[guard]
		t.Run(name, func(t *testing.T) {
			settings := ""
			if guard {
				settings = "min_free_vram 20GiB"
			}
			h := newHarness(t, harnessOptions{settings: settings, ollama: ollamatest.Options{VRAMLag: time.Second}})
			if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
				t.Fatal(r.status)
			}
			promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(10)))
			h.waitIdle()
			if shared := len(h.gpu.Overlaps()) > 0; shared == guard {
				t.Fatalf("%s: GPU shared = %v\n%s", name, shared, gputest.Dump(h.gpu.Events()))
			}
			h.overlapExpected = !guard
		})
	}
}

func TestMinFreeVRAMNeverReachedRefusesTheJob(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "min_free_vram 100GiB\nunload_timeout 200ms"})
	r := h.post(context.Background(), h.image+"/prompt", promptBody(10))
	if r.status != 503 || !strings.Contains(r.body, "min_free_vram") {
		t.Fatalf("got %d %s, want 503 naming min_free_vram", r.status, r.body)
	}
	h.waitIdle()
}

func TestEarlyUnloadOverlapsTheDrain(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "early_unload"})
	resume := h.ollama.HoldChats()
	finish := h.streamStart(context.Background(), "/api/chat", chatBody("llama3.2", true))
	img := h.postAsync(context.Background(), h.image+"/prompt", promptBody(10))
	// The unload is asked for while the chat still streams...
	h.waitTimeline("an early unload while the chat streams", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "ollama", "unload requested") >= 0
	})
	if h.ollama.Unloads() == 0 {
		t.Fatal("no early unload while the chat streamed")
	}
	// ...and the chat is not cut short by it.
	resume()
	if r := finish(); !strings.Contains(r.body, `"done":true`) {
		t.Fatalf("chat cut short: %s", r.body)
	}
	promptID(t, <-img)
	h.waitIdle()
}
