package llamacpptest

import (
	"strings"
	"sync"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/proctest"
)

// lives are the successive routers of a fake whose processes are real
// (Options.Processes): one front process (the engine's port) and, for
// each start of it, a fresh in-process Server that the front forwards
// to. A Restart is a new router that knows nothing of the children the
// dead one started.
type lives struct {
	front *proctest.Front

	mu  sync.Mutex
	cur *Server
	all []*Server
}

// startFront starts s's front process, the router the OS sees.
func (s *Server) startFront(t testing.TB) {
	if s.single != nil {
		t.Fatal("llamacpptest: Options.Processes runs a router, not a single-model server")
	}
	s.life = &lives{cur: s, all: []*Server{s}}
	s.life.front = proctest.StartFront(t, hostOf(s.srv.URL()), proctest.FrontOptions{
		Setsid: s.opts.Setsid, Args: []string{"llama-server", "--models-dir", "/models"}})
}

// hostOf is a URL's host:port.
func hostOf(url string) string { return strings.TrimPrefix(url, "http://") }

// current is the Server of the router running now: s itself without
// processes.
func (s *Server) current() *Server {
	if s.life == nil {
		return s
	}
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	return s.life.cur
}

// lives are every router s ran: s alone without processes.
func (s *Server) lives() []*Server {
	if s.life == nil {
		return []*Server{s}
	}
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	return append([]*Server(nil), s.life.all...)
}

// Front is the router's front process with Options.Processes (nil
// without): its PID, its port.
func (s *Server) Front() *proctest.Front {
	if s.life == nil {
		return nil
	}
	return s.life.front
}

// Child is the process of model's child now with Options.Processes: nil
// without, or while the router runs none for it. It stays valid after
// the child exits (Exited) or the router dies.
func (s *Server) Child(model string) *proctest.Child {
	s = s.current()
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.models[model]; m != nil && m.child != nil {
		return m.child.proc
	}
	return nil
}

// Kill is SIGKILL of the router (with Options.Processes): its port
// refuses at once, and its children's standard input closes: a loaded
// child exits at once, one still loading once its load has ended,
// holding its memory until then.
func (s *Server) Kill() {
	cur := s.current()
	cur.life.front.Kill()
	cur.die()
}

// die ends a router whose process is gone: its requests end, and it
// tells its children nothing more.
func (s *Server) die() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.gpu.Mark(service, "router exited")
	s.srv.Cut()
}

// Restart starts the router again on the same port (with
// Options.Processes), killing the running one first if it still runs:
// the new one lists every model unloaded (but its load-on-startup
// presets) while the old one's children may still live and hold the
// GPU.
func (s *Server) Restart() {
	old := s.current()
	l := old.life
	select {
	case <-l.front.Exited():
		old.die()
	default:
		old.Kill()
	}
	fresh := newServer(old.gpu, old.opts)
	fresh.life = l
	l.mu.Lock()
	l.cur = fresh
	l.all = append(l.all, fresh)
	l.mu.Unlock()
	l.front.SetBackend(hostOf(fresh.srv.URL()))
	l.front.Restart()
	s.gpu.Mark(service, "router restarted")
	fresh.start()
}
