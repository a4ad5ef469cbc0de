package llamaswaptest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/proctest"
)

// The states of a process, as llama-swap names them.
const (
	stateStopped  = "stopped"
	stateStarting = "starting"
	stateReady    = "ready"
	stateStopping = "stopping"
)

// errStartAborted is llama-swap's ErrStartAborted: a stop arrived during
// the start.
var errStartAborted = errors.New("aborted")

// process is one model's upstream, as llama-swap's ProcessCommand runs it:
// one start or stop at a time, each one finished before the next is
// decided.
type process struct {
	s     *Server
	model string
	port  int

	mu      sync.Mutex
	state   string
	settled chan struct{}   // closed when the start or stop under way ends; nil when none is
	abort   chan struct{}   // closed to abort the start under way
	cut     chan struct{}   // closed at SIGTERM; nil while no command runs
	release func(string)    // the command's GPU occupancy
	child   *proctest.Child // the command's process (Options.Processes); nil without
}

// start is one run of the command up to its health check.
type start struct {
	done chan struct{}
	err  error // set before done is closed
}

// State returns the process's state now.
func (p *process) State() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

func (p *process) cmd() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("llama-server --port %d -m /models/%s.gguf", p.port, p.model)
}

func (p *process) proxy() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("http://127.0.0.1:%d", p.port)
}

// ensureReady is llama-swap's EnsureReady: ready returns at once; stopped
// starts the command and waits for its health check; a start or stop under
// way is waited for, and the state decided again after it. It returns the
// error of its own start (errStartAborted when a stop aborted it).
func (p *process) ensureReady(ctx context.Context) error {
	for {
		p.mu.Lock()
		switch p.state {
		case stateReady:
			p.mu.Unlock()
			return nil
		case stateStopped:
			st := p.startLocked()
			p.mu.Unlock()
			select {
			case <-st.done:
				return st.err
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		settled := p.settled
		p.mu.Unlock()
		select {
		case <-settled:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// startLocked runs the command: it holds memory from this moment.
func (p *process) startLocked() *start {
	p.s.starts.Add(1)
	st := &start{done: make(chan struct{})}
	if err := p.runLocked(); err != nil {
		p.s.gpu.Mark(service, "start failed "+p.model+": "+err.Error())
		st.err = err
		close(st.done)
		return st
	}
	p.state = stateStarting
	p.settled, p.abort, p.cut = make(chan struct{}), make(chan struct{}), make(chan struct{})
	settled, abort := p.settled, p.abort
	go func() {
		defer close(st.done)
		t := time.NewTimer(p.s.opts.StartDelay)
		defer t.Stop()
		select {
		case <-t.C:
			p.mu.Lock()
			p.state = stateReady
			p.settled = nil
			p.mu.Unlock()
			close(settled)
			p.s.gpu.Mark(service, "ready "+p.model)
		case <-abort:
			// llama-swap kills a starting command; it stays "starting"
			// until the command has exited.
			p.exit("exit "+p.model+" (start aborted)", settled)
			st.err = errStartAborted
		}
	}()
	return st
}

// stop is llama-swap's Stop: it sends SIGTERM and returns once the command
// has exited. A stop during a start aborts the start (and stops the
// process after all if the start won the race); a stop during a stop
// waits for it; a stopped process has nothing to stop.
func (p *process) stop() {
	p.mu.Lock()
	if p.state == stateStarting {
		abort := p.abort
		select {
		case <-abort:
		default:
			close(abort)
		}
		settled := p.settled
		p.mu.Unlock()
		<-settled
		p.mu.Lock()
		if p.state != stateReady || p.abort != abort {
			p.mu.Unlock()
			return // aborted, or started again by a later request
		}
	}
	switch p.state {
	case stateStopped:
		p.mu.Unlock()
		return
	case stateStopping:
		settled := p.settled
		p.mu.Unlock()
		<-settled
		return
	}
	p.state = stateStopping
	p.settled = make(chan struct{})
	settled := p.settled
	close(p.cut) // the upstream stops serving at SIGTERM
	p.mu.Unlock()
	p.s.gpu.Mark(service, "stop "+p.model)
	p.exit("exit "+p.model, settled)
}

// exit sends the command SIGTERM and waits for its exit (StopDelay), then
// frees its memory and settles the process as stopped.
func (p *process) exit(why string, settled chan struct{}) {
	p.mu.Lock()
	child := p.child
	p.mu.Unlock()
	p.terminate(child)
	p.mu.Lock()
	p.state = stateStopped
	p.settled, p.cut, p.child = nil, nil, nil
	release := p.release
	p.release = nil
	p.mu.Unlock()
	release(why)
	close(settled)
}

// serve forwards a request to the command. A process without a command
// has no handler (503); one that got SIGTERM cuts the request at once.
func (p *process) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	cut := p.cut
	ready := p.state == stateReady || p.state == stateStopping
	p.mu.Unlock()
	if !ready || cut == nil {
		sendResponse(w, r, http.StatusServiceUnavailable, fmt.Sprintf("[%s] process is not ready", p.model))
		return
	}
	p.s.gpu.Mark(service, "serve "+r.URL.Path+" "+p.model)
	p.s.answer(w, r, p.model, cut)
}
