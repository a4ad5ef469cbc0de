package vllmtest

import (
	"strings"
	"sync"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/proctest"
)

// The processes of a fake vLLM with Options.Processes: the API server is
// a front process on the fake's port, forwarding to a fresh in-process
// Server at each of its starts; the GPU memory is held by its engine-core
// child ("VLLM::EngineCore"), started at launch, as in vLLM's v1 engine
// (engines-api.md, section 3). A sleep leaves its residue charged to that
// child, which stays.
//
// When the API server is killed (SIGKILL), real vLLM's engine core lives
// on, re-parented, holding the GPU, and does not exit by itself:
// vllm-project/vllm#55510 (0.28: "EngineCore and TP workers survive a
// SIGKILLed API server, keep the GPUs"; only the TP workers under the
// engine core watch a death pipe, the engine core watches nothing). The
// fake's child does the same: it lives until it is killed. (An open pull
// request, #55846, would make it exit on its parent's death.)

// lives are the successive API servers of a fake with processes.
type lives struct {
	front *proctest.Front

	mu  sync.Mutex
	cur *Server
	all []*Server
}

// startFront starts s's front process, the API server the OS sees.
func (s *Server) startFront(t testing.TB) {
	s.life = &lives{cur: s, all: []*Server{s}}
	s.life.front = proctest.StartFront(t, strings.TrimPrefix(s.srv.URL(), "http://"), proctest.FrontOptions{
		Setsid: s.opts.Setsid, Args: []string{"vllm", "serve", s.opts.Model}})
}

// launch loads the weights, as vLLM does before its HTTP server answers:
// with processes, its front starts the engine core first. A front that
// cannot start one fails the test.
func (s *Server) launch() {
	if s.life != nil {
		w, err := s.life.front.Spawn(proctest.ChildOptions{Args: []string{"VLLM::EngineCore"}})
		if err != nil {
			s.opts.Processes.Fatalf("vllmtest: starting the engine core: %v", err)
		}
		s.worker = w
	}
	s.eng.mu.Lock()
	defer s.eng.mu.Unlock()
	s.eng.release = s.occupy("weights " + s.opts.Model)
}

// occupy puts the engine's memory on the GPU for what, and returns what
// frees it. Without processes it is the test process's occupancy. With,
// it is charged to the engine core: from its start for its life, made
// idle (the residue, no occupancy) by the release, busy again by the
// next occupy.
func (s *Server) occupy(what string) func(string) {
	if s.worker == nil {
		return s.gpu.OccupyBytes(service, what, s.opts.ModelBytes)
	}
	if s.charge == nil {
		s.charge = s.gpu.ChargeProcess(service, what, s.worker.PID(), s.opts.ModelBytes)
	} else {
		s.gpu.Mark(service, what)
		s.charge.Busy(s.opts.ModelBytes)
	}
	c := s.charge
	return func(why string) {
		s.gpu.Mark(service, why)
		c.Idle(s.opts.SleepResidue)
	}
}

// current is the Server of the API server running now: s itself without
// processes.
func (s *Server) current() *Server {
	if s.life == nil {
		return s
	}
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	return s.life.cur
}

// lives are every API server s ran: s alone without processes.
func (s *Server) lives() []*Server {
	if s.life == nil {
		return []*Server{s}
	}
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	return append([]*Server(nil), s.life.all...)
}

// Front is the API server's front process with Options.Processes (nil
// without).
func (s *Server) Front() *proctest.Front {
	if s.life == nil {
		return nil
	}
	return s.life.front
}

// Worker is the engine core of the API server running now with
// Options.Processes (nil without): the process that holds the memory.
func (s *Server) Worker() *proctest.Child { return s.current().worker }

// Charge is the engine core's charge on the GPU with Options.Processes
// (nil without).
func (s *Server) Charge() *gputest.Charge { return s.current().charge }

// Kill is SIGKILL of the API server (with Options.Processes): its port
// refuses at once; its engine core lives on, re-parented, holding the
// memory, until it is killed (see above).
func (s *Server) Kill() {
	cur := s.current()
	cur.life.front.Kill()
	cur.die()
}

// die ends an API server whose process is gone: its requests end.
func (s *Server) die() {
	s.gpu.Mark(service, "api server exited")
	s.srv.Cut()
}

// Restart starts the API server again on the same port (with
// Options.Processes), killing the running one first if it still runs: a
// new engine core loads the weights, whether or not the old one still
// holds its memory.
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
	l.front.SetBackend(strings.TrimPrefix(fresh.srv.URL(), "http://"))
	l.front.Restart()
	s.gpu.Mark(service, "api server restarted")
	fresh.launch()
}
