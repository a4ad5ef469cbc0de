package llamaswaptest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
)

// answer is the process's own answer to a forwarded request, standing in
// for llama-server. cut closes when the process gets SIGTERM: llama-swap's
// reverse proxy then loses the upstream. A stream already begun just ends
// (the proxy's abort is recovered, so the chunked answer is closed
// normally, without [DONE]); an answer not begun becomes the proxy's 502
// with an empty body.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, model string, cut <-chan struct{}) {
	body, _ := io.ReadAll(r.Body)
	g := &generation{s: s, w: w, r: r, model: model, cut: cut, stream: wantsStream(body)}
	switch path := r.URL.Path; {
	case r.Method == http.MethodGet && (path == "/health" || path == "/v1/health"):
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	case r.Method == http.MethodGet && (path == "/v1/models" || path == "/models"):
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{
			{"id": model, "object": "model", "created": time.Now().Unix(), "owned_by": "llamacpp"}}})
	case r.Method == http.MethodGet && path == "/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!doctype html><title>llama.cpp</title>")
	case r.Method != http.MethodPost:
		notFound(w)
	case path == "/v1/chat/completions" || path == "/chat/completions":
		g.run(g.chatChunk, g.chatFinal)
	case path == "/v1/completions" || path == "/completions":
		g.run(g.textChunk, g.textFinal)
	case path == "/completion" || path == "/infill":
		g.run(g.nativeChunk, g.nativeFinal)
	case path == "/v1/embeddings" || path == "/embeddings" || path == "/embedding":
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "model": model,
			"data":  []map[string]any{{"object": "embedding", "index": 0, "embedding": []float64{0.1, 0.2, 0.3}}},
			"usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1}})
	default:
		notFound(w)
	}
}

// notFound is llama-server's answer to a path it has no route for.
func notFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
		"code": 404, "message": "File Not Found", "type": "not_found_error"}})
}

// generation is one paced answer.
type generation struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	model  string
	cut    <-chan struct{}
	stream bool
}

// run paces the tokens and writes them as SSE events (chunk per token,
// final at the end, then [DONE]) or, without "stream", final alone.
func (g *generation) run(chunk func(i int) any, final func() any) {
	if !g.stream {
		if !g.pace(nil) {
			g.cutOff(false)
			return
		}
		writeJSON(g.w, http.StatusOK, final())
		g.s.gpu.Mark(service, "done "+g.r.URL.Path+" "+g.model)
		return
	}
	fakeserver.StartEvents(g.w, "text/event-stream")
	if !g.pace(func(i int) { fakeserver.Event(g.w, "", chunk(i)) }) {
		g.cutOff(true)
		return
	}
	fakeserver.Event(g.w, "", final())
	fakeserver.EventsDone(g.w)
	g.s.gpu.Mark(service, "done "+g.r.URL.Path+" "+g.model)
}

// cutOff ends an answer whose upstream is gone.
func (g *generation) cutOff(begun bool) {
	if g.r.Context().Err() != nil {
		return // the client left first
	}
	g.s.gpu.Mark(service, "cut "+g.r.URL.Path+" "+g.model)
	if !begun {
		g.w.WriteHeader(http.StatusBadGateway)
	}
}

// pace waits out the tokens, calling emit for each, and holds after the
// first while HoldChats is in force. It returns false when the upstream is
// cut (or the client or the fake goes away) first.
func (g *generation) pace(emit func(int)) bool {
	p := fakeserver.Pacer{Tokens: g.s.opts.Tokens, Delay: g.s.opts.TokenDelay, Gate: &g.s.chats}
	return p.Run(g.await, func(i int) error {
		select {
		case <-g.cut:
			return errCut
		default:
		}
		if emit != nil {
			emit(i)
		}
		if i == 0 {
			g.s.gpu.Mark(service, "generating "+g.r.URL.Path+" "+g.model)
		}
		return nil
	}) == nil
}

// errCut ends an answer whose upstream is gone.
var errCut = errors.New("upstream cut")

// await blocks until ready is closed; errCut if the answer must end first.
func (g *generation) await(ready <-chan struct{}) error {
	select {
	case <-ready:
		return nil
	case <-g.cut:
	case <-g.r.Context().Done():
	case <-g.s.ctx.Done():
	}
	return errCut
}

func (g *generation) chatChunk(i int) any {
	return map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": g.model,
		"choices": []map[string]any{{"index": 0, "delta": map[string]string{"content": fmt.Sprintf("tok%d ", i)}, "finish_reason": nil}}}
}

func (g *generation) chatFinal() any {
	if g.stream {
		return map[string]any{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": g.model,
			"choices": []map[string]any{{"index": 0, "delta": map[string]string{}, "finish_reason": "stop"}}}
	}
	return map[string]any{"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(), "model": g.model,
		"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": g.text()}, "finish_reason": "stop"}},
		"usage":   g.usage()}
}

func (g *generation) textChunk(i int) any {
	return map[string]any{"id": "cmpl-fake", "object": "text_completion", "created": time.Now().Unix(), "model": g.model,
		"choices": []map[string]any{{"index": 0, "text": fmt.Sprintf("tok%d ", i), "finish_reason": nil}}}
}

func (g *generation) textFinal() any {
	text := ""
	if !g.stream {
		text = g.text()
	}
	return map[string]any{"id": "cmpl-fake", "object": "text_completion", "created": time.Now().Unix(), "model": g.model,
		"choices": []map[string]any{{"index": 0, "text": text, "finish_reason": "stop"}}, "usage": g.usage()}
}

// nativeChunk and nativeFinal are llama-server's own /completion shape.
func (g *generation) nativeChunk(i int) any {
	return map[string]any{"content": fmt.Sprintf("tok%d ", i), "stop": false}
}

func (g *generation) nativeFinal() any {
	text := ""
	if !g.stream {
		text = g.text()
	}
	return map[string]any{"content": text, "stop": true, "model": g.model, "tokens_predicted": g.s.opts.Tokens}
}

func (g *generation) text() string {
	var b strings.Builder
	for i := range g.s.opts.Tokens {
		fmt.Fprintf(&b, "tok%d ", i)
	}
	return b.String()
}

func (g *generation) usage() map[string]int {
	return map[string]int{"prompt_tokens": 1, "completion_tokens": g.s.opts.Tokens, "total_tokens": g.s.opts.Tokens + 1}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	fakeserver.WriteJSON(w, status, fakeserver.JSONUTF8, v)
}
