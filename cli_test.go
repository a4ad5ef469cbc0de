package turnstile

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cli runs `caddy gpu-turnstile ARGS... --address ADMIN` as a separate
// process (this test binary, as Caddy: see TestMain), and returns its
// exit code and output.
func (h *harness) cli(args ...string) (code int, stdout, stderr string) {
	h.t.Helper()
	cmd := h.cliCommand(args...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		h.t.Fatalf("running %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

func (h *harness) cliCommand(args ...string) *exec.Cmd {
	h.t.Helper()
	self, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	full := append([]string{"gpu-turnstile", "--address", h.adminAddr()}, args...)
	cmd := exec.Command(self, full...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	return cmd
}

func (h *harness) adminAddr() string { return strings.TrimPrefix(h.admin, "http://") }

func TestCLIHoldRenewRelease(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.waitIdle()
	if code, out, errOut := h.cli("status"); code != 0 || !strings.HasPrefix(out, "default: idle") {
		t.Fatalf("status: %d %q %q", code, out, errOut)
	}
	code, out, errOut := h.cli("hold", "--owner", "game", "--ttl", "1m")
	id := strings.TrimSpace(out)
	if code != 0 || id == "" || strings.Contains(id, "\n") {
		t.Fatalf("hold: %d %q %q, want exit 0 and the ID alone on stdout", code, out, errOut)
	}
	if st := h.status(); st.State != "hold" || len(st.Holds) != 1 || st.Holds[0].ID != id {
		t.Fatalf("after hold: %+v", st)
	}
	if code, out, _ := h.cli("status"); code != 0 || !strings.Contains(out, "hold     "+id+"  game (admin), expires in") {
		t.Fatalf("status during the hold: %d %q", code, out)
	}
	code, out, _ = h.cli("renew", id, "--ttl", "2m", "--json")
	var renewed struct {
		ID        string    `json:"id"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(out), &renewed); code != 0 || err != nil || renewed.ID != id || time.Until(renewed.ExpiresAt) < 90*time.Second {
		t.Fatalf("renew --ttl 2m --json: %d %q %v", code, out, err)
	}
	if code, out, _ := h.cli("release", id); code != 0 || !strings.HasPrefix(out, "released "+id) {
		t.Fatalf("release: %d %q", code, out)
	}
	h.waitStatus("no hold", func(st Status) bool { return len(st.Holds) == 0 })
	if code, _, errOut := h.cli("release", id); code != 5 || !strings.Contains(errOut, "may have expired") {
		t.Fatalf("release again: %d %q, want 5 (not found)", code, errOut)
	}
	if code, _, errOut := h.cli("status", "--turnstile", "nope"); code != 5 {
		t.Fatalf("status of an unknown turnstile: %d %q, want 5", code, errOut)
	}
	if code, _, errOut := h.cli("hold", "--ttl", "soon"); code != 1 || !strings.Contains(errOut, "--ttl") {
		t.Fatalf("hold --ttl soon: %d %q, want 1 and the flag named", code, errOut)
	}
}

func TestCLIBlockedTimedOutCancel(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfyOpts(time.Hour)})
	h.waitIdle()
	img := h.postAsync(context.Background(), h.image+"/prompt", promptBody(3_600_000))
	id := promptID(t, <-img)
	h.waitStatus("the job runs", func(st Status) bool { return st.Job != nil && st.Job.Phase == "running" })

	code, out, _ := h.cli("hold", "--no-wait", "--json")
	var blocked struct {
		Error     string `json:"error"`
		BlockedBy struct {
			State string `json:"state"`
		} `json:"blocked_by"`
	}
	if err := json.Unmarshal([]byte(out), &blocked); code != 3 || err != nil || blocked.BlockedBy.State != "image" {
		t.Fatalf("hold --no-wait during a job: %d %q %v, want 3 and blocked_by", code, out, err)
	}
	if code, _, errOut := h.cli("hold", "--wait-timeout", "1500ms"); code != 4 || !strings.Contains(errOut, "wait_timeout") || !strings.Contains(errOut, "waiting for the GPU") {
		t.Fatalf("hold --wait-timeout 1500ms during a job: %d %q, want 4, after saying that it waits", code, errOut)
	}
	if code, out, errOut := h.cli("cancel"); code != 0 || out != id+": interrupted\n" {
		t.Fatalf("cancel: %d %q %q", code, out, errOut)
	}
	h.waitIdle()
	if code, _, errOut := h.cli("cancel"); code != 5 {
		t.Fatalf("cancel with no job: %d %q, want 5", code, errOut)
	}
}

// hold -- COMMAND holds the GPU while the command runs, and exits with
// its status: here the command is this CLI again, which sees the hold.
func TestCLIHoldWhileCommand(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.waitIdle()
	self, _ := os.Executable()
	code, out, errOut := h.cli("hold", "--owner", "game", "--", self, "gpu-turnstile", "--address", h.adminAddr(), "status")
	if code != 0 || !strings.Contains(out, "game (admin)") {
		t.Fatalf("hold -- status: %d %q %q, want the command to see the hold", code, out, errOut)
	}
	if st := h.status(); len(st.Holds) != 0 {
		t.Fatalf("the hold outlived its command: %+v", st.Holds)
	}
	code, _, errOut = h.cli("hold", "--", self, "gpu-turnstile", "--address", h.adminAddr(), "release", "no-such-hold")
	if code != 5 {
		t.Fatalf("hold -- a command exiting 5: %d %q, want its status", code, errOut)
	}
	if code, _, errOut := h.cli("hold", "--", "/no/such/program"); code != 1 || len(h.status().Holds) != 0 {
		t.Fatalf("hold -- a missing program: %d %q, want 1 and no hold left", code, errOut)
	}
}

func TestCLIHoldWaitFor(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.waitIdle()
	game := exec.Command("sleep", "300")
	if err := game.Start(); err != nil {
		t.Skip("no sleep program:", err)
	}
	defer game.Process.Kill()
	exited := make(chan struct{})
	go func() { game.Wait(); close(exited) }()
	cmd := h.cliCommand("hold", "--owner", "game", "--ttl", "3s", "--wait-for", strconv.Itoa(game.Process.Pid))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("held for the game", func(st Status) bool { return len(st.Holds) == 1 })
	// Renewed at a third of its ttl, the hold outlives it.
	first := h.status().Holds[0].ExpiresAt
	h.waitStatus("renewed", func(st Status) bool { return len(st.Holds) == 1 && st.Holds[0].ExpiresAt.After(first) })
	game.Process.Kill()
	<-exited
	if err := cmd.Wait(); err != nil {
		t.Fatalf("hold --wait-for: %v", err)
	}
	if st := h.status(); len(st.Holds) != 0 {
		t.Fatalf("the hold outlived its process: %+v", st.Holds)
	}
	if code, _, errOut := h.cli("hold", "--wait-for", strconv.Itoa(game.Process.Pid)); code != 1 || !strings.Contains(errOut, "no such process") {
		t.Fatalf("--wait-for an ended process: %d %q", code, errOut)
	}
}

func TestCLIEvents(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	h.waitIdle()
	cmd := h.cliCommand("events", "--json")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	next := func(want string) {
		t.Helper()
		for lines.Scan() {
			var ev struct {
				Event string `json:"event"`
				Data  Status `json:"data"`
			}
			if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
				t.Fatalf("event line %q: %v", lines.Text(), err)
			}
			if ev.Event == "status" && ev.Data.State == want {
				return
			}
		}
		t.Fatalf("the stream ended before a status %q", want)
	}
	next("idle")
	id := h.takeHold(t, "game", "1m")
	next("hold")
	h.releaseHold(t, id)
	next("idle")
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("events after an interrupt: %v, want exit 0", err)
	}
}

// A reload replaces the admin endpoint; its event streams end rather
// than hold the old endpoint's shutdown up.
func TestAdminEventsEndOnReload(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	resp, err := h.client.Get(h.admin + "/gpu_turnstile/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("admin events: %d %s", resp.StatusCode, ct)
	}
	first, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if !strings.HasPrefix(first, "retry:") {
		t.Fatalf("first line %q", first)
	}
	h.load(h.caddyfile(harnessOptions{}))
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); done <- err }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the admin event stream outlived a reload")
	}
	if r := h.do(http.MethodGet, h.admin+"/gpu_turnstile/events?turnstile=nope", ""); r.status != 404 {
		t.Fatalf("events of an unknown turnstile: %d %s", r.status, r.body)
	}
}

func TestCLIUnreachable(t *testing.T) {
	h := &harness{t: t, admin: "http://127.0.0.1:" + strconv.Itoa(freePort(t))}
	code, _, errOut := h.cli("status")
	if code != 1 || !strings.Contains(errOut, "is Caddy running?") {
		t.Fatalf("status with no Caddy: %d %q", code, errOut)
	}
}
