package llamaswaptest

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/proctest"
)

// lives are the successive llama-swaps of a fake whose processes are real
// (Options.Processes): one front process (the engine's port) and, for
// each start of it, a fresh in-process Server that the front forwards to.
// A Restart is a new llama-swap that knows nothing of the processes the
// dead one started.
type lives struct {
	t     testing.TB
	front *proctest.Front

	mu  sync.Mutex
	cur *Server
	all []*Server
}

// life is what a Server of a fake with processes knows of its own life.
type life struct {
	*lives
	dead atomic.Bool // its llama-swap was killed: it stops nothing more
}

// current is the Server of the llama-swap running now: s itself without
// processes.
func (s *Server) current() *Server {
	if s.life == nil {
		return s
	}
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	return s.life.cur
}

// startFront starts s's front process, the llama-swap the OS sees.
func (s *Server) startFront(t testing.TB) {
	l := &lives{t: t, cur: s, all: []*Server{s}}
	s.life = &life{lives: l}
	l.front = proctest.StartFront(t, hostOf(s.srv.URL()), proctest.FrontOptions{
		Setsid: s.opts.Setsid, DrainLimit: s.opts.DrainLimit, Args: []string{"llama-swap", "--config", "config.yaml"}})
}

// hostOf is a URL's host:port.
func hostOf(url string) string { return strings.TrimPrefix(url, "http://") }

// Front is the front process of a fake with processes (nil without): its
// PID, its port, its children's.
func (s *Server) Front() *proctest.Front {
	if s.life == nil {
		return nil
	}
	return s.life.front
}

// Kill is SIGKILL of llama-swap (with Options.Processes): its port
// refuses at once, and its model servers live on, re-parented, holding
// their memory on the GPU until they exit.
func (s *Server) Kill() {
	cur := s.current()
	cur.life.front.Kill()
	cur.die()
}

// die ends a llama-swap whose process is gone: its requests end, and it
// stops nothing more.
func (s *Server) die() {
	s.life.dead.Store(true)
	s.gpu.Mark(service, "llama-swap exited")
	s.srv.Cut()
}

// Terminate is SIGTERM of llama-swap (with Options.Processes): the port
// closes at once; the requests in flight are answered until they end (at
// most Options.DrainLimit); then the model servers are stopped (SIGTERM,
// StopDelay each) and the front exits (Front().Exited()).
func (s *Server) Terminate() {
	cur := s.current()
	f := cur.life.front
	f.Terminate()
	exited := f.Exited()
	go func() {
		<-exited
		cur.die()
	}()
}

// Restart starts llama-swap again on the same port (with
// Options.Processes), killing the running one first if it still runs:
// the new one knows no process, and /running lists none, while the model
// servers of the old one may still live and hold the GPU.
func (s *Server) Restart() {
	old := s.current()
	l := old.life.lives
	select {
	case <-l.front.Exited():
	default:
		old.Kill()
	}
	fresh := newServer(old.gpu, old.opts)
	fresh.life = &life{lives: l}
	l.mu.Lock()
	l.cur = fresh
	l.all = append(l.all, fresh)
	l.mu.Unlock()
	l.front.SetBackend(hostOf(fresh.srv.URL()))
	l.front.Restart()
	s.gpu.Mark(service, "llama-swap restarted")
}

// errDead is a start asked of a llama-swap that no longer runs.
var errDead = errors.New("llama-swap is not running")
