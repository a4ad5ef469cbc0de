package ollamatest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
)

// The routes that need no GPU, and /api/ps.

func (s *Server) root(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, "Ollama is running")
}

func (s *Server) tags(w http.ResponseWriter, r *http.Request) {
	type tag struct {
		Name  string `json:"name"`
		Model string `json:"model"`
		Size  int64  `json:"size"`
	}
	tags := []tag{}
	for n := range s.library {
		tags = append(tags, tag{n, n, s.size(n)})
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i].Name < tags[j].Name })
	writeJSON(w, 200, map[string]any{"models": tags})
}

func (s *Server) v1Models(w http.ResponseWriter, r *http.Request) {
	data := []map[string]any{}
	for n := range s.library {
		data = append(data, map[string]any{"id": n, "object": "model", "created": 0, "owned_by": "library"})
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": data})
}

func (s *Server) show(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	name := ollama.NormalizeName(req.Model + req.Name)
	if !s.library[name] {
		writeJSON(w, 404, map[string]string{"error": fmt.Sprintf("model '%s' not found", req.Model+req.Name)})
		return
	}
	writeJSON(w, 200, map[string]any{"modelfile": "FROM " + name, "details": map[string]string{"format": "gguf"}})
}

func (s *Server) ps(w http.ResponseWriter, r *http.Request) {
	if st := s.psStatus.Load(); st != 0 {
		writeJSON(w, int(st), map[string]string{"error": "simulated failure"})
		return
	}
	s.mu.Lock()
	list := []map[string]any{}
	for _, m := range s.models {
		if !m.loaded {
			continue // a loading model is not listed (llama.cpp runner)
		}
		list = append(list, map[string]any{
			"name": m.name, "model": m.name, "size": m.size, "digest": "sha256:fake",
			"details":    map[string]string{"format": "gguf", "family": "llama"},
			"expires_at": m.expires.UTC().Format(time.RFC3339Nano), "size_vram": m.vram,
			"context_length": 4096,
		})
	}
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"models": list})
}
