package llamacpptest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// errLimit is load's answer when --models-max is still reached after the
// eviction (concurrent loads took the places).
var errLimit = errors.New("model limit reached, try again later")

func (s *Server) routerRoutes() map[string]http.HandlerFunc {
	rt := map[string]http.HandlerFunc{
		"GET /health":         s.health,
		"GET /v1/health":      s.health,
		"GET /props":          s.routerProps,
		"GET /models":         s.listModels,
		"GET /v1/models":      s.listModels,
		"POST /models/load":   s.guard(s.loadModel),
		"POST /models/unload": s.guard(s.unloadModel),
		"GET /slots":          s.proxyGet(taskSlots),
		"GET /metrics":        s.proxyGet(taskMetrics),
		"GET /lora-adapters":  s.proxyGet(taskLora),
	}
	for path, t := range modelRoutes {
		rt["POST "+path] = s.proxyPost(t)
	}
	return rt
}

// health is the router's own: it has no model, so it is always ok.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// routerProps answers GET /props. With ?model= the router forwards it to
// that model's child, like any model route (so it may load the model).
func (s *Server) routerProps(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("model") != "" {
		s.proxyGet(taskProps)(w, r)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"role":            "router",
		"max_instances":   s.max,
		"models_autoload": !s.opts.NoAutoload,
		"model_alias":     "llama-server",
		"model_path":      "none",
		"default_generation_settings": map[string]any{
			"params": map[string]any{}, "n_ctx": 0,
		},
		"ui_settings":        map[string]any{},
		"build_info":         buildInfo,
		"cors_proxy_enabled": false,
	})
}

// listModels is GET /models (= /v1/models): every model, llama.cpp's
// entry shape, sorted by id.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	data := make([]map[string]any, 0, len(s.ids))
	now := time.Now().Unix()
	for _, id := range s.ids {
		data = append(data, s.entryLocked(s.models[id], now))
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"data": data, "object": "list"})
}

func (s *Server) entryLocked(m *model, now int64) map[string]any {
	status := map[string]any{"value": m.status, "args": []string{
		"llama-server", "--host", "127.0.0.1", "--port", fmt.Sprint(m.port), "--alias", m.id, "--model", modelPath(m.id)}}
	if m.source == "preset" {
		status["preset"] = "[" + m.id + "]\nload-on-startup = true\n"
	}
	if m.status == statusUnloaded && m.exitCode != 0 {
		status["exit_code"], status["failed"] = m.exitCode, true
	}
	return map[string]any{
		"id": m.id, "aliases": []string{}, "tags": []string{},
		"object": "model", "owned_by": "llamacpp", "created": now,
		"status": status,
		"architecture": map[string]any{
			"input_modalities": []string{"text"}, "output_modalities": []string{"text"},
		},
		"source": m.source, "can_remove": m.source == "cache",
	}
}

func modelPath(id string) string { return "/models/" + id + ".gguf" }

// readModel reads the "model" of a JSON body as llama.cpp does: a body
// that is not JSON is an exception (500), a missing or non-string model
// is "". It returns the body too, for the child.
func readModel(w http.ResponseWriter, r *http.Request) (name string, body map[string]any, ok bool) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		writeError(w, http.StatusInternalServerError, "[json.exception.parse_error.101] parse error: "+err.Error())
		return "", nil, false
	}
	body, _ = v.(map[string]any)
	name, _ = body["model"].(string)
	return name, body, true
}

// loadModel is POST /models/load: answered once the child is spawned,
// while it still loads.
func (s *Server) loadModel(w http.ResponseWriter, r *http.Request) {
	name, _, ok := readModel(w, r)
	if !ok {
		return
	}
	m := s.models[name]
	if m == nil {
		writeError(w, http.StatusNotFound, "model is not found")
		return
	}
	if running(s.Status(name)) {
		writeError(w, http.StatusBadRequest, "model is already running")
		return
	}
	if err := s.load(m); err != nil {
		s.writeFailure(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

// unloadModel is POST /models/unload: answered at once; the child exits
// later (at once if it is still loading), and the model turns unloaded
// then.
func (s *Server) unloadModel(w http.ResponseWriter, r *http.Request) {
	name, _, ok := readModel(w, r)
	if !ok {
		return
	}
	m := s.models[name]
	if m == nil {
		writeError(w, http.StatusBadRequest, "model is not found") // 400 here, not 404
		return
	}
	s.mu.Lock()
	if !running(m.status) {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, "model is not running")
		return
	}
	s.unloads.Add(1)
	m.child.stop()
	s.mu.Unlock()
	s.gpu.Mark(service, "unload requested "+name)
	writeJSON(w, http.StatusOK, map[string]bool{"success": true})
}

// writeFailure answers a load that failed, or the end of the process.
func (s *Server) writeFailure(w http.ResponseWriter, err error) {
	if errors.Is(err, errClosed) {
		panic(http.ErrAbortHandler) // the process is gone: the connection drops
	}
	writeError(w, http.StatusInternalServerError, err.Error())
}
