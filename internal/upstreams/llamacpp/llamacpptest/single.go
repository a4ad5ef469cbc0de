package llamacpptest

import (
	"net/http"
	"time"
)

// A single-model server (-m): its routes serve its one model, whatever a
// request's "model" says. It has no /models/load or /models/unload (they
// are 404 "File Not Found"); serveHTTP answers 503 while it loads.

func (s *Server) singleRoutes() map[string]http.HandlerFunc {
	rt := map[string]http.HandlerFunc{
		"GET /health":        s.health,
		"GET /v1/health":     s.health,
		"GET /props":         s.singleProps,
		"GET /models":        s.singleModels,
		"GET /v1/models":     s.singleModels,
		"GET /slots":         s.serveSingle(taskSlots, false),
		"GET /metrics":       s.serveSingle(taskMetrics, false),
		"GET /lora-adapters": s.serveSingle(taskLora, false),
	}
	for path, t := range modelRoutes {
		rt["POST "+path] = s.serveSingle(t, true)
	}
	return rt
}

// serveSingle runs a task on the server's model; one that sleeps is
// reloaded first.
func (s *Server) serveSingle(t *task, post bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if post {
			var ok bool
			if _, body, ok = readModel(w, r); !ok {
				return
			}
		}
		s.mu.Lock()
		c := s.single.child
		s.mu.Unlock()
		if c == nil {
			panic(http.ErrAbortHandler) // the process has aborted
		}
		s.serve(w, r, c, t, body)
	}
}

// singleProps is GET /props: no "router" role, and is_sleeping. It never
// wakes the model.
func (s *Server) singleProps(w http.ResponseWriter, r *http.Request) {
	sleeping := s.Status(s.single.id) == statusSleeping
	writeJSON(w, http.StatusOK, s.modelProps(s.single, sleeping))
}

// modelProps is a model process's /props.
func (s *Server) modelProps(m *model, sleeping bool) map[string]any {
	return map[string]any{
		"default_generation_settings": map[string]any{"params": map[string]any{}, "n_ctx": 4096},
		"total_slots":                 4,
		"model_alias":                 m.id,
		"model_path":                  modelPath(m.id),
		"modalities":                  map[string]bool{"vision": false, "video": false, "audio": false},
		"endpoint_slots":              true,
		"endpoint_props":              false,
		"endpoint_metrics":            true,
		"build_info":                  buildInfo,
		"is_sleeping":                 sleeping,
		"cors_proxy_enabled":          false,
	}
}

// singleModels is GET /models: the one model, without a router's status.
// It never wakes the model.
func (s *Server) singleModels(w http.ResponseWriter, r *http.Request) {
	id := s.single.id
	writeJSON(w, http.StatusOK, map[string]any{
		"models": []map[string]any{{"name": id, "model": id, "modified_at": "", "size": "", "digest": "",
			"type": "model", "description": "", "tags": []string{""}, "capabilities": []string{"completion"},
			"parameters": "", "details": map[string]any{"parent_model": "", "format": "gguf", "family": ""}}},
		"object": "list",
		"data": []map[string]any{{"id": id, "aliases": []string{id}, "tags": []string{}, "object": "model",
			"created": time.Now().Unix(), "owned_by": "llamacpp",
			"meta": map[string]any{"vocab_type": 2, "n_vocab": 151936, "n_ctx_train": 40960, "n_embd": 4096}}},
	})
}
