package llamacpptest

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/proctest"
)

// The status values of a router's model (server_model_status).
const (
	statusUnloaded = "unloaded"
	statusLoading  = "loading"
	statusLoaded   = "loaded"
	statusSleeping = "sleeping"
)

// exitFailure is the exit code the router reads for a child that did not
// exit by itself: a failed load returns 1, and sheredom's subprocess_join
// reports EXIT_FAILURE (1) for one killed by a signal.
const exitFailure = 1

// errClosed ends a wait when the server process ends.
var errClosed = errors.New("llama-server stopped")

// model is one of the server's models. Its fields are guarded by
// Server.mu.
type model struct {
	id       string
	source   string // "models_dir" or "preset"; "" for a single model
	status   string
	exitCode int   // of the last child; failed when unloaded and non-zero
	lastUsed int64 // Server.tick at its load or last POST request
	port     int   // the last child's port
	child    *child
}

func running(status string) bool {
	return status == statusLoaded || status == statusLoading || status == statusSleeping
}

// child is the process that serves one model, from its spawn until it has
// exited. In single-model mode it is the server process itself. Its
// fields are guarded by Server.mu.
type child struct {
	m        *model
	release  func(string)  // the GPU occupancy; nil while the model sleeps
	stopping chan struct{} // closed when told to exit, or killed
	exited   chan struct{} // closed when the process is gone
	stopOnce sync.Once
	tasks    int           // tasks in flight: the idle timer waits for none
	idle     *time.Timer   // --sleep-idle-seconds
	idleGen  int           // bumped to disarm an idle timer that fired late
	waking   chan struct{} // while a wake from sleep reloads; closed when loaded

	proc     *proctest.Child // its process (Options.Processes); nil without
	spawnErr error           // why its process could not start
}

// stop tells the child to exit: the router writes the exit command to its
// stdin (or kills it, if it is still loading).
func (c *child) stop() { c.stopOnce.Do(func() { close(c.stopping) }) }

// spawnLocked starts a child for m. Its memory is in use from this moment.
func (s *Server) spawnLocked(m *model) {
	s.loads.Add(1)
	s.tick++
	s.port++
	c := &child{m: m, stopping: make(chan struct{}), exited: make(chan struct{})}
	if s.life != nil {
		c.proc, c.spawnErr = s.spawnProcess(m.id, s.port)
	}
	if c.spawnErr == nil {
		c.release = s.occupy(c, "load "+m.id)
	}
	m.child, m.status, m.lastUsed, m.port = c, statusLoading, s.tick, s.port
	s.changedLocked()
	go s.runChild(c)
}

// runChild is the child's life: its load, its wait for the exit command,
// and its shutdown.
func (s *Server) runChild(c *child) {
	id := c.m.id
	if c.spawnErr != nil {
		s.exit(c, exitFailure, "spawn failed "+id+": "+c.spawnErr.Error())
		return
	}
	select {
	case <-time.After(s.loadDelay(id)):
	case <-c.stopping:
		c.kill()
		s.exit(c, exitFailure, "killed while loading "+id)
		return
	case <-s.done:
		return
	}
	s.mu.Lock()
	select {
	case <-c.stopping: // told to stop as the load ended: it was still loading
		s.mu.Unlock()
		c.kill()
		s.exit(c, exitFailure, "killed while loading "+id)
		return
	default:
	}
	if s.failNext[id] {
		delete(s.failNext, id)
		s.mu.Unlock()
		s.failLoad(c, "load of "+id+" failed")
		return
	}
	c.m.status = statusLoaded
	s.gpu.Mark(service, "ready "+id) // before anyone waiting for it runs
	s.changedLocked()
	s.armIdleLocked(c)
	s.mu.Unlock()
	select {
	case <-c.stopping:
	case <-s.done:
		return
	}
	s.shutdownChild(c)
}

// shutdownChild waits for a told child to exit, or kills it at its stop
// timeout.
func (s *Server) shutdownChild(c *child) {
	if c.proc != nil {
		s.stopProcess(c)
		return
	}
	wait, code, why := s.opts.StopDelay, 0, "exit "+c.m.id
	if wait > s.opts.StopTimeout {
		wait, code, why = s.opts.StopTimeout, exitFailure, "killed at stop-timeout "+c.m.id
	}
	select {
	case <-time.After(wait):
		s.exit(c, code, why)
	case <-s.done:
	}
}

// failLoad ends a child whose load failed. A single-model server aborts.
func (s *Server) failLoad(c *child, why string) {
	if s.single != nil {
		s.abort(why)
		return
	}
	c.kill()
	s.exit(c, exitFailure, why)
}

// exit records the child's end: its memory is free, and only then does the
// router see its stdout close and mark the model unloaded.
func (s *Server) exit(c *child, code int, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := c.m
	if m.child != c {
		return // gone already
	}
	c.stop()
	if c.idle != nil {
		c.idle.Stop()
	}
	if c.release != nil {
		c.release(why)
		c.release = nil
	} else {
		s.gpu.Mark(service, why) // it slept: no memory to free
	}
	m.child, m.status, m.exitCode = nil, statusUnloaded, code
	close(c.exited)
	s.changedLocked()
}

// changedLocked wakes everyone waiting for a status change.
func (s *Server) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitUntil blocks until cond, called with s.mu held, holds; or until the
// server ends. Like llama.cpp's condition waits, it does not end when the
// client goes away.
func (s *Server) waitUntil(cond func() bool) error {
	for {
		s.mu.Lock()
		ok, ch := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-s.done:
			return errClosed
		}
	}
}

// shutdown ends the process: every child exits with it.
func (s *Server) shutdown(why string) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	var children []*child
	for _, id := range s.ids {
		if c := s.models[id].child; c != nil {
			children = append(children, c)
		}
	}
	s.mu.Unlock()
	for _, c := range children {
		c.kill()
		s.exit(c, 0, fmt.Sprintf("%s: exit %s", why, c.m.id))
	}
}

// abort is a single-model server dying (GGML_ABORT after a failed load):
// its port refuses connections at once and its requests are cut.
func (s *Server) abort(why string) {
	s.shutdown(why)
	s.srv.Refuse()
	s.gpu.Mark(service, "process aborted")
}
