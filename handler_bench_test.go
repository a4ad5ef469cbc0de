package turnstile

import (
	"bytes"
	"io"

	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"

	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// benchHandler is a gpu_turnstile handler on a fresh turnstile, without
// Caddy around it, so the benchmark measures the middleware alone.
func benchHandler(b *testing.B) *Handler {
	c, err := tcfg.Validate(Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}})
	if err != nil {
		b.Fatal(err)
	}
	ts := newTurnstile("bench")
	ts.cfgp.Store(c)
	return &Handler{class: route.Auto, ts: ts, guard: c.Routes}
}

// benchRequest is a request as Caddy's reverse_proxy leaves it: proxied
// to the turnstile's engine, which the misrouting check reads.
func benchRequest(method, path string) *http.Request {
	r := httptest.NewRequest(method, path, nil)
	repl := caddy.NewReplacer()
	repl.Set(upstreamVar, "127.0.0.1:1")
	ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{})
	return r.WithContext(ctx)
}

var nopNext = caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })

// BenchmarkHandlerLLM is the middleware's cost for an LLM request when the
// GPU is free: classify, take the shared lock, call next, release.
func BenchmarkHandlerLLM(b *testing.B) {
	h := benchHandler(b)
	h.ts.gpu.TryLLM() // another request in flight: no idle<->llm transition
	r := benchRequest("POST", "/api/chat")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		delete(r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any), handledVar)
		h.ServeHTTP(w, r, nopNext)
	}
}

// BenchmarkHandlerLLMFromIdle is the same for a request that finds the GPU
// idle, so it also pays the idle -> llm -> idle transitions.
func BenchmarkHandlerLLMFromIdle(b *testing.B) {
	h := benchHandler(b)
	r := benchRequest("POST", "/v1/chat/completions")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		delete(r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any), handledVar)
		h.ServeHTTP(w, r, nopNext)
	}
}

// BenchmarkHandlerPassthrough is the middleware's cost for everything
// else: classify and call next.
func BenchmarkHandlerPassthrough(b *testing.B) {
	h := benchHandler(b)
	r := benchRequest("GET", "/api/tags")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, r, nopNext)
	}
}

// llmInUseHandler is a handler whose GPU is in LLM use (one shared place
// held), so that an LLM request takes the fast path.
func llmInUseHandler(name string) *Handler {
	c, _ := tcfg.Validate(Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}})
	ts := newTurnstile(name)
	ts.cfgp.Store(c)
	ts.gpu.TryLLM()
	return &Handler{class: route.Auto, ts: ts, guard: c.Routes}
}

// allocsPerRequest is what h allocates per request r, served again and
// again.
func allocsPerRequest(h *Handler, r *http.Request) float64 {
	vars := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	w := httptest.NewRecorder()
	return testing.AllocsPerRun(200, func() {
		delete(vars, handledVar)
		h.ServeHTTP(w, r, nopNext)
	})
}

func TestHandlerPathsDoNotAllocate(t *testing.T) {
	h := llmInUseHandler("alloc")
	for _, tc := range []struct{ method, path string }{{"POST", "/api/chat"}, {"GET", "/api/tags"}} {
		r := benchRequest(tc.method, tc.path)
		if n := allocsPerRequest(h, r); n != 0 {
			t.Errorf("%s %s: %v allocations per request in the middleware", tc.method, tc.path, n)
		}
	}
}

// memoryAwareAllocs bounds what the memory-aware path allocates for a
// request admitted at once: its state (body, forward, ticket), its
// body's buffer and the timer (with its func) that would cut a read
// still blocked at the deadline.
const memoryAwareAllocs = 4

// TestHandlerMemoryAwareAllocates pins that bound, with the body still
// forwarded whole.
func TestHandlerMemoryAwareAllocates(t *testing.T) {
	h := llmInUseHandler("alloc-memory")
	h.ts.cfg().GPU.Memory = &gpu.MemoryConfig{}
	body := []byte(typicalChatBody)
	rd := bytes.NewReader(body)
	src := io.NopCloser(rd)
	r := benchRequest("POST", "/api/chat")
	r.ContentLength = int64(len(body))
	vars := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	got := make([]byte, 2*len(body))
	var forwarded int
	next := caddyhttp.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) error {
		n, _ := io.ReadFull(r.Body, got)
		if bytes.Equal(got[:n], body) {
			forwarded++
		}
		return nil
	})
	w := httptest.NewRecorder()
	n := testing.AllocsPerRun(200, func() {
		delete(vars, handledVar)
		rd.Reset(body)
		r.Body = src
		h.ServeHTTP(w, r, next)
	})
	if forwarded != 201 { // AllocsPerRun runs it once more first
		t.Fatalf("the body was forwarded whole %d times of 201", forwarded)
	}
	if n > memoryAwareAllocs {
		t.Fatalf("%v allocations per request on the memory-aware path, want at most %d", n, memoryAwareAllocs)
	}
}

// typicalChatBody is a typical chat request's body.
const typicalChatBody = `{"model":"llama3.2","messages":[{"role":"user","content":"Why is the sky blue? Answer in one paragraph."}],"stream":true}`

// BenchmarkHandlerLLMMemoryAware is BenchmarkHandlerLLM with
// vram_admission on: the body is read for the model it names before the
// request goes on (the card's memory is not read here: that happens on
// the reader's goroutine, not on the request's path).
func BenchmarkHandlerLLMMemoryAware(b *testing.B) {
	h := benchHandler(b)
	h.ts.cfg().GPU.Memory = &gpu.MemoryConfig{}
	h.ts.gpu.TryLLM()
	body := []byte(typicalChatBody)
	rd := bytes.NewReader(body)
	src := io.NopCloser(rd)
	r := benchRequest("POST", "/api/chat")
	r.ContentLength = int64(len(body))
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		delete(r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any), handledVar)
		rd.Reset(body)
		r.Body = src // the handler put its buffered body in its place
		h.ServeHTTP(w, r, nopNext)
	}
}
