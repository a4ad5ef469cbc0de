package a1111test

import "net/http"

// Kill simulates the process dying: its memory is given back, and every
// request fails (the connection is cut) until Relaunch.
func (s *Server) Kill() {
	s.down.Store(true)
	s.mu.Lock()
	release := s.ckpt.release
	s.ckpt = checkpoint{}
	s.mu.Unlock()
	if release != nil {
		release("process exit")
	}
}

// Relaunch starts the process again: as A1111 does at launch, it loads
// its checkpoint onto the GPU on its own (unless NotLoadedAtStart), then
// answers. The load is nobody's request: an overlap it causes is the
// engine's own (gputest.GPU.Unbidden).
func (s *Server) Relaunch() {
	if !s.opts.NotLoadedAtStart {
		s.mu.Lock()
		s.ckpt = checkpoint{title: s.option, where: onGPU,
			release: s.gpu.OccupyUnbiddenBytes(service, "checkpoint on GPU: "+s.option+" (loaded at launch)", s.opts.ModelBytes)}
		s.notePeakLocked()
		s.mu.Unlock()
	}
	s.down.Store(false)
}

// downable cuts every request while the process is down.
func (s *Server) downable(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			panic(http.ErrAbortHandler)
		}
		h.ServeHTTP(w, r)
	})
}
