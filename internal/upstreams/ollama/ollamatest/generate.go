package ollamatest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
)

// genRequest is the union of the fields of /api/generate and /api/chat.
type genRequest struct {
	Model     string           `json:"model"`
	Prompt    *string          `json:"prompt"`
	Messages  *json.RawMessage `json:"messages"`
	Stream    *bool            `json:"stream"`
	KeepAlive json.RawMessage  `json:"keep_alive"`
	Input     json.RawMessage  `json:"input"`
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	var req genRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]string{"error": "invalid request: " + err.Error()})
		return
	}
	keepAlive, err := parseKeepAlive(req.KeepAlive)
	if err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	name := ollama.NormalizeName(req.Model)
	if req.Model == "" {
		writeJSON(w, 400, map[string]string{"error": "model is required"})
		return
	}
	if !s.library[name] {
		writeJSON(w, 404, map[string]string{"error": fmt.Sprintf("model '%s' not found", req.Model)})
		return
	}
	empty := (req.Prompt == nil || *req.Prompt == "") && (req.Messages == nil || string(*req.Messages) == "[]" || string(*req.Messages) == "null")
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if empty && keepAlive != nil && *keepAlive == 0 {
		s.unloads.Add(1)
		s.requestUnload(name)
		writeJSON(w, 200, map[string]any{"model": req.Model, "created_at": now, "response": "", "done": true, "done_reason": "unload"})
		return
	}
	done, err := s.admitRequest(r, name, keepAlive)
	if err != nil {
		return // client gone
	}
	defer done()
	if empty {
		s.warmups.Add(1)
		writeJSON(w, 200, map[string]any{"model": name, "created_at": now, "response": "", "done": true, "done_reason": "load"})
		return
	}
	s.requests.Add(1)
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	defer s.gpu.Mark("ollama", "done "+r.URL.Path+" "+name)
	chat := strings.HasSuffix(r.URL.Path, "/chat")
	chunk := func(tok string, last bool) map[string]any {
		m := map[string]any{"model": name, "created_at": time.Now().UTC().Format(time.RFC3339Nano), "done": last}
		if chat {
			m["message"] = map[string]string{"role": "assistant", "content": tok}
		} else {
			m["response"] = tok
		}
		if last {
			m["done_reason"] = "stop"
			m["eval_count"] = s.opts.Tokens
		}
		return m
	}
	if req.Stream != nil && !*req.Stream {
		s.generateTokens(r, nil)
		writeJSON(w, 200, chunk(strings.Repeat("tok ", s.opts.Tokens), true))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	enc := json.NewEncoder(w)
	s.generateTokens(r, func(i int) {
		enc.Encode(chunk(fmt.Sprintf("tok%d ", i), false))
		http.NewResponseController(w).Flush()
	})
	if s.undone.Load() {
		enc.Encode(chunk("", false))
		return
	}
	enc.Encode(chunk("", true))
}

// generateTokens paces a generation, calling emit for each token.
func (s *Server) generateTokens(r *http.Request, emit func(int)) {
	for i := range s.opts.Tokens {
		if i > 0 {
			select {
			case <-time.After(s.opts.TokenDelay):
			case <-r.Context().Done():
				return
			}
		}
		if emit != nil {
			emit(i)
		}
		if i == 0 {
			if gate := s.chatGate.Load(); gate != nil {
				select {
				case <-*gate:
				case <-r.Context().Done():
					return
				}
			}
		}
	}
}
