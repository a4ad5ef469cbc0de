package turnstile

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

func TestWaiterModel(t *testing.T) {
	cases := []struct {
		name     string
		chunks   []string
		complete bool
		want     string
	}{
		{"first", []string{`{"model":"llama3.2","messages":[]}`}, true, "llama3.2"},
		{"after the messages", []string{`{"messages":[{"role":"user","content":"hi","model":"x"}],"model":"qwen3:8b"}`}, true, "qwen3:8b"},
		{"across chunks", []string{`{"stream":false,"mo`, `del":"llama3.2"}`}, true, "llama3.2"},
		{"none", []string{`{"prompt":"hi"}`}, true, ""},
		{"not a string", []string{`{"model":7}`}, true, ""},
		{"not an object", []string{`["model","x"]`}, true, ""},
		{"not JSON", []string{`model=llama3.2`}, true, ""},
		{"named before the body is cut", []string{`{"model":"llama3.2","prompt":"a long pro`}, false, "llama3.2"},
		{"cut before it", []string{`{"prompt":"a long pro`}, false, ""},
		{"too long", []string{`{"model":"` + strings.Repeat("m", maxModelShown+1) + `"}`}, true, ""},
		{"past the scanned part", []string{`{"prompt":"` + strings.Repeat("p", modelScanLimit) + `","model":"llama3.2"}`}, true, ""},
		{"past the scanned part, in chunks", []string{`{"prompt":"`, strings.Repeat("p", modelScanLimit), `","model":"llama3.2"}`}, true, ""},
		{"after a large value within it", []string{`{"messages":[{"content":"` + strings.Repeat("p", modelScanLimit/2) + `"}],"model":"qwen3:8b"}`}, true, "qwen3:8b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wb := &waitBody{complete: tc.complete}
			for _, c := range tc.chunks {
				wb.chunks = append(wb.chunks, []byte(c))
			}
			r := httptest.NewRequest("POST", "/api/chat", nil)
			w := waiterOf(r, &waitTicket{body: wb}, true)
			if w.Model != tc.want || w.Path != "/api/chat" {
				t.Errorf("waiter %+v, want model %q", w, tc.want)
			}
		})
	}
	r := httptest.NewRequest("GET", "/props?model=qwen3:8b", nil)
	if w := waiterOf(r, nil, true); w.Model != "qwen3:8b" || w.Path != "/props" {
		t.Errorf("waiter of a GET with ?model=: %+v", w)
	}
	r = httptest.NewRequest("POST", "/prompt", nil)
	if w := waiterOf(r, &waitTicket{body: &waitBody{complete: true, chunks: [][]byte{[]byte(`{"model":"x"}`)}}}, false); w.Model != "" {
		t.Errorf("an image request's waiter names a model: %+v", w)
	}
}

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
