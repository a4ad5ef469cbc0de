package comfytest

import (
	"encoding/json"
	"net/http"
)

func (s *Server) enqueue(j *job) int {
	s.mu.Lock()
	j.number = s.number // counts from 0 per process
	s.number++
	s.pending = append(s.pending, j)
	s.mu.Unlock()
	s.gpu.Mark("comfy", "queued "+j.id)
	s.broadcastStatus()
	s.poke()
	return j.number
}

func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Server) queueRemaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.pending)
	if s.running != nil {
		n++
	}
	return n
}

func (s *Server) getPrompt(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.pending)
	if s.running != nil {
		n++
	}
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"exec_info": map[string]any{"queue_remaining": n}})
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	item := func(j *job) []any {
		return []any{j.number, j.id, j.prompt, map[string]any{"client_id": j.clientID}, j.outputs}
	}
	running, pending := []any{}, []any{}
	if s.running != nil {
		running = append(running, item(s.running))
	}
	for _, j := range s.pending {
		pending = append(pending, item(j))
	}
	writeJSON(w, 200, map[string]any{"queue_running": running, "queue_pending": pending})
}

func (s *Server) postQueue(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Clear  bool     `json:"clear"`
		Delete []string `json:"delete"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	s.mu.Lock()
	kept := s.pending[:0]
	for _, j := range s.pending {
		del := body.Clear
		for _, id := range body.Delete {
			del = del || id == j.id
		}
		if !del {
			kept = append(kept, j)
		}
	}
	s.pending = kept
	s.mu.Unlock()
	s.broadcastStatus()
	w.WriteHeader(http.StatusOK)
}
