package ollamatest

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// Memory: where a model goes on a GPU with a size, as Ollama v0.17.4's
// scheduler decides it (server/sched.go processPending and
// findRunnerToUnload, llm/server.go verifyLayout).

// loadError is a load that failed: the requests waiting for it get
// status and {"error":msg}, as Ollama's handleScheduleError answers.
type loadError struct {
	status int
	msg    string
}

func (e *loadError) Error() string { return e.msg }

// oomMessage is what a request gets when its model's runner dies of a
// failed cudaMalloc while loading (WaitUntilRunning's "llama runner
// process has terminated: %w", with the runner's last error line).
const oomMessage = "llama runner process has terminated: cudaMalloc failed: out of memory"

// fitsLocked reports whether bytes fit in the card's free memory beside
// Ollama's minimum; s.mu is held.
func (s *Server) fitsLocked(bytes int64) bool {
	return bytes+max(s.opts.MinimumVRAM, 0) <= s.gpu.Free()
}

// makeRoomLocked is what Ollama does before it loads name on a card with
// a size where name does not fit: while another of its models is loaded
// (or loading, or exiting), it loads nothing, but unloads one and waits.
// It returns the model to wait for, or nil to load now. Like
// findRunnerToUnload, it picks by shortest keep_alive (a negative one is
// the longest), then by name (Ollama's tie-break, the blob path, is
// arbitrary for a client), an idle model first; a busy one unloads once
// its requests (queued ones too) have ended. s.mu is held.
func (s *Server) makeRoomLocked(name string) *model {
	if s.gpu.Total() <= 0 || s.fitsLocked(s.size(name)) {
		return nil
	}
	var loaded []*model
	for _, m := range s.models {
		if m.unloading || m.evicting {
			return m // an unload under way: wait for it, then look again
		}
		loaded = append(loaded, m)
	}
	if len(loaded) == 0 {
		return nil // alone: it loads partly offloaded (placeLocked)
	}
	sort.Slice(loaded, func(i, j int) bool {
		a, b := uint64(loaded[i].keepAlive), uint64(loaded[j].keepAlive)
		if a != b {
			return a < b
		}
		return loaded[i].name < loaded[j].name
	})
	victim := loaded[0]
	for _, m := range loaded {
		if m.loaded && m.refs == 0 {
			victim = m
			break
		}
	}
	victim.evicting = true
	s.gpu.Mark("ollama", "evict "+victim.name+" to make room for "+name)
	if victim.loaded && victim.refs == 0 {
		s.startUnloadLocked(victim)
	} else {
		victim.unloadReq = true
		victim.expires = time.Now()
	}
	return victim
}

// placeLocked decides how much of name goes on the GPU: all of it when
// the card has no size or it fits; otherwise what fits beside Ollama's
// minimum (nothing, at worst: the model then runs on the CPU), as Ollama
// offloads the layers that do not fit. It fails as verifyLayout does
// when the CPU part exceeds Options.SystemMemory. s.mu is held.
func (s *Server) placeLocked(name string) (size, vram int64, err error) {
	size = s.size(name)
	if s.gpu.Total() <= 0 || s.fitsLocked(size) {
		return size, size, nil
	}
	vram = min(size, max(s.gpu.Free()-max(s.opts.MinimumVRAM, 0), 0))
	cpu := size - vram
	if s.opts.SystemMemory > 0 && cpu > s.opts.SystemMemory {
		return 0, 0, &loadError{http.StatusInternalServerError, fmt.Sprintf("model requires more system memory (%s) than is available (%s)",
			humanBytes2(cpu), humanBytes2(s.opts.SystemMemory))}
	}
	s.gpu.Mark("ollama", fmt.Sprintf("offload %s: %d of %d bytes on the GPU", name, vram, size))
	return size, vram, nil
}

// failLoadLocked ends a load whose runner died (Options.OOM): the model is
// gone, the runner's memory is freed, and then its waiters get the error.
// It unlocks s.mu.
func (s *Server) failLoadLocked(m *model) {
	m.loadErr = &loadError{http.StatusInternalServerError, oomMessage}
	m.unloading = true
	if s.models[m.name] == m {
		delete(s.models, m.name)
	}
	s.mu.Unlock()
	m.runner.exit("load failed " + m.name + ": cudaMalloc failed: out of memory")
	close(m.ready)
	close(m.gone)
}

// writeLoadError answers a request whose model could not be loaded, in
// the route's error shape (/v1: OpenAI's); other errors (the client has
// gone) get no answer.
func writeLoadError(w http.ResponseWriter, err error, openAI bool) {
	var le *loadError
	if !errors.As(err, &le) {
		return
	}
	if openAI {
		type openAIError struct { // openai.Error, in its field order
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   any     `json:"param"`
			Code    *string `json:"code"`
		}
		writeJSON(w, le.status, map[string]any{"error": openAIError{Message: le.msg, Type: "api_error"}})
		return
	}
	writeJSON(w, le.status, map[string]string{"error": le.msg})
}

// humanBytes2 is Ollama's format.HumanBytes2.
func humanBytes2(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
