package llamaswaptest

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"strings"
	"time"
)

// modelRoute is every model-routed route: it identifies the model, waits
// for the scheduler to grant it a ready process and forwards to it.
func (s *Server) modelRoute(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	// llama-swap forwards /v/... and /audioapi/... without the prefix.
	if rest, ok := strings.CutPrefix(r.URL.Path, "/v/"); ok {
		r.URL.Path = "/" + rest
	}
	r.URL.Path = strings.TrimPrefix(r.URL.Path, "/audioapi")
	model := requestModel(r)
	switch {
	case model == "":
		sendResponse(w, r, http.StatusNotFound, "no model id could be identified")
	case s.procs[model] == nil:
		// Neither the local router nor a peer handles it (server.go's
		// localPeerHandler). "no local server found for requested model"
		// is what the unload route says of a model that only a peer has.
		sendResponse(w, r, http.StatusNotFound, "no router for requested model")
	default:
		s.dispatch(w, r, model)
	}
}

// dispatch serves one request on model through the scheduler.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request, model string) {
	s.gpu.Mark(service, "request "+r.URL.Path+" "+model)
	p, err := s.schedule(r.Context(), model)
	if err != nil {
		if r.Context().Err() == nil && s.ctx.Err() == nil { // else nobody is there to answer
			sendError(w, r, err)
		}
		return
	}
	defer s.serveDone(model)
	p.serve(w, r)
}

// upstream is /upstream/{model}/{path...}: any method, forwarded to the
// model's process without the prefix, loading the model on demand.
func (s *Server) upstream(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	name, rest, found := s.findModelInPath("/" + r.PathValue("upstreamPath"))
	if !found {
		sendResponse(w, r, http.StatusNotFound, "model not found")
		return
	}
	// /upstream/m becomes /upstream/m/ so that relative URLs resolve: 301
	// for GET and HEAD, 308 otherwise to keep the method.
	if rest == "/" && !strings.HasSuffix(r.URL.Path, "/") {
		to := "/upstream/" + name + "/"
		if r.URL.RawQuery != "" {
			to += "?" + r.URL.RawQuery
		}
		status := http.StatusPermanentRedirect
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			status = http.StatusMovedPermanently
		}
		http.Redirect(w, r, to, status)
		return
	}
	r.URL.Path, r.URL.RawPath = rest, ""
	s.dispatch(w, r, name)
}

// findModelInPath walks the path's segments, as llama-swap does, so that
// model names with slashes resolve: the longest prefix naming a model
// wins.
func (s *Server) findModelInPath(path string) (name, rest string, found bool) {
	parts := strings.Split(strings.TrimSpace(path), "/")
	prefix := ""
	for i, part := range parts {
		if part == "" {
			continue
		}
		if prefix == "" {
			prefix = part
		} else {
			prefix += "/" + part
		}
		if s.procs[prefix] != nil {
			name, rest, found = prefix, "/"+strings.Join(parts[i+1:], "/"), true
		}
	}
	return name, rest, found
}

// running is GET /running: the processes that are not stopped, sorted by
// model.
func (s *Server) running(w http.ResponseWriter, r *http.Request) {
	type entry struct {
		Model       string `json:"model"`
		State       string `json:"state"`
		Cmd         string `json:"cmd"`
		Proxy       string `json:"proxy"`
		TTL         int    `json:"ttl"`
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	list := []entry{}
	for _, m := range s.models {
		p := s.procs[m]
		if st := p.State(); st != stateStopped {
			list = append(list, entry{Model: m, State: st, Cmd: p.cmd(), Proxy: p.proxy()})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"running": list})
}

// listModels is GET /v1/models (and /models): every configured model,
// "loaded" while its process is in any state but stopped.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	created := time.Now().Unix()
	data := []map[string]any{}
	for _, m := range s.models {
		status := "unloaded"
		if s.procs[m].State() != stateStopped {
			status = "loaded"
		}
		data = append(data, map[string]any{
			"id": m, "object": "model", "created": created, "owned_by": "llama-swap",
			"meta":   map[string]any{"llamaswap": map[string]any{"type": "model"}},
			"status": map[string]any{"value": status},
		})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// unloadAllRoute is POST /api/models/unload: it answers once every
// process has exited.
func (s *Server) unloadAllRoute(w http.ResponseWriter, r *http.Request) {
	s.unloads.Add(1)
	s.unload(s.models)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"msg": "ok"})
}

// unloadModelRoute is POST /api/models/unload/{model}: text "OK" once the
// model's process has exited.
func (s *Server) unloadModelRoute(w http.ResponseWriter, r *http.Request) {
	s.unloads.Add(1)
	model := strings.TrimPrefix(r.PathValue("model"), "/")
	if s.procs[model] == nil {
		sendResponse(w, r, http.StatusNotFound, "model not found")
		return
	}
	s.unload([]string{model})
	w.WriteHeader(http.StatusOK)
	w.Write([]byte("OK"))
}

// legacyUnload is GET /unload: the same unload of every model, text "OK".
func (s *Server) legacyUnload(w http.ResponseWriter, r *http.Request) {
	s.unloads.Add(1)
	s.unload(s.models)
	w.WriteHeader(http.StatusOK)
	w.Write([]byte("OK"))
}

// health is GET /health: "OK" always; it says nothing about the models.
func health(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusOK)
	w.Write([]byte("OK"))
}

// errConcurrencyLimit is the scheduler's refusal of a request beyond the
// model's concurrency limit.
var errConcurrencyLimit = errors.New("concurrency limit reached")

// errUnloaded is what requests waiting for an unloaded model are granted;
// "group" is the name of llama-swap's default router.
var errUnloaded = errors.New("group: model unloaded")

// sendError writes a scheduler error as llama-swap's SendError does.
func sendError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errConcurrencyLimit) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		w.Write(envelope(http.StatusTooManyRequests, "Too many requests", "concurrency_limit"))
		return
	}
	sendResponse(w, r, http.StatusInternalServerError, fmt.Sprintf("unspecific error: %v", err))
}

// sendResponse writes an error in the form the client prefers, as
// llama-swap's SendResponse does: text, HTML or the JSON envelope.
func sendResponse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	accept := r.Header.Get("Accept")
	switch {
	case strings.Contains(accept, "text/plain"):
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		fmt.Fprintf(w, "llama-swap: %s", msg)
	case strings.Contains(accept, "text/html"):
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<html><body><h1>llama-swap</h1><p>%s</p></body></html>`, html.EscapeString(msg))
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(envelope(status, msg, ""))
	}
}

// envelope is llama-swap's OpenAI-style error body. code "" takes the
// status's default code.
func envelope(status int, msg, code string) []byte {
	typ, def := "server_error", "internal_error"
	switch status {
	case http.StatusBadRequest:
		typ, def = "invalid_request_error", "bad_request"
	case http.StatusUnauthorized:
		typ, def = "authentication_error", "unauthorized"
	case http.StatusNotFound:
		typ, def = "invalid_request_error", "not_found"
	case http.StatusConflict:
		typ, def = "invalid_request_error", "conflict"
	case http.StatusTooManyRequests:
		typ, def = "rate_limit_error", "rate_limit_exceeded"
	case http.StatusBadGateway:
		def = "bad_gateway"
	case http.StatusServiceUnavailable:
		def = "service_unavailable"
	}
	if code == "" {
		code = def
	}
	// Structs, not maps: llama-swap's field order is src, error; message,
	// type, param, code.
	type detail struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code,omitempty"`
	}
	b, _ := json.Marshal(struct {
		Src   string `json:"src"`
		Error detail `json:"error"`
	}{"llama-swap", detail{Message: msg, Type: typ, Code: code}})
	return b
}
