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
// or the running job's); an interrupt naming a pending job does nothing.
// The job stops later, at its next node.
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
	}
	emptyOK(w)
}

// emptyOK is ComfyUI's answer to /free and /interrupt: 200, no body.
func emptyOK(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
}
