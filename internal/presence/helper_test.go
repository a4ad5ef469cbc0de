package presence

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/testdir"
)

// helperEnv makes the test binary a helper process instead of running the
// tests: "wait" does nothing until its standard input closes (which
// happens when the test kills it or ends, so no helper outlives a run);
// "listen" also listens on a TCP port, starts a "wait" grandchild, and
// prints "PORT GRANDCHILD_PID" on its standard output.
const helperEnv = "PRESENCE_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "wait":
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "listen":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// The grandchild's standard input is a pipe whose write end only
		// this process holds: it ends when this process does.
		gc := exec.Command(exe)
		gc.Env = append(os.Environ(), helperEnv+"=wait")
		if _, err := gc.StdinPipe(); err != nil {
			os.Exit(1)
		}
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("%d %d\n", ln.Addr().(*net.TCPAddr).Port, gc.Process.Pid)
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	default:
		os.Exit(2)
	}
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startHelper starts exe (the test binary or a copy) as a helper in mode;
// argv0, if set, is its command line's first argument. The helper is
// killed and waited for at the test's end, if stop did not do it before.
func startHelper(t *testing.T, exe, argv0, mode string) *helper {
	t.Helper()
	cmd := exec.Command(exe)
	if argv0 != "" {
		cmd.Args[0] = argv0
	}
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(h.stop)
	return h
}

// stop kills the helper and waits for it: it is gone, not a zombie.
func (h *helper) stop() {
	if h.cmd.ProcessState != nil {
		return
	}
	h.stdin.Close()
	h.cmd.Process.Kill()
	h.cmd.Wait()
}

func (h *helper) pid() int32 { return int32(h.cmd.Process.Pid) }

// listening reads the "listen" helper's port and grandchild PID.
func (h *helper) listening(t *testing.T) (port int, grandchild int32) {
	t.Helper()
	line, err := h.out.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the helper's port: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		t.Fatalf("helper printed %q", line)
	}
	port, err1 := strconv.Atoi(f[0])
	gc, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		t.Fatalf("helper printed %q", line)
	}
	return port, int32(gc)
}

// copyExe copies the test binary into a new directory as name (plus .exe
// on Windows) and returns the copy's path.
func copyExe(t *testing.T, name string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	dst := filepath.Join(testdir.New(t), name)
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}
