package comfytest

import (
	"encoding/json"
	"net/http"
)

func (s *Server) postFree(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Unload *bool `json:"unload_models"`
		Free   *bool `json:"free_memory"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	s.frees.Add(1)
	if (body.Unload != nil && *body.Unload) || (body.Free != nil && *body.Free) {
		s.mu.Lock()
		s.freeFlag = true
		s.mu.Unlock()
		s.gpu.Mark("comfy", "free requested")
		s.poke()
	}
	emptyOK(w)
}

// postInterrupt sets the running job's interrupt flag (with no prompt_id,
// or the running job's); an interrupt naming a pending job does nothing,
// and one that arrives while the worker takes the job from the queue
// (before it starts, which clears the flag) is dropped. The job stops
// later, at its next node.
func (s *Server) postInterrupt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		PromptID string `json:"prompt_id"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	if j := s.interrupt.Load(); j != nil && (body.PromptID == "" || body.PromptID == j.id) {
		if s.interrupt.CompareAndSwap(j, nil) {
			s.gpu.Mark("comfy", "interrupt requested "+j.id)
			close(j.stop)
		}
	} else if j := s.taking(); j != nil && (body.PromptID == "" || body.PromptID == j.id) {
		s.gpu.Mark("comfy", "interrupt dropped "+j.id+": taken from the queue, not started")
	}
	emptyOK(w)
}

// taking is the job the worker has taken from the queue and not started
// yet, if any.
func (s *Server) taking() *job {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.running; j != nil && s.interrupt.Load() != j && !j.started {
		return j
	}
	return nil
}

// emptyOK is ComfyUI's answer to /free and /interrupt: 200, no body.
func emptyOK(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
}
