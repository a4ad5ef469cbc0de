package comfytest

import "net/http"

func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id := r.PathValue("id"); id != "" {
		out := map[string]any{}
		if h, ok := s.history[id]; ok {
			out[id] = h
		}
		writeJSON(w, 200, out)
		return
	}
	writeJSON(w, 200, s.history)
}
