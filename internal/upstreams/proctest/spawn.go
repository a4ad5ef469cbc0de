package proctest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// spawned is a child as its front sees it.
type spawned struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	setpgid bool
	done    chan struct{} // closed once the front has reaped it
}

// spawn starts a model server stand-in as the front's child (through a
// shell with Wrapper) and waits for its report.
func (f *frontProcess) spawn(id int, o ChildOptions) message {
	c, rep, err := startChild(o)
	if err != nil {
		return message{ID: id, Err: err.Error()}
	}
	f.mu.Lock()
	f.children[id] = c
	f.mu.Unlock()
	return message{ID: id, PID: c.cmd.Process.Pid, Holder: rep.PID, Port: rep.Port}
}

// startChild starts the child of o and reads the report of the process
// that holds the model (the child, or the wrapper's child).
func startChild(o ChildOptions) (*spawned, childReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, childReport{}, err
	}
	lifeR, err := lifePipe()
	if err != nil {
		return nil, childReport{}, err
	}
	spec := modelSpec{Listen: o.Listen, StopDelay: o.StopDelay, LoadFor: o.LoadFor, ExitOnStdinEOF: o.ExitOnStdinEOF}
	args := o.Args
	if len(args) == 0 {
		args = []string{"proctest-model"}
	}
	var cmd *exec.Cmd
	if o.Wrapper {
		// The wrapper exits StopDelay after SIGTERM; its child, which
		// got the SIGTERM too (same group), Linger later.
		spec.StopDelay += o.Linger
		script := fmt.Sprintf(`trap 'sleep %s; exit 0' TERM; "$0" "$@" <&0 & wait; exit 0`, seconds(o.StopDelay))
		cmd = exec.Command("/bin/sh", append([]string{"-c", script, exe}, args[1:]...)...)
	} else {
		cmd = exec.Command(exe)
		cmd.Args = args
	}
	b, _ := json.Marshal(spec)
	cmd.Env = roleEnviron(roleModel, b)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, childReport{}, err
	}
	defer r.Close()
	cmd.ExtraFiles = []*os.File{lifeR, w}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = groupAttr(o.Setpgid)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		w.Close()
		return nil, childReport{}, err
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, childReport{}, err
	}
	c := &spawned{cmd: cmd, stdin: stdin, setpgid: o.Setpgid, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(c.done)
	}()
	var rep childReport
	r.SetReadDeadline(time.Now().Add(reportTimeout))
	line, err := bufio.NewReader(r).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &rep)
	}
	if err != nil {
		c.kill()
		return nil, childReport{}, fmt.Errorf("no report from the model server: %w", err)
	}
	return c, rep, nil
}

// term sends SIGTERM to the child's group (llama-swap's stop) or to the
// child alone.
func (c *spawned) term() { signalChild(c.cmd.Process.Pid, c.setpgid, syscall.SIGTERM) }

// kill sends SIGKILL the same way.
func (c *spawned) kill() { signalChild(c.cmd.Process.Pid, c.setpgid, syscall.SIGKILL) }

// seconds formats d for sleep(1).
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }

func itoa(n int) string { return strconv.Itoa(n) }
