//go:build linux

package realollama

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ollama/ollama/api"
)

const modulePath = "github.com/ollama/ollama"

// Version is the Ollama version this module requires, e.g. "v0.17.4":
// from the build information, or (test binaries carry none) from the
// go.mod above the working directory; "" if neither says.
func Version() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == modulePath {
				return d.Version
			}
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			for line := range strings.Lines(string(b)) {
				if f := strings.Fields(line); len(f) >= 2 && f[0] == modulePath {
					return f[1]
				}
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// CachedBinary is where .ci/ollama.sh keeps the server it builds.
func CachedBinary() string {
	dir := os.Getenv("GPU_TURNSTILE_CACHE")
	if dir == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return ""
			}
			base = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(base, "gpu-turnstile")
	}
	return filepath.Join(dir, "ollama-"+Version(), "ollama")
}

// Binary returns the Ollama server binary to test against: $OLLAMA_BIN,
// or the one .ci/ollama.sh cached. The error says why there is none.
func Binary() (string, error) {
	if bin := os.Getenv("OLLAMA_BIN"); bin != "" {
		if _, err := exec.LookPath(bin); err != nil {
			return "", fmt.Errorf("OLLAMA_BIN=%s: %w", bin, err)
		}
		return bin, nil
	}
	bin := CachedBinary()
	if _, err := exec.LookPath(bin); err != nil {
		return "", fmt.Errorf("no Ollama server: set OLLAMA_BIN or build one with .ci/ollama.sh (looked for %s)", bin)
	}
	return bin, nil
}

// Options shape one server.
type Options struct {
	// Models is the directory to use as OLLAMA_MODELS; it must be this
	// server's own (runners are told apart by it). Default: a new
	// directory under Dir.
	Models string
	// NumParallel is OLLAMA_NUM_PARALLEL; 0 leaves Ollama's default (1).
	NumParallel int
	// Env is added to the server's environment (KEY=value).
	Env []string
}

// Server is a running `ollama serve`.
type Server struct {
	URL    string // http://127.0.0.1:PORT
	Host   string // 127.0.0.1:PORT, as OLLAMA_HOST
	Models string // OLLAMA_MODELS
	Log    string // the server's log file
	Client *api.Client

	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts `ollama serve` with its home and log under dir and returns
// once it answers. Stop it with Close.
func Start(ctx context.Context, bin, dir string, opts Options) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Host: fmt.Sprintf("127.0.0.1:%d", port), Models: opts.Models, Log: filepath.Join(dir, "ollama.log"), exited: make(chan struct{})}
	s.URL = "http://" + s.Host
	if s.Models == "" {
		s.Models = filepath.Join(dir, "models")
	}
	home := filepath.Join(dir, "home")
	for _, d := range []string{s.Models, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := s.launch(bin, s.env(home, opts)); err != nil {
		return nil, err
	}
	base, _ := url.Parse(s.URL)
	s.Client = api.NewClient(base, http.DefaultClient)
	if err := s.waitReady(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// env is the server's environment: this process's, less its OLLAMA_
// settings and HOME, with the server's own and opts'.
func (s *Server) env(home string, opts Options) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OLLAMA_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+home, "OLLAMA_HOST="+s.Host, "OLLAMA_MODELS="+s.Models, "OLLAMA_NOPRUNE=1")
	if opts.NumParallel > 0 {
		env = append(env, "OLLAMA_NUM_PARALLEL="+strconv.Itoa(opts.NumParallel))
	}
	return append(env, opts.Env...)
}

// launch starts `bin serve` with env, its output appended to the log;
// exited is closed once it has exited.
func (s *Server) launch(bin string, env []string) error {
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s serve: %w", bin, err)
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	return nil
}

// waitReady waits until the server answers and has finished looking for
// GPUs: it starts a short-lived runner for that just after it begins to
// listen, and logs "inference compute" when done. A server not ready is
// stopped.
func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.logContains("msg=\"inference compute\"") {
			if _, err := s.Client.Version(ctx); err == nil {
				break
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("ollama serve exited at start: %v\n%s", s.cmd.ProcessState, s.LogTail(4000))
		case <-deadline:
			s.Close()
			return fmt.Errorf("ollama serve not ready within 30s\n%s", s.LogTail(4000))
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		case <-tick.C:
		}
	}
	for _, p := range s.Runners() {
		if !WaitGone(p.PID, 30*time.Second) {
			s.Close()
			return fmt.Errorf("ollama's GPU discovery runner %v still runs after 30s", p)
		}
	}
	return nil
}

func (s *Server) logContains(substr string) bool {
	b, err := os.ReadFile(s.Log)
	return err == nil && bytes.Contains(b, []byte(substr))
}

// LogSize is the length of the server's log so far, a mark for WaitLog.
func (s *Server) LogSize() int64 {
	fi, err := os.Stat(s.Log)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// WaitLog waits until the server has logged substr after the mark from
// LogSize, up to timeout, and reports whether it has.
func (s *Server) WaitLog(from int64, substr string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(s.Log); err == nil && int64(len(b)) > from && bytes.Contains(b[from:], []byte(substr)) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// PID is the serve process' id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Exited is closed once the serve process has exited.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Kill sends SIGKILL to the serve process only, as an OOM kill or
// `kill -9` would: its runners live on, re-parented.
func (s *Server) Kill() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// Close stops the server (SIGTERM, then SIGKILL after 10 s) and then
// kills whatever runner of it is left, and waits for them to be gone.
func (s *Server) Close() {
	select {
	case <-s.exited:
	default:
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Signal(syscall.SIGKILL)
			<-s.exited
		}
	}
	KillAll(s.Runners())
}

// LogTail returns the last n bytes of the server's log.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.Log)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Runners lists the `ollama runner` processes of this server, alive or
// orphaned.
func (s *Server) Runners() []Process { return Runners(s.Models) }

// Process is one running process.
type Process struct {
	PID  int
	Args []string
}

func (p Process) String() string { return fmt.Sprintf("%d %s", p.PID, strings.Join(p.Args, " ")) }

// Runners lists the `ollama runner` processes (argv[0]'s base name
// "ollama", argv[1] "runner") that belong to the server whose
// OLLAMA_MODELS is models: their environment says so, or the model they
// load lies under it. A runner that is a zombie has released its memory
// and is not listed (its command line reads empty).
func Runners(models string) []Process {
	var out []Process
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		args := readNulList(fmt.Sprintf("/proc/%d/cmdline", pid))
		if len(args) < 2 || filepath.Base(args[0]) != "ollama" || args[1] != "runner" {
			continue
		}
		if belongs(pid, args, models) {
			out = append(out, Process{PID: pid, Args: args})
		}
	}
	return out
}

func belongs(pid int, args []string, models string) bool {
	if i := slices.Index(args, "--model"); i >= 0 && i+1 < len(args) && strings.HasPrefix(args[i+1], models+string(filepath.Separator)) {
		return true
	}
	return slices.Contains(readNulList(fmt.Sprintf("/proc/%d/environ", pid)), "OLLAMA_MODELS="+models)
}

func readNulList(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// KillAll sends SIGKILL to each process and waits until none is running.
func KillAll(ps []Process) {
	for _, p := range ps {
		syscall.Kill(p.PID, syscall.SIGKILL)
	}
	for _, p := range ps {
		WaitGone(p.PID, 10*time.Second)
	}
}

// WaitGone waits until the process has exited (or is a zombie), up to
// timeout, and reports whether it has.
func WaitGone(pid int, timeout time.Duration) bool {
	// A pidfd becomes readable when the process exits; it works for
	// processes that are not our children, such as orphaned runners.
	fd, err := pidfdOpen(pid)
	if err != nil {
		return !Running(pid)
	}
	defer closeFD(fd)
	return waitFD(fd, timeout) || !Running(pid)
}

// Running reports whether the process is alive and not a zombie.
func Running(pid int) bool {
	return len(readNulList(fmt.Sprintf("/proc/%d/cmdline", pid))) > 0
}

// Create registers the model file f as name, as `ollama create` does for
// a Modelfile `FROM ./x.gguf`: the file becomes a blob of this server
// (hard-linked into OLLAMA_MODELS/blobs under its digest, so a big file is
// neither copied nor uploaded), then POST /api/create makes the model from
// it, with a template that passes the prompt through.
func (s *Server) Create(ctx context.Context, name string, f File) error {
	blobs := filepath.Join(s.Models, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return err
	}
	blob := filepath.Join(blobs, strings.Replace(f.Digest, ":", "-", 1))
	if err := os.Link(f.Path, blob); err != nil && !os.IsExist(err) {
		if err := os.Symlink(f.Path, blob); err != nil && !os.IsExist(err) {
			return err
		}
	}
	stream := false
	var last api.ProgressResponse
	req := &api.CreateRequest{
		Model:    name,
		Stream:   &stream,
		Files:    map[string]string{filepath.Base(f.Path): f.Digest},
		Template: "{{ .Prompt }}",
	}
	req.Parameters = map[string]any{}
	if f.NumCtx > 0 {
		req.Parameters["num_ctx"] = f.NumCtx
	}
	if f.Threads > 0 {
		req.Parameters["num_thread"] = f.Threads
	}
	err := s.Client.Create(ctx, req, func(p api.ProgressResponse) error { last = p; return nil })
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	if last.Status != "success" {
		return fmt.Errorf("create %s: ended with %q", name, last.Status)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
