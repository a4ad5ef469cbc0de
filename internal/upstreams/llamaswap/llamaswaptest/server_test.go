package llamaswaptest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
)

// The model id comes from "model" in a JSON body only when Content-Type
// says JSON, else from the form or query; a missing id and an unknown one
// are 404s in llama-swap's envelope (text when Accept asks for it).
func TestModelIDAndItsErrors(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, llamaswaptest.Options{})
	noID := envelope("no model id could be identified", "invalid_request_error", "not_found")
	noRouter := envelope("no router for requested model", "invalid_request_error", "not_found")
	for _, tc := range []struct {
		fact, contentType, body, accept string
		want                            string
	}{
		{"missing model", "application/json", `{"messages":[]}`, "", noID},
		{"unknown model", "application/json", `{"model":"nope"}`, "", noRouter},
		{"JSON body without a JSON Content-Type names no model", "text/plain", `{"model":"qwen3-8b"}`, "", noID},
		{"the form's model is read", "application/x-www-form-urlencoded", `model=nope`, "", noRouter},
		{"Accept text/plain gets text", "application/json", `{}`, "text/plain", "llama-swap: no model id could be identified"},
	} {
		a := send(t, http.MethodPost, srv.URL()+"/v1/chat/completions", tc.contentType, tc.body, "Accept", tc.accept)
		if a.status != http.StatusNotFound || strings.TrimSpace(a.body) != tc.want {
			t.Errorf("%s: %d %s, want 404 %s", tc.fact, a.status, a.body, tc.want)
		}
	}
	if srv.Starts() != 0 {
		t.Fatal("a request without a known model started a process")
	}
}

// A model route starts the model's process on demand and answers in
// OpenAI's shape, as SSE when "stream":true.
func TestModelRouteLoadsOnDemandAndAnswers(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{})
	a := chat(t, srv, qwen, false)
	var c struct {
		Object  string
		Choices []struct {
			Message      struct{ Content string }
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal([]byte(a.body), &c); a.status != 200 || err != nil || c.Object != "chat.completion" ||
		len(c.Choices) != 1 || c.Choices[0].FinishReason != "stop" || c.Choices[0].Message.Content == "" {
		t.Fatalf("chat: %d %s", a.status, a.body)
	}
	if srv.Starts() != 1 || srv.State(qwen) != "ready" || gpu.Users("llamaswap") != 1 {
		t.Fatalf("after the first chat: %d starts, state %q, %d users", srv.Starts(), srv.State(qwen), gpu.Users("llamaswap"))
	}
	s := chat(t, srv, qwen, true)
	if s.status != 200 || s.header.Get("Content-Type") != "text/event-stream" ||
		!strings.Contains(s.body, `"object":"chat.completion.chunk"`) || !strings.HasSuffix(s.body, "data: [DONE]\n\n") {
		t.Fatalf("stream: %d %v %s", s.status, s.header, s.body)
	}
	if srv.Starts() != 1 || srv.Requests() != 2 {
		t.Fatalf("%d starts, %d requests; the ready model should serve the second at once", srv.Starts(), srv.Requests())
	}
}

// The process occupies the GPU from its command's start, long before its
// health check passes; GET /running lists it as "starting", /v1/models as
// "loaded", and /health says "OK" regardless.
func TestStartingProcessIsListedAndResident(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{StartDelay: time.Hour})
	goChat(t, srv, qwen, false)
	waitEvent(t, gpu, "load "+qwen, 1)
	if gpu.Users("llamaswap") != 1 || srv.State(qwen) != "starting" {
		t.Fatalf("a starting process: %d users, state %q", gpu.Users("llamaswap"), srv.State(qwen))
	}
	run := send(t, http.MethodGet, srv.URL()+"/running", "", "")
	want := `{"running":[{"model":"qwen3-8b","state":"starting","cmd":"llama-server --port 5800 -m /models/qwen3-8b.gguf",` +
		`"proxy":"http://127.0.0.1:5800","ttl":0,"name":"","description":""}]}`
	if run.status != 200 || strings.TrimSpace(run.body) != want {
		t.Fatalf("/running: %d %s\nwant %s", run.status, run.body, want)
	}
	var models struct {
		Data []struct {
			ID     string
			Status struct{ Value string }
		}
	}
	json.Unmarshal([]byte(send(t, http.MethodGet, srv.URL()+"/v1/models", "", "").body), &models)
	got := map[string]string{}
	for _, m := range models.Data {
		got[m.ID] = m.Status.Value
	}
	if len(got) != 2 || got[qwen] != "loaded" || got[gemma] != "unloaded" || models.Data[0].ID != gemma {
		t.Fatalf("/v1/models: %+v, want both, sorted, qwen loaded (starting counts)", models.Data)
	}
	if h := send(t, http.MethodGet, srv.URL()+"/health", "", ""); h.status != 200 || h.body != "OK" {
		t.Fatalf("/health: %d %q", h.status, h.body)
	}
}

// With nothing running, /running is {"running":[]} and /health is "OK".
func TestIdleListsAndHealth(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, llamaswaptest.Options{})
	if a := send(t, http.MethodGet, srv.URL()+"/running", "", ""); a.status != 200 || strings.TrimSpace(a.body) != `{"running":[]}` {
		t.Fatalf("/running: %d %s", a.status, a.body)
	}
	if a := send(t, http.MethodGet, srv.URL()+"/health", "", ""); a.status != 200 || a.body != "OK" {
		t.Fatalf("/health: %d %q", a.status, a.body)
	}
}

// /upstream/{model}/{path...} takes any method, loads the model on demand
// and forwards without the prefix; /upstream/m redirects (301 for GET and
// HEAD, 308 otherwise); an unknown model is 404 "model not found"; model
// names may hold slashes.
func TestUpstreamRoute(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, llamaswaptest.Options{Models: []string{"org/qwen3-8b", gemma}})
	for _, tc := range []struct {
		fact, method, path string
		status             int
		body, location     string
	}{
		{"redirect GET", http.MethodGet, "/upstream/org/qwen3-8b", 301, "", "/upstream/org/qwen3-8b/"},
		{"redirect HEAD", http.MethodHead, "/upstream/gemma-3-4b?x=1", 301, "", "/upstream/gemma-3-4b/?x=1"},
		{"redirect POST keeps the method", http.MethodPost, "/upstream/gemma-3-4b", 308, "", "/upstream/gemma-3-4b/"},
		{"unknown model", http.MethodGet, "/upstream/nope/health", 404, envelope("model not found", "invalid_request_error", "not_found"), ""},
		{"forwarded, loading on demand", http.MethodGet, "/upstream/org/qwen3-8b/health", 200, `{"status":"ok"}`, ""},
	} {
		a := send(t, tc.method, srv.URL()+tc.path, "", "")
		if a.status != tc.status || (tc.body != "" && strings.TrimSpace(a.body) != tc.body) || a.header.Get("Location") != tc.location {
			t.Errorf("%s: %d %q Location %q; want %d %q %q", tc.fact, a.status, a.body, a.header.Get("Location"), tc.status, tc.body, tc.location)
		}
	}
	if srv.Starts() != 1 || srv.State("org/qwen3-8b") != "ready" {
		t.Fatalf("%d starts, state %q: only the forwarded request should load", srv.Starts(), srv.State("org/qwen3-8b"))
	}
	chat := send(t, http.MethodPost, srv.URL()+"/upstream/org/qwen3-8b/v1/chat/completions", "application/json", `{"stream":true}`)
	if chat.status != 200 || !strings.HasSuffix(chat.body, "data: [DONE]\n\n") {
		t.Fatalf("chat through /upstream: %d %s", chat.status, chat.body)
	}
}

// A model takes at most ConcurrencyLimit requests (llama-swap's default
// 10); one more is refused at once with 429 and Retry-After.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{ConcurrencyLimit: 1})
	resume := srv.HoldChats()
	first := goChat(t, srv, qwen, true)
	waitEvent(t, gpu, "serve /v1/chat/completions "+qwen, 1)
	a := chat(t, srv, qwen, false)
	want := envelope("Too many requests", "rate_limit_error", "concurrency_limit")
	if a.status != http.StatusTooManyRequests || a.header.Get("Retry-After") != "1" || strings.TrimSpace(a.body) != want {
		t.Fatalf("over the limit: %d %v %s", a.status, a.header, a.body)
	}
	resume()
	if a := <-first; a.status != 200 {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	if a := chat(t, srv, qwen, false); a.status != 200 {
		t.Fatalf("after the first ended: %d %s", a.status, a.body)
	}
}
