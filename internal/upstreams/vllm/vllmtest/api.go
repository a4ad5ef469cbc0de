package vllmtest

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// sleep is POST /sleep?level=&mode=. The body is ignored: vLLM reads the
// query only. It answers once the engine sleeps.
func (s *Server) sleep(w http.ResponseWriter, r *http.Request) {
	s.sleeps.Add(1)
	q := r.URL.Query()
	level, mode := q.Get("level"), q.Get("mode")
	if !q.Has("level") {
		level = "1"
	}
	if !q.Has("mode") {
		mode = "abort"
	}
	n, err := strconv.Atoi(level)
	if err == nil {
		err = s.eng.sleep(n, mode)
	}
	if err != nil {
		// An exception in the handler: FastAPI's plain 500.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte("Internal Server Error"))
		return
	}
	s.gpu.Mark(service, "sleep answered")
	if s.opts.JSONSleepAnswer {
		writeJSON(w, http.StatusOK, map[string]any{"status": "sleeping", "level": n, "mode": mode})
		return
	}
	w.WriteHeader(http.StatusOK)
}

// wakeUp is POST /wake_up[?tags=...]: no tags wakes everything. It answers
// once the memory is back.
func (s *Server) wakeUp(w http.ResponseWriter, r *http.Request) {
	s.wakes.Add(1)
	tags := r.URL.Query()["tags"]
	if len(tags) == 0 {
		tags = nil
	}
	s.eng.wakeUp(tags)
	s.gpu.Mark(service, "wake answered")
	w.WriteHeader(http.StatusOK)
}

// isSleeping is GET /is_sleeping.
func (s *Server) isSleeping(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"is_sleeping": s.eng.isSleeping()})
}

// collectiveRPC is POST /collective_rpc: the fake knows reload_weights,
// which the docs call after a level-2 wake of the weights. One worker
// returning None answers {"results":[null]}.
func (s *Server) collectiveRPC(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Method *string `json:"method"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "JSON decode error: " + err.Error()})
		return
	}
	if body.Method == nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Missing 'method' in request body"})
		return
	}
	if *body.Method == "reload_weights" {
		s.eng.reloadWeights()
		s.gpu.Mark(service, "reload_weights")
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": []any{nil}})
}
