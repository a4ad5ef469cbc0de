package turnstile

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// testAPIKey is an engine's API key in these tests: distinctive, so that
// finding it anywhere the turnstile writes is a leak.
const testAPIKey = "sk-turnstile-7f3a9c1e5b"

// keyedMix is a mix of the LLM engine of kind, guarded by testAPIKey,
// and ComfyUI; with the key in the engine's block (from the environment)
// if withHeader. Caddy's log goes to logFile.
func keyedMix(t *testing.T, kind string, withHeader bool, logFile string) *mix {
	t.Helper()
	opts := mixOptions{engines: []string{kind, "comfyui"}, logFile: logFile,
		swap:     llamaswaptest.Options{APIKey: testAPIKey},
		llamacpp: llamacpptest.Options{APIKey: testAPIKey},
		vllm:     vllmtest.Options{APIKey: testAPIKey}}
	if withHeader {
		opts.blocks = map[string]string{kind: `header Authorization "Bearer {env.TURNSTILE_TEST_KEY}"`}
	}
	m := newMix(t, opts)
	if kind != "vllm" { // vLLM's model is on the GPU from the start; its chats need the key
		if r := m.post(context.Background(), m.chatPath(kind), chatBody(m.chatModel(kind), false)); r.status != 200 {
			t.Fatalf("%s chat: %d %s", kind, r.status, r.body)
		}
	}
	return m
}

// An engine that guards its routes with an API key is emptied for an
// image job when its block gives the key (`header`, from the
// environment), and the key shows nowhere: not in the status, the event
// stream, the metrics or the log. Without it the job is refused, naming
// the engine.
func TestEngineAPIKeys(t *testing.T) {
	t.Setenv("TURNSTILE_TEST_KEY", testAPIKey)
	for _, kind := range []string{"llamaswap", "llamacpp", "vllm"} {
		t.Run(kind, func(t *testing.T) {
			logFile := filepath.Join(t.TempDir(), "caddy.log")
			m := keyedMix(t, kind, true, logFile)
			events := openEvents(t, m.client, m.llm+"/healthz/full?view=events", "")
			m.runImageJob(t, "comfyui")
			m.waitIdle()
			ev := m.gpu.Events()
			start := gputest.Index(ev, 0, service("comfyui"), imageStartMark("comfyui"))
			if start < 0 {
				t.Fatalf("no image job on the timeline:\n%s", gputest.Dump(ev))
			}
			if users := usersAt(ev, kind, start); users != 0 {
				t.Fatalf("%s still held %d occupancies when the job started:\n%s", kind, users, gputest.Dump(ev))
			}
			var stream strings.Builder
			for _, state := range []string{"image", "idle"} {
				ev, seen := events.next(state, statusIs(func(st Status) bool { return st.State == state }))
				for _, e := range append(seen, ev) {
					stream.WriteString(e.name + " " + e.data + "\n")
				}
			}
			places := map[string]string{
				"status":       m.get(t, m.llm+"/healthz/full"),
				"event stream": stream.String(),
				"metrics":      m.get(t, m.admin+"/metrics"),
				"config":       m.get(t, m.admin+"/config/"),
			}
			b, err := os.ReadFile(logFile)
			if err != nil || len(b) == 0 {
				t.Fatalf("the log: %v (%d bytes)", err, len(b))
			}
			places["log"] = string(b)
			for where, text := range places {
				if strings.Contains(text, testAPIKey) {
					t.Errorf("the key is in the %s", where)
				}
			}
		})
		t.Run(kind+" without the key", func(t *testing.T) {
			m := keyedMix(t, kind, false, "")
			r := m.post(context.Background(), m.sites["comfyui"]+"/prompt", promptBody(50))
			if r.status != 503 || !strings.Contains(r.body, kind) {
				t.Fatalf("prompt: %d %s; want 503 naming %s", r.status, r.body, kind)
			}
			if m.comfy.Prompts() != 0 {
				t.Fatal("the prompt reached ComfyUI")
			}
		})
	}
}

// get reads url's body through the harness's client.
func (h *harness) get(t *testing.T, url string) string {
	t.Helper()
	resp, err := h.client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}
