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

// recordHistory writes the job's history entry and takes it off the
// queue, together; a successful job's outputs are cached. It reports
// false, and does nothing, if the process "died" since epoch.
func (s *Server) recordHistory(j *job, epoch int, outcome string, msgs [][]any) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch {
		return false
	}
	statusStr := "success"
	if outcome != "execution_success" {
		statusStr = "error"
	} else {
		s.cache[string(j.prompt)] = true
	}
	images := map[string]any{}
	for _, o := range j.outputs {
		images[o] = map[string]any{"images": []map[string]string{{"filename": "ComfyUI_00001_.png", "subfolder": "", "type": "output"}}}
	}
	s.history[j.id] = map[string]any{
		"prompt":  []any{j.number, j.id, j.prompt, map[string]any{"client_id": j.clientID}, j.outputs},
		"outputs": images,
		"status":  map[string]any{"status_str": statusStr, "completed": outcome == "execution_success", "messages": msgs},
		"meta":    map[string]any{},
	}
	s.running = nil
	return true
}
