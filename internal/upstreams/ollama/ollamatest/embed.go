package ollamatest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
)

func (s *Server) embed(w http.ResponseWriter, r *http.Request) {
	var req genRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	name := ollama.NormalizeName(req.Model)
	if !s.library[name] {
		writeJSON(w, 404, map[string]string{"error": fmt.Sprintf("model %q not found, try pulling it first", req.Model)})
		return
	}
	keepAlive, err := parseKeepAlive(req.KeepAlive)
	if err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	done, err := s.admitRequest(r, name, keepAlive)
	if err != nil {
		writeLoadError(w, err, false) // or the client has gone
		return
	}
	defer done()
	s.requests.Add(1)
	vec := []float64{0.1, 0.2, 0.3}
	if strings.HasSuffix(r.URL.Path, "/embeddings") {
		writeJSON(w, 200, map[string]any{"embedding": vec})
		return
	}
	writeJSON(w, 200, map[string]any{"model": name, "embeddings": [][]float64{vec}})
}
