package proctest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FrontOptions shape a front.
type FrontOptions struct {
	// Port is the port to listen on (127.0.0.1); 0 takes any free one.
	Port int
	// Setsid starts the front in a session of its own, as a systemd
	// service's engine runs.
	Setsid bool
	// DrainLimit bounds how long Terminate waits for the requests in
	// flight before it stops the children. Default 30s, llama-swap's.
	DrainLimit time.Duration
	// Args is the front's command line (what ps shows); its first word
	// is argv[0]. Default "proctest-front".
	Args []string
}

// Front is a front process: the engine as the OS sees it. Its methods may
// be called from any goroutine.
type Front struct {
	t       testing.TB
	backend string
	opts    FrontOptions

	mu     sync.Mutex
	run    *frontRun // the front running now, or the last one
	port   int
	killed []func() // what the test's cleanup ends
}

// frontRun is one front process, from its start to its exit.
type frontRun struct {
	cmd    *exec.Cmd
	stdin  *os.File
	inM    sync.Mutex
	closed chan struct{} // its port closed at SIGTERM
	exited chan struct{} // reaped

	mu      sync.Mutex
	nextID  int
	replies map[int]chan message
	gone    bool // its standard output has ended: no more replies
}

// startTimeout bounds the wait for a front's port and for a command's
// answer.
const startTimeout = 30 * time.Second

// StartFront starts a front that listens on opts.Port and forwards every
// request to backend (host:port, the in-process fake's address). It fails
// the test if the front cannot start; the test's cleanup kills it and all
// the children it started, orphaned or not.
func StartFront(t testing.TB, backend string, opts FrontOptions) *Front {
	t.Helper()
	if !supported {
		t.Skip("proctest: fronts run on Unix systems only")
	}
	if opts.DrainLimit <= 0 {
		opts.DrainLimit = 30 * time.Second
	}
	if len(opts.Args) == 0 {
		opts.Args = []string{"proctest-front"}
	}
	f := &Front{t: t, backend: backend, opts: opts, port: opts.Port}
	t.Cleanup(f.cleanup)
	if err := f.start(); err != nil {
		t.Fatalf("proctest: starting a front: %v", err)
	}
	return f
}

// start starts a front process on f.port.
func (f *Front) start() error {
	life, err := lifePipe()
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	f.mu.Lock()
	spec, _ := json.Marshal(frontSpec{Backend: f.backend, Port: f.port, DrainLimit: f.opts.DrainLimit})
	f.mu.Unlock()
	cmd := exec.Command(exe)
	cmd.Args = f.opts.Args
	cmd.Env = roleEnviron(roleFront, spec)
	cmd.ExtraFiles = []*os.File{life}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = sessionAttr(f.opts.Setsid)
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return err
	}
	run := &frontRun{cmd: cmd, stdin: inW, closed: make(chan struct{}), exited: make(chan struct{}), replies: map[int]chan message{}}
	f.onCleanup(func() { cmd.Process.Kill(); <-run.exited })
	go func() {
		cmd.Wait()
		inW.Close()
		close(run.exited)
	}()
	first := make(chan message, 1)
	go run.read(outR, first)
	select {
	case m := <-first:
		if m.Err != "" || m.Port == 0 {
			return fmt.Errorf("front: %s", m.Err)
		}
		f.mu.Lock()
		f.run, f.port = run, m.Port
		f.mu.Unlock()
		return nil
	case <-time.After(startTimeout):
		cmd.Process.Kill()
		return errors.New("front: no port reported")
	}
}

// read dispatches the front's messages: the first to first, answers to
// their commands, Closed to closed.
func (r *frontRun) read(out *os.File, first chan<- message) {
	defer out.Close()
	sc := bufio.NewScanner(out)
	started := false
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch {
		case !started:
			started = true
			first <- m
		case m.Closed:
			close(r.closed)
		case m.ID != 0:
			r.mu.Lock()
			ch := r.replies[m.ID]
			delete(r.replies, m.ID)
			r.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
	if !started {
		first <- message{Err: "exited before listening"}
	}
	r.mu.Lock()
	r.gone = true
	for id, ch := range r.replies {
		ch <- message{ID: id, Err: "the front has exited"}
		delete(r.replies, id)
	}
	r.mu.Unlock()
}

// call sends one command and waits for its answer.
func (r *frontRun) call(c command) (message, error) {
	ch := make(chan message, 1)
	r.mu.Lock()
	if r.gone {
		r.mu.Unlock()
		return message{}, errors.New("proctest: the front has exited")
	}
	r.nextID++
	c.ID = r.nextID
	r.replies[c.ID] = ch
	r.mu.Unlock()
	b, _ := json.Marshal(c)
	r.inM.Lock()
	_, err := r.stdin.Write(append(b, '\n'))
	r.inM.Unlock()
	if err != nil {
		return message{}, fmt.Errorf("proctest: the front has exited: %w", err)
	}
	select {
	case m := <-ch:
		if m.Err != "" {
			return m, errors.New("proctest: " + m.Err)
		}
		return m, nil
	case <-time.After(startTimeout):
		return message{}, errors.New("proctest: the front did not answer")
	}
}

// current is the front process running now, or the last one.
func (f *Front) current() *frontRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.run
}

// URL is the front's base URL, http://127.0.0.1:PORT; it stays the same
// across Restart.
func (f *Front) URL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port()))
}

// Port is the port the front listens on.
func (f *Front) Port() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.port
}

// PID is the process id of the front running now (or of the last one).
func (f *Front) PID() int { return f.current().cmd.Process.Pid }

// Exited is closed when the front running now has exited.
func (f *Front) Exited() <-chan struct{} { return f.current().exited }

// Kill sends SIGKILL to the front and returns once it is gone: its port
// refuses connections; its children are re-parented and live on, holding
// what they hold.
func (f *Front) Kill() {
	r := f.current()
	r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
}

// Terminate sends SIGTERM to the front, as to llama-swap, and returns once
// its port has closed (at once). The requests in flight go on being
// answered until they end (at most the drain limit); then the front stops
// its children (SIGTERM, each its StopDelay) and exits: see Exited.
func (f *Front) Terminate() {
	r := f.current()
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.closed:
	case <-r.exited:
	}
}

// Restart starts a new front on the same port (a new PID), with no
// children; the front running now, if any, is killed first (SIGKILL), so
// its children are orphaned.
func (f *Front) Restart() {
	f.t.Helper()
	r := f.current()
	select {
	case <-r.exited:
	default:
		f.Kill()
	}
	if err := f.start(); err != nil {
		f.t.Fatalf("proctest: restarting the front: %v", err)
	}
}

// SetBackend changes where the fronts started from now on (Restart)
// forward: a restarted engine is a fresh one.
func (f *Front) SetBackend(backend string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backend = backend
}

// onCleanup adds what the test's cleanup ends.
func (f *Front) onCleanup(kill func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, kill)
}

// cleanup kills every front and child this Front started, and waits for
// the fronts.
func (f *Front) cleanup() {
	f.mu.Lock()
	killed := f.killed
	f.killed = nil
	f.mu.Unlock()
	for i := len(killed) - 1; i >= 0; i-- {
		killed[i]()
	}
}
