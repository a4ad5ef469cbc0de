package llamacpptest

import (
	"fmt"
	"net/http"
)

// The router's side of the model routes (proxy_post, proxy_get): find the
// model, load it if autoload is on, and hand the request to its child.

// load starts a child for m (server_models::load). At --models-max it
// first unloads the least recently used model and waits until it is
// unloaded; if the limit is still reached then, it fails.
func (s *Server) load(m *model) error {
	if err := s.evictLRU(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.status != statusUnloaded {
		return nil // another request loads it already
	}
	if s.max > 0 && s.runningLocked() >= s.max {
		return errLimit
	}
	s.spawnLocked(m)
	return nil
}

func (s *Server) runningLocked() int {
	n := 0
	for _, m := range s.models {
		if running(m.status) {
			n++
		}
	}
	return n
}

// evictLRU is unload_lru: at the limit, the running model with the oldest
// load or POST request is unloaded, and the load waits for its exit.
func (s *Server) evictLRU() error {
	if s.max <= 0 {
		return nil
	}
	s.mu.Lock()
	var lru *model
	for _, id := range s.ids {
		if m := s.models[id]; running(m.status) && (lru == nil || m.lastUsed < lru.lastUsed) {
			lru = m
		}
	}
	if lru == nil || s.runningLocked() < s.max {
		s.mu.Unlock()
		return nil
	}
	lru.child.stop()
	s.mu.Unlock()
	s.gpu.Mark(service, "evict "+lru.id)
	return s.waitUntil(func() bool { return lru.status == statusUnloaded })
}

// ensureReady is ensure_model_ready: an unloaded model is loaded, and the
// request waits until the model is no longer loading. A sleeping model is
// forwarded at once: its child wakes itself.
func (s *Server) ensureReady(m *model) error {
	if s.Status(m.id) == statusUnloaded {
		if err := s.load(m); err != nil {
			return err
		}
	}
	failed := false
	err := s.waitUntil(func() bool {
		failed = m.status == statusUnloaded && m.exitCode != 0
		return m.status != statusLoading
	})
	if err != nil {
		return err
	}
	if failed {
		return fmt.Errorf("model name=%s failed to load", m.id)
	}
	return nil
}

// autoload is is_autoload: ?autoload= overrides --models-autoload.
func (s *Server) autoload(r *http.Request) bool {
	switch v := r.URL.Query().Get("autoload"); v {
	case "":
		return !s.opts.NoAutoload
	default:
		return v == "true" || v == "1"
	}
}

// proxyPost routes a POST by the "model" of its JSON body.
func (s *Server) proxyPost(t *task) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, body, ok := readModel(w, r)
		if ok {
			s.proxy(w, r, t, name, body, true)
		}
	}
}

// proxyGet routes a GET by its ?model=.
func (s *Server) proxyGet(t *task) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.proxy(w, r, t, r.URL.Query().Get("model"), nil, false)
	}
}

// proxy is router_validate_model and proxy_request. Only POST requests
// count as a use for the LRU order.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, t *task, name string, body map[string]any, post bool) {
	if name == "" {
		writeError(w, http.StatusBadRequest, "model name is missing from the request")
		return
	}
	m := s.models[name]
	if m == nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("model '%s' not found", name))
		return
	}
	if s.autoload(r) {
		if err := s.ensureReady(m); err != nil {
			s.writeFailure(w, err)
			return
		}
	} else if !running(s.Status(name)) {
		writeError(w, http.StatusBadRequest, "model is not loaded")
		return
	}
	s.mu.Lock()
	c := m.child
	if c == nil {
		s.mu.Unlock()
		writeError(w, http.StatusBadRequest, fmt.Sprintf("model name=%s is not running", name))
		return
	}
	if post {
		s.tick++
		m.lastUsed = s.tick
	}
	s.mu.Unlock()
	s.serve(w, r, c, t, body)
}
