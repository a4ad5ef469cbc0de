package turnstile

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// TestWaitersNameTheirModels queues three LLM requests of three APIs
// behind a hold, through Caddy: the status lists them oldest first, each
// with its path and the model its body names.
func TestWaitersNameTheirModels(t *testing.T) {
	h := newHarness(t, harnessOptions{ollama: ollamatest.Options{Models: []string{"llama3.2", "qwen3:8b", "gemma3"}}})
	h.waitIdle()
	hold := h.takeHold(t, "test", "1m")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reqs := []struct{ path, body string }{
		{"/api/chat", chatBody("llama3.2", false)},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"model":"qwen3:8b"}`},
		{"/api/generate", `{"model":"gemma3","prompt":"a secret prompt","stream":false}`},
	}
	var answers []<-chan result
	for i, r := range reqs {
		answers = append(answers, h.postAsync(ctx, h.llm+r.path, r.body))
		h.waitStatus(fmt.Sprintf("%d waiting", i+1), func(st Status) bool { return len(st.Waiters) == i+1 })
	}
	st := h.status()
	var got []string
	for _, w := range st.Waiters {
		got = append(got, w.Kind+" "+w.Path+" "+w.Model)
	}
	want := "llm /api/chat llama3.2|llm /v1/chat/completions qwen3:8b|llm /api/generate gemma3"
	if strings.Join(got, "|") != want {
		t.Fatalf("waiters %q, want %q", strings.Join(got, "|"), want)
	}
	r := h.do("GET", h.llm+"/healthz", "")
	if strings.Contains(r.body, "secret") {
		t.Fatal("the status shows a prompt")
	}
	h.releaseHold(t, hold)
	for _, a := range answers {
		if r := <-a; r.status != 200 {
			t.Fatalf("waiting request: %d %s", r.status, r.body)
		}
	}
}
