package ollamatest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
)

func (s *Server) openAI(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"message": err.Error(), "type": "invalid_request_error"}})
		return
	}
	name := ollama.NormalizeName(req.Model)
	if !s.library[name] {
		writeJSON(w, 404, map[string]any{"error": map[string]any{"message": fmt.Sprintf("model \"%s\" not found, try pulling it first", req.Model), "type": "api_error", "code": nil}})
		return
	}
	done, err := s.admitRequest(r, name, nil)
	if err != nil {
		writeLoadError(w, err, true) // or the client has gone
		return
	}
	defer done()
	s.requests.Add(1)
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	created := time.Now().Unix()
	switch r.URL.Path {
	case "/v1/embeddings":
		writeJSON(w, 200, map[string]any{"object": "list", "model": req.Model,
			"data":  []map[string]any{{"object": "embedding", "index": 0, "embedding": []float64{0.1, 0.2, 0.3}}},
			"usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1}})
	case "/v1/chat/completions":
		s.chatCompletion(w, r, req.Model, req.Stream, created)
	default:
		s.generateTokens(r, nil)
		writeJSON(w, 200, map[string]any{"id": "cmpl-1", "object": "text_completion", "created": created, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "text": "tok", "finish_reason": "stop"}}})
	}
}

// chatCompletion answers /v1/chat/completions, whole or as a stream of
// server-sent events.
func (s *Server) chatCompletion(w http.ResponseWriter, r *http.Request, model string, stream bool, created int64) {
	if !stream {
		s.generateTokens(r, nil)
		writeJSON(w, 200, map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "created": created, "model": model,
			"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": strings.Repeat("tok ", s.opts.Tokens)}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 1, "completion_tokens": s.opts.Tokens, "total_tokens": s.opts.Tokens + 1}})
		return
	}
	fakeserver.StartEvents(w, "text/event-stream")
	event := func(delta map[string]string, finish any) {
		fakeserver.Event(w, "", map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}}})
	}
	s.generateTokens(r, func(i int) {
		event(map[string]string{"role": "assistant", "content": fmt.Sprintf("tok%d ", i)}, nil)
	})
	event(map[string]string{"role": "assistant", "content": ""}, "stop")
	fakeserver.EventsDone(w)
}
