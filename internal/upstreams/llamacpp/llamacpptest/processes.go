package llamacpptest

import (
	"fmt"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/proctest"
)

// The children as processes (Options.Processes). Each loaded model is a
// child of the router's front, a `llama-server` that exits when its
// standard input closes, but only once its load has ended: the router's
// exit command (here, the end of its standard input), or the router's
// death, which closes it too. Its charge on the GPU lasts as long as the
// process, whoever ends it; the status turns unloaded only once it has
// exited, as the router sees its stdout close.

// spawnProcess has the router's front start m's child, loading from now
// on for its load delay; s.mu is held.
func (s *Server) spawnProcess(id string, port int) (*proctest.Child, error) {
	return s.life.front.Spawn(proctest.ChildOptions{
		ExitOnStdinEOF: true, LoadFor: s.loadDelay(id),
		Args: []string{"llama-server", "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--alias", id, "--model", modelPath(id)},
	})
}

// occupy charges the child's memory to the GPU from now on: to its
// process, for as long as it lives, with Options.Processes; to the test
// process, until released, without. The release frees it before the
// process exits (sleep), or only marks why once it has: in one step
// (Charge.End), as the GPU's watcher may end the charge at the exit
// at any moment.
func (s *Server) occupy(c *child, what string) func(string) {
	if c.proc == nil {
		return s.gpu.OccupyBytes(service, what, s.opts.ModelBytes)
	}
	return s.gpu.ChargeProcess(service, what, c.proc.PID(), s.opts.ModelBytes).End
}

// kill ends the child's process at once (SIGKILL), as the router
// force-terminates a child, and returns once it has exited; a no-op
// without a process.
func (c *child) kill() {
	if c.proc != nil {
		c.proc.Kill()
	}
}

// stopProcess is the router's unload of a loaded child: the exit command
// on its standard input, then the wait for its exit, killing it at its
// stop-timeout. A router that dies meanwhile sees nothing more.
func (s *Server) stopProcess(c *child) {
	id := c.m.id
	if err := c.proc.CloseStdin(); err != nil {
		return // the router's front is gone: so is this router
	}
	timeout := time.NewTimer(s.opts.StopTimeout)
	defer timeout.Stop()
	select {
	case <-c.proc.Exited():
		s.exit(c, 0, "exit "+id)
	case <-timeout.C:
		c.kill()
		s.exit(c, exitFailure, "killed at stop-timeout "+id)
	case <-s.done:
	}
}
