package proctest

import (
	"errors"
	"syscall"
	"time"
)

// ChildOptions shape a model server stand-in that a front starts.
type ChildOptions struct {
	// Setpgid starts it in a process group of its own, as llama-swap
	// starts its model servers: Stop signals the whole group.
	Setpgid bool `json:"setpgid,omitempty"`
	// Wrapper starts it through a shell (`sh -c '... & wait'`), as a
	// cmd that is a script or `docker run` does: the front's child is
	// the shell, which exits StopDelay after SIGTERM; the shell's child
	// holds the model and exits Linger after the shell.
	Wrapper bool          `json:"wrapper,omitempty"`
	Linger  time.Duration `json:"linger,omitempty"`
	// Listen makes the process that holds the model listen on a port of
	// its own (llama-swap's `proxy`): Port.
	Listen bool `json:"listen,omitempty"`
	// StopDelay is the time from SIGTERM to its exit.
	StopDelay time.Duration `json:"stop_delay,omitempty"`
	// ExitOnStdinEOF makes it exit when its standard input closes
	// (CloseStdin, or the front's death), but not before LoadFor has
	// passed since its start: llama.cpp's router children.
	ExitOnStdinEOF bool          `json:"exit_on_stdin_eof,omitempty"`
	LoadFor        time.Duration `json:"load_for,omitempty"`
	// Args is the command line of the process that holds the model; its
	// first word is argv[0] (not with Wrapper, whose child's argv[0] is
	// the test binary's path). Default "proctest-model".
	Args []string `json:"args,omitempty"`
}

// Child is a model server stand-in started by a front, as the test sees
// it. It outlives its front if the front is killed.
type Child struct {
	front   *frontRun
	id      int
	pid     int
	holder  int
	port    int
	setpgid bool
	exited  <-chan struct{}
	held    <-chan struct{}
}

// Spawn has the front start a model server stand-in as its child.
func (f *Front) Spawn(o ChildOptions) (*Child, error) {
	r := f.current()
	m, err := r.call(command{Op: "spawn", Spawn: o})
	if err != nil {
		return nil, err
	}
	c := &Child{front: r, id: m.ID, pid: m.PID, holder: m.Holder, port: m.Port, setpgid: o.Setpgid}
	c.exited = watchExit(c.pid)
	c.held = c.exited
	if c.holder != c.pid {
		c.held = watchExit(c.holder)
	}
	f.onCleanup(func() {
		signalChild(c.pid, c.setpgid, syscall.SIGKILL)
		signalChild(c.holder, false, syscall.SIGKILL)
	})
	return c, nil
}

// PID is the front's child: the model server, or its wrapper.
func (c *Child) PID() int { return c.pid }

// Holder is the process that holds the model: the child, or with Wrapper
// the wrapper's child.
func (c *Child) Holder() int { return c.holder }

// Port is the port the holder listens on (Listen), else 0.
func (c *Child) Port() int { return c.port }

// Exited is closed when the front's child (the wrapper, with Wrapper)
// has exited.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// HolderExited is closed when the holder has exited.
func (c *Child) HolderExited() <-chan struct{} { return c.held }

// stopTimeout bounds Stop's wait.
const stopTimeout = 30 * time.Second

// Stop sends SIGTERM to the child's group (to the child alone without
// Setpgid), as llama-swap stops a model server, and returns once the
// front's child has exited (a wrapper's child may live on, Linger).
func (c *Child) Stop() error {
	if err := signalChild(c.pid, c.setpgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	select {
	case <-c.exited:
		return nil
	case <-time.After(stopTimeout):
		return errors.New("proctest: the child did not exit")
	}
}

// Kill sends SIGKILL to the child's group (or the child alone without
// Setpgid) and to the holder, and returns once both have exited.
func (c *Child) Kill() {
	signalChild(c.pid, c.setpgid, syscall.SIGKILL)
	signalChild(c.holder, false, syscall.SIGKILL)
	<-c.exited
	<-c.held
}

// CloseStdin closes the child's standard input, as llama.cpp's router
// does to unload a model; it fails once the front that started the child
// has exited (its death closed the child's standard input already).
func (c *Child) CloseStdin() error {
	_, err := c.front.call(command{Op: "close-stdin", Child: c.id})
	return err
}
