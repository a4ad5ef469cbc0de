package turnstile

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

func TestLLMStreamsShareTheGPU(t *testing.T) {
	h := newHarness(t, harnessOptions{ollama: ollamatest.Options{Parallel: 8}})
	resume := h.ollama.HoldChats()
	ctx := context.Background()
	const n = 8
	var finishes []func() result
	for i := range n {
		path, body := "/api/chat", chatBody("llama3.2", true)
		if i%2 == 1 {
			path, body = "/v1/chat/completions", `{"model":"llama3.2","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		finishes = append(finishes, h.streamStart(ctx, path, body))
	}
	if got := h.ollama.Inflight(); got != n {
		t.Fatalf("ollama serves %d streams at once, want %d", got, n)
	}
	st := h.status()
	if st.State != "llm" || st.LLMInflight != n || st.ImagePending {
		t.Fatalf("status %+v, want llm with %d in flight", st, n)
	}
	resume()
	for i, f := range finishes {
		r := f()
		if r.status != 200 {
			t.Fatalf("stream %d: %d %s", i, r.status, r.body)
		}
		if i%2 == 0 && !strings.Contains(r.body, `"done":true`) {
			t.Fatalf("NDJSON stream %d lacks its last line: %s", i, r.body)
		}
		if i%2 == 1 && !strings.HasSuffix(r.body, "data: [DONE]\n\n") {
			t.Fatalf("SSE stream %d lacks [DONE]: %q", i, r.body)
		}
	}
	h.waitIdle()
}

func TestPassthroughRoutesAreUntouched(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfyOpts(time.Hour)})
	// Take the GPU exclusively: passthrough routes must still answer.
	id := promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(3_600_000)))
	h.waitStatus("image job running", func(st Status) bool { return st.Job != nil && st.Job.PromptID == id })

	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/", "Ollama is running"},
		{"GET", "/api/tags", `"models"`},
		{"GET", "/api/ps", `"models"`},
		{"GET", "/api/version", `"version"`},
		{"GET", "/v1/models", `"object":"list"`},
		{"POST", "/api/show", `"modelfile"`},
	} {
		req, _ := http.NewRequest(tc.method, h.llm+tc.path, strings.NewReader(`{"model":"llama3.2"}`))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := h.client.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			t.Fatalf("%s %s during an image job: %v", tc.method, tc.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != 200 || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, b)
		}
	}
	// ComfyUI's own reads pass too, and its websocket works through Caddy.
	resp, err := h.client.Get(h.image + "/api/queue")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /api/queue: %v %v", resp, err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, strings.Replace(h.image, "http", "ws", 1)+"/ws?clientId=browser", nil)
	if err != nil {
		t.Fatalf("websocket through caddy: %v", err)
	}
	defer conn.CloseNow()
	_, msg, err := conn.Read(ctx)
	if err != nil || !strings.Contains(string(msg), `"queue_remaining":1`) {
		t.Fatalf("first frame %s, %v; want a status with the running job", msg, err)
	}
	// A new prompt through Caddy waits for the GPU; the socket is not
	// blocked meanwhile, and receives the broadcast when the job is stopped.
	h.interruptRunning(h.image)
	for !strings.Contains(string(msg), `"queue_remaining":0`) {
		// The job's own messages come to the browser's client id too.
		if _, msg, err = conn.Read(ctx); err != nil {
			t.Fatalf("no status with an empty queue after the interrupt: %v", err)
		}
	}
	h.waitIdle()
}

func TestBusyAnswers(t *testing.T) {
	cases := []struct {
		name     string
		settings string
		path     string
		status   int
		retry    string
		check    func(t *testing.T, body string)
	}{
		{"reject ollama api", "llm_busy_mode reject", "/api/chat", 503, "30", func(t *testing.T, body string) {
			var e struct{ Error string }
			if json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, "busy") {
				t.Errorf("body %s, want {\"error\": \"...busy...\"}", body)
			}
		}},
		{"reject openai api with 429", "llm_busy_mode reject\nllm_busy_status 429\nbusy_retry_after 90s", "/v1/chat/completions", 429, "90", func(t *testing.T, body string) {
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "gpu_busy" || e.Error.Type != "rate_limit_error" {
				t.Errorf("body %s, want an OpenAI error object", body)
			}
		}},
		{"wait times out", "llm_wait_timeout 150ms\nbusy_retry_after 1500ms", "/api/generate", 503, "2", func(t *testing.T, body string) {
			if !strings.Contains(body, "waited 150ms") {
				t.Errorf("body %s, want the wait named", body)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{settings: tc.settings})
			hold := h.takeHold(t, "test", "1m")
			r := h.post(context.Background(), h.llm+tc.path, `{"model":"llama3.2","prompt":"hi","messages":[{"role":"user","content":"hi"}]}`)
			if r.status != tc.status || r.header.Get("Retry-After") != tc.retry {
				t.Fatalf("got %d Retry-After %q, want %d %q; body %s", r.status, r.header.Get("Retry-After"), tc.status, tc.retry, r.body)
			}
			tc.check(t, r.body)
			if h.ollama.Requests() != 0 {
				t.Fatal("a busy request reached Ollama")
			}
			h.releaseHold(t, hold)
			h.waitIdle()
		})
	}
}

func TestWaitingLLMRequestIsServedAfterTheHold(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	hold := h.takeHold(t, "test", "1m")
	ch := h.postAsync(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("LLM waiter", func(st Status) bool { return st.LLMWaiting == 1 })
	h.releaseHold(t, hold)
	if r := <-ch; r.status != 200 || !strings.Contains(r.body, `"done":true`) {
		t.Fatalf("waiting request: %d %s %v", r.status, r.body, r.err)
	}
	h.waitIdle()
}

func TestClientGoneWhileWaitingFreesItsPlace(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	hold := h.takeHold(t, "test", "1m")
	ctx, cancel := context.WithCancel(context.Background())
	ch := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", true))
	h.waitStatus("LLM waiter", func(st Status) bool { return st.LLMWaiting == 1 })
	cancel()
	<-ch
	h.waitStatus("waiter gone", func(st Status) bool { return st.LLMWaiting == 0 })
	h.releaseHold(t, hold)
	h.waitIdle()
	if n := h.ollama.Requests(); n != 0 {
		t.Fatalf("the request of a client that went away reached Ollama (%d requests)", n)
	}
}

func TestReloadKeepsTheLock(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	before := h.ts()
	resume := h.ollama.HoldChats()
	finish := h.streamStart(context.Background(), "/api/chat", chatBody("llama3.2", true))

	// Reload with a changed setting while the stream holds the GPU.
	h.load(h.caddyfile(harnessOptions{settings: "busy_retry_after 45s"}))
	if h.ts() != before {
		t.Fatal("the reload made a new turnstile")
	}
	if h.ts().cfg().RetryAfter != 45*time.Second {
		t.Fatal("the reload's settings were not applied")
	}
	img := h.postAsync(context.Background(), h.image+"/prompt", promptBody(10))
	h.waitStatus("image waiting behind the stream", func(st Status) bool { return st.ImageWaiting == 1 && st.LLMInflight == 1 })
	if h.comfy.Prompts() != 0 {
		t.Fatal("ComfyUI got a prompt while an LLM stream held the GPU across a reload")
	}
	resume()
	if r := finish(); r.status != 200 {
		t.Fatalf("stream across the reload: %d", r.status)
	}
	promptID(t, <-img)
	h.waitIdle()
}

func TestFailedReloadChangesNothing(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "busy_retry_after 45s"})
	bad := strings.Replace(h.caddyfile(harnessOptions{}), "history_poll_interval 20ms", "history_poll_interval soon", 1)
	if err := loadCaddyfile(bad); err == nil || !strings.Contains(err.Error(), "history_poll_interval") {
		t.Fatalf("bad reload: %v, want an error naming history_poll_interval", err)
	}
	// Invalid at provision (not parse) time: a handler naming no turnstile.
	bad = strings.Replace(h.caddyfile(harnessOptions{settings: "busy_retry_after 1s"}), "gpu_turnstile\n\treverse_proxy", "gpu_turnstile {\n\t\tturnstile nope\n\t}\n\treverse_proxy", 1)
	if err := loadCaddyfile(bad); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("bad reload: %v, want an error naming the turnstile", err)
	}
	if got := h.ts().cfg().RetryAfter; got != 45*time.Second {
		t.Fatalf("a failed reload changed busy_retry_after to %v", got)
	}
	r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false))
	if r.status != 200 {
		t.Fatalf("after a failed reload: %d %s", r.status, r.body)
	}
}

func TestMatcherSelectsPassthrough(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	// LLM calls made by ComfyUI's own nodes carry a header here; they pass
	// through so that a workflow calling the LLM cannot deadlock.
	cf := strings.Replace(h.caddyfile(harnessOptions{}), "\tgpu_turnstile\n\treverse_proxy "+h.ollama.URL,
		"\t@from_comfy header X-From-Comfy 1\n\tgpu_turnstile @from_comfy passthrough\n\tgpu_turnstile\n\treverse_proxy "+h.ollama.URL, 1)
	h.load(cf)
	hold := h.takeHold(t, "test", "1m")
	req, _ := http.NewRequest("POST", h.llm+"/api/chat", strings.NewReader(chatBody("llama3.2", false)))
	req.Header.Set("X-From-Comfy", "1")
	resp, err := h.client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("marked request: %v %v", resp, err)
	}
	resp.Body.Close()
	h.releaseHold(t, hold)
	h.waitIdle()
}

func TestLockStateNames(t *testing.T) {
	want := map[lock.State]string{lock.Idle: "idle", lock.LLM: "llm", lock.Image: "image", lock.Hold: "hold"}
	for st, name := range want {
		if st.String() != name || stateNumber(name) != int(st) {
			t.Errorf("%d: %q", st, st.String())
		}
	}
}

// Bodies larger than what is buffered before waiting still arrive whole,
// and malformed ones get the upstream's own error.
func TestOversizedAndMalformedBodies(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	hold := h.takeHold(t, "test", "1m")
	big := `{"model":"llama3.2","stream":false,"prompt":"` + strings.Repeat("a", admit.LLMBodyLimit+1<<20) + `"}`
	ch := h.postAsync(context.Background(), h.llm+"/api/generate", big)
	bad := h.postAsync(context.Background(), h.llm+"/api/chat", `{"model":`)
	h.waitStatus("two LLM waiters", func(st Status) bool { return st.LLMWaiting == 2 })
	h.releaseHold(t, hold)
	if r := <-ch; r.status != 200 || !strings.Contains(r.body, `"done":true`) {
		t.Fatalf("9 MiB body: %d %.200s", r.status, r.body)
	}
	if r := <-bad; r.status != 400 || !strings.Contains(r.body, `"error"`) {
		t.Fatalf("malformed body: %d %s, want Ollama's 400", r.status, r.body)
	}
	h.waitIdle()
}
