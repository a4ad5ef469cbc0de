package ollamatest

import (
	"context"
	"time"
)

// defaultKeepAlive is Ollama's keep_alive when neither the request nor
// OLLAMA_KEEP_ALIVE sets one.
const defaultKeepAlive = 5 * time.Minute

// model is one model's runner, from the start of its load until the
// runner has exited. Its fields are guarded by Server.mu.
type model struct {
	name      string
	runner    *runner
	ready     chan struct{} // closed when loaded
	abort     chan struct{} // closed when the load is aborted
	gone      chan struct{} // closed when the runner has exited
	size      int64         // the model's size (/api/ps size)
	vram      int64         // the part of it on the GPU (/api/ps size_vram)
	loadErr   error         // the load failed (Options.OOM); set before ready closes
	loaded    bool
	unloading bool          // the runner is exiting
	evicting  bool          // unloaded to make room for another model
	unloadReq bool          // an unload waits for the model's requests
	refs      int           // requests accepted on the model, queued or running
	slots     chan struct{} // OLLAMA_NUM_PARALLEL places
	keepAlive time.Duration // applied when the last request ends
	expires   time.Time
	timer     *time.Timer
}

// use admits one request on a model: it starts the load if the model has
// no runner, waits for the load and for a place among the model's parallel
// slots, and returns done, which ends the use. keepAlive is the request's
// own keep_alive (nil: none given). A request that goes away while the
// model loads, leaving nobody waiting for it, aborts the load; the runner
// then lives AbortDelay more, holding its memory, and is never listed.
func (s *Server) use(ctx context.Context, name string, keepAlive *time.Duration) (done func(), err error) {
	m, err := s.admit(ctx, name, keepAlive)
	if err != nil {
		return nil, err
	}
	select {
	case <-m.ready:
	case <-ctx.Done():
		s.leave(m, false)
		return nil, ctx.Err()
	}
	if m.loadErr != nil {
		s.leave(m, false)
		return nil, m.loadErr
	}
	select {
	case m.slots <- struct{}{}:
	default:
		// All OLLAMA_NUM_PARALLEL places are taken: queue inside.
		s.gpu.Mark("ollama", "queued on "+name)
		select {
		case m.slots <- struct{}{}:
		case <-ctx.Done():
			s.leave(m, false)
			return nil, ctx.Err()
		}
	}
	return func() { s.leave(m, true) }, nil
}

// admit finds or starts the model's runner and counts the request on it.
// A runner that is exiting is waited for: the request loads a new one.
// So is a model that Ollama unloads to make room for this one.
func (s *Server) admit(ctx context.Context, name string, keepAlive *time.Duration) (*model, error) {
	for {
		s.mu.Lock()
		m := s.models[name]
		var wait *model
		switch {
		case m != nil && (m.unloading || m.evicting):
			wait = m
		case m == nil:
			wait = s.makeRoomLocked(name)
		}
		if wait != nil {
			gone := wait.gone
			s.mu.Unlock()
			select {
			case <-gone:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if m == nil {
			var err error
			if m, err = s.loadLocked(name); err != nil {
				s.mu.Unlock()
				return nil, err
			}
		}
		if m.timer != nil {
			m.timer.Stop()
			m.timer = nil
		}
		if keepAlive != nil {
			// A request with its own keep_alive cancels a pending
			// unload; one without leaves it pending.
			if m.unloadReq && *keepAlive != 0 {
				m.unloadReq = false
				s.gpu.Mark("ollama", "keep_alive cancels the pending stop of "+name)
			}
			m.keepAlive = *keepAlive
		}
		m.refs++
		s.mu.Unlock()
		return m, nil
	}
}

// loadLocked starts a runner for name. Its memory is in use from the
// first moment, though /api/ps lists the model only once it has loaded.
// It fails if the model's part offloaded to the CPU exceeds the system
// memory (see placeLocked).
func (s *Server) loadLocked(name string) (*model, error) {
	m := &model{
		name: name, ready: make(chan struct{}), abort: make(chan struct{}), gone: make(chan struct{}),
		slots: make(chan struct{}, s.opts.Parallel), keepAlive: defaultKeepAlive,
	}
	var err error
	if m.size, m.vram, err = s.placeLocked(name); err != nil {
		return nil, err
	}
	m.runner = s.startRunner(name, m.vram)
	s.models[name] = m
	go func() {
		t := time.NewTimer(s.opts.LoadDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-m.abort:
			return
		}
		s.mu.Lock()
		if s.killed {
			s.mu.Unlock()
			return // the runner finishes loading, orphaned
		}
		if s.oom[name] {
			s.failLoadLocked(m)
			return
		}
		m.loaded = true
		m.expires = time.Now().Add(m.keepAlive)
		close(m.ready)
		s.gpu.Mark("ollama", "ready "+name)
		s.mu.Unlock()
	}()
	return m, nil
}

// leave ends one request's use of a model. served says it had a slot.
func (s *Server) leave(m *model, served bool) {
	if served {
		<-m.slots
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m.refs--
	if m.refs > 0 || s.killed || m.loadErr != nil {
		return
	}
	switch {
	case !m.loaded:
		s.abortLocked(m)
	case m.unloadReq || m.keepAlive == 0:
		s.startUnloadLocked(m)
	case m.keepAlive < 0:
		m.expires = time.Now().AddDate(300, 0, 0)
	default:
		m.expires = time.Now().Add(m.keepAlive)
		m.timer = time.AfterFunc(m.keepAlive, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if m.refs == 0 && !m.unloading && !s.killed {
				s.startUnloadLocked(m)
			}
		})
	}
}

// abortLocked aborts a load nobody waits for any more. The model was never
// listed and no longer is a model of the server, but its runner needs
// AbortDelay to exit.
func (s *Server) abortLocked(m *model) {
	close(m.abort)
	m.unloading = true
	if s.models[m.name] == m {
		delete(s.models, m.name)
	}
	s.gpu.Mark("ollama", "abort "+m.name)
	time.AfterFunc(s.opts.AbortDelay, func() {
		s.mu.Lock()
		killed := s.killed
		s.mu.Unlock()
		if killed {
			return // orphaned with the server
		}
		m.runner.exit("exit after abort " + m.name)
		close(m.gone)
	})
}

// requestUnload is keep_alive 0 with no prompt. Like Ollama, it is ignored
// while the model loads (the model then stays for its keep_alive), and
// otherwise carried out once the model's accepted requests have ended.
func (s *Server) requestUnload(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.models[name]
	if m == nil || m.unloading || s.killed {
		return
	}
	if !m.loaded {
		s.gpu.Mark("ollama", "keep_alive 0 ignored while starting "+name)
		return
	}
	m.unloadReq = true
	m.expires = time.Now()
	s.gpu.Mark("ollama", "unload requested "+name)
	if m.refs == 0 {
		s.startUnloadLocked(m)
	}
}

func (s *Server) startUnloadLocked(m *model) {
	if s.stuck.Load() {
		return
	}
	m.unloading = true
	m.expires = time.Now()
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	go func() {
		time.Sleep(s.opts.UnloadDelay)
		s.mu.Lock()
		if s.killed {
			s.mu.Unlock()
			return
		}
		if s.models[m.name] == m {
			delete(s.models, m.name)
		}
		s.mu.Unlock()
		if s.opts.VRAMLag > 0 {
			s.gpu.Mark("ollama", "left ps "+m.name)
			time.Sleep(s.opts.VRAMLag)
		}
		m.runner.exit("unload " + m.name)
		close(m.gone)
	}()
}
