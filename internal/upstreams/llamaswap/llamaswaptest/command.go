package llamaswaptest

import (
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/proctest"
)

// runLocked runs the command: it holds memory from this moment. With
// Options.Processes it is a child of the front, in a process group of its
// own (llama-swap's Setpgid), listening on the port /running gives as its
// proxy, and its charge on the GPU lasts as long as the process that
// holds the model (the shell's child with Options.Wrapper), whoever ends
// it; without, the charge is the test process's, released at the stop.
// p.mu is held.
func (p *process) runLocked() error {
	s := p.s
	if s.life == nil {
		p.release = s.gpu.OccupyBytes(service, "load "+p.model, s.opts.ModelBytes)
		return nil
	}
	if s.life.dead.Load() {
		return errDead
	}
	c, err := s.life.front.Spawn(proctest.ChildOptions{
		Setpgid: true, Listen: true, StopDelay: s.opts.StopDelay,
		Wrapper: s.opts.Wrapper, Linger: s.opts.Linger,
		Args: []string{"llama-server", "-m", "/models/" + p.model + ".gguf"},
	})
	if err != nil {
		return err
	}
	p.child, p.port = c, c.Port()
	s.gpu.ChargeProcess(service, "load "+p.model, c.Holder(), s.opts.ModelBytes)
	p.release = func(why string) { s.gpu.Mark(service, why) }
	return nil
}

// terminate ends the command: SIGTERM to its group, then the wait for its
// exit (the shell's, with Options.Wrapper), as llama-swap's stop does.
// Without Options.Processes it waits StopDelay; a dead llama-swap stops
// nothing.
func (p *process) terminate(child *proctest.Child) {
	switch {
	case child == nil:
		time.Sleep(p.s.opts.StopDelay)
	case !p.s.life.dead.Load():
		child.Stop()
	}
}
