package ollamatest

import (
	"io"
	"net/url"
	"os"
	"os/exec"
	"sync"
)

// runnerEnv marks a process started as a stand-in for an Ollama runner.
const runnerEnv = "OLLAMATEST_RUNNER"

// A binary that imports this package and is started with runnerEnv set is
// a runner stand-in: it does nothing until its standard input closes,
// which happens when it is killed or when the process that started it
// ends, so no stand-in outlives a test run.
func init() {
	if os.Getenv(runnerEnv) == "" {
		return
	}
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// runner is the simulated memory of one model's runner and, with
// Options.RunnerProcesses, a real process whose command line is that of an
// Ollama runner (`ollama runner --model M --port N`) and whose environment
// names the server's OLLAMA_HOST, as Ollama's runners inherit it.
type runner struct {
	s       *Server
	release func(string)
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	once    sync.Once
}

// startRunner starts name's runner, which charges bytes to the simulated
// GPU until it exits: under its own process id with RunnerProcesses (as
// nvidia-smi lists Ollama's runners), else under the test's.
func (s *Server) startRunner(name string, bytes int64) *runner {
	rn := &runner{s: s}
	if s.opts.RunnerProcesses {
		rn.spawn(name)
	}
	pid := rn.pid()
	if pid == 0 {
		pid = os.Getpid()
	}
	rn.release = s.gpu.OccupyProcess("ollama", "load "+name, pid, bytes)
	s.runners[rn] = true
	return rn
}

func (rn *runner) spawn(name string) {
	exe, err := os.Executable()
	if err != nil {
		return
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{"ollama", "runner", "--model", name, "--port", "0"}
	host := ""
	if u, err := url.Parse(rn.s.URL); err == nil {
		host = u.Host
	}
	cmd.Env = append(os.Environ(), runnerEnv+"=1", "OLLAMA_HOST="+host)
	stdin, err := cmd.StdinPipe()
	if err != nil || cmd.Start() != nil {
		return
	}

	rn.cmd, rn.stdin = cmd, stdin
}

// exit ends the runner: its memory is free and its process gone.
func (rn *runner) exit(why string) {
	rn.once.Do(func() {
		// The runner is no longer counted by the time its memory is
		// free (the event tests wait for), and the memory is free by the
		// time the process is gone, never after.
		rn.s.mu.Lock()
		delete(rn.s.runners, rn)
		rn.s.mu.Unlock()
		rn.release(why)
		if rn.cmd != nil {
			rn.cmd.Process.Kill()
			rn.cmd.Wait()
			rn.stdin.Close()
		}
	})
}

// PID is the runner's process id, or 0 without a process.
func (rn *runner) pid() int {
	if rn.cmd == nil || rn.cmd.Process == nil {
		return 0
	}
	return rn.cmd.Process.Pid
}

// Kill simulates `ollama serve` killed with SIGKILL: the port refuses
// connections at once, and the runners live on, re-parented and holding
// their memory, until KillRunners.
func (s *Server) Kill() {
	s.mu.Lock()
	s.killed = true
	s.mu.Unlock()
	s.gpu.Mark("ollama", "serve killed")
	s.Server.CloseClientConnections()
	s.Server.Close()
}

// KillRunners ends every runner, orphaned or not, as `pkill -9 -f
// "ollama runner"` would.
func (s *Server) KillRunners() {
	s.mu.Lock()
	rs := make([]*runner, 0, len(s.runners))
	for rn := range s.runners {
		rs = append(rs, rn)
	}
	s.mu.Unlock()
	for _, rn := range rs {
		rn.exit("runner killed")
	}
}

// RunnerPIDs lists the process ids of the runners alive now (with
// Options.RunnerProcesses).
func (s *Server) RunnerPIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pids []int
	for rn := range s.runners {
		if p := rn.pid(); p != 0 {
			pids = append(pids, p)
		}
	}
	return pids
}

// Runners is the number of runners alive now, loading, loaded, exiting or
// orphaned.
func (s *Server) Runners() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.runners)
}
