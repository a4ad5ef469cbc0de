package ollama

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Runner is a process that runs one of Ollama's models (`ollama runner
// --model PATH ...`). It holds the model's memory from the first moment of
// its load, long before /api/ps lists the model, and it outlives an
// `ollama serve` killed with SIGKILL.
type Runner struct {
	PID   int32
	Model string // the --model argument
}

// LocalRunners lists the runner processes of this server on this host,
// from /proc. visible is false when they cannot be seen: the server's URL
// is not a loopback address (its processes are on another host or in
// another container), or the system has no /proc (Windows, macOS).
//
// A runner is this server's when the OLLAMA_HOST it inherited names the
// server's port (Ollama's default, 11434, when unset). A runner whose
// environment cannot be read (another user's process) counts as this
// server's: an unknown runner may hold the GPU.
func (c *Client) LocalRunners(ctx context.Context) (runners []Runner, visible bool, err error) {
	u, err := url.Parse(c.URL())
	if err != nil || !isLoopback(u.Hostname()) || !procVisible() {
		return nil, false, nil
	}
	port := urlPort(u)
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, true, err
	}
	for _, e := range entries {
		if ctx.Err() != nil {
			break
		}
		pid, err := strconv.ParseInt(e.Name(), 10, 32)
		if err != nil {
			continue // not a process
		}
		dir := filepath.Join(procRoot, e.Name())
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if !isRunner(args) {
			continue
		}
		if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil && hostPort(strings.Split(string(env), "\x00")) != port {
			continue // another Ollama server's runner
		}
		runners = append(runners, Runner{PID: int32(pid), Model: flagValue(args, "--model")})
	}
	return runners, true, ctx.Err()
}

// procRoot is where the process list is read; only Linux has one.
const procRoot = "/proc"

func procVisible() bool {
	if runtime.GOOS != "linux" {
		return false
	}
	_, err := os.Stat(filepath.Join(procRoot, "self", "cmdline"))
	return err == nil
}

// isRunner reports whether a command line is an Ollama runner's: the
// executable is ollama (ollama.exe) and its first argument "runner".
func isRunner(args []string) bool {
	if len(args) < 2 || args[1] != "runner" {
		return false
	}
	name := strings.ToLower(filepath.Base(strings.ReplaceAll(args[0], `\`, "/")))
	return strings.TrimSuffix(name, ".exe") == "ollama"
}

func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// hostPort is the port of the OLLAMA_HOST in env, as Ollama reads it:
// [scheme://]host[:port], the port 11434 when absent (443 for https).
func hostPort(env []string) string {
	host := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "OLLAMA_HOST="); ok {
			host = strings.TrimSpace(strings.Trim(v, `"'`))
		}
	}
	def := "11434"
	if scheme, rest, ok := strings.Cut(host, "://"); ok {
		if scheme == "https" {
			def = "443"
		}
		host = rest
	}
	host, _, _ = strings.Cut(host, "/")
	if _, port, err := net.SplitHostPort(host); err == nil && port != "" {
		return port
	}
	return def
}

func urlPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
