package gputest

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
)

// startSleeper starts a child that lives until killed.
func startSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to run: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// A process's charge lasts while it lives: an image job beside it is an
// overlap; once it is killed (SIGKILL), the charge has ended at once for
// every check, and its exit is an event.
func TestChargeEndsWithItsProcess(t *testing.T) {
	g := New()
	g.SetMemory(24 * gib)
	g.ShareAmong("llamaswap", "ollama")
	child := startSleeper(t)
	c := g.ChargeProcess("llamaswap", "load qwen", child.Process.Pid, 8*gib)
	if c.PID() != child.Process.Pid || g.Users("llamaswap") != 1 || g.Used() != 8*gib {
		t.Fatalf("charged: pid %d, users %d, used %d", c.PID(), g.Users("llamaswap"), g.Used())
	}
	job := g.Occupy("comfy", "job while the child lives")
	job("job end")
	if o := g.Overlaps(); len(o) != 1 {
		t.Fatalf("overlaps %v, want the job beside the living child", o)
	}
	child.Process.Kill()
	child.Wait()
	// No wait for the watcher: the check itself sees the exit.
	g.Occupy("comfy", "job after the exit")("job end")
	if o := g.Overlaps(); len(o) != 1 {
		t.Fatalf("overlaps %v, want none after the child's exit", o)
	}
	if !g.WaitFor(5*time.Second, func(ev []Event) bool { return Index(ev, 0, "llamaswap", "load qwen exit") >= 0 }) {
		t.Fatalf("no exit event:\n%s", Dump(g.Events()))
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("the charge is not done")
	}
	if g.Users("llamaswap") != 0 || g.Used() != 0 {
		t.Fatalf("after the exit: users %d, used %d", g.Users("llamaswap"), g.Used())
	}
}

// The watcher wakes the tests waiting on events when a process exits,
// though nothing else happens on the card.
func TestChargeExitIsAnEvent(t *testing.T) {
	g := New()
	child := startSleeper(t)
	c := g.ChargeProcess("vllm", "EngineCore", child.Process.Pid, gib)
	ch := g.Changed()
	child.Process.Kill()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no event at the child's death")
	}
	<-c.Done()
	if i := Index(g.Events(), 0, "vllm", "EngineCore exit"); i < 0 {
		t.Fatalf("no exit event:\n%s", Dump(g.Events()))
	}
}

// Set changes the bytes listed under the process; Release ends the
// charge before the process exits.
func TestChargeSetAndRelease(t *testing.T) {
	g := New()
	g.SetMemory(24 * gib)
	path := g.FakeSMI(t.TempDir())
	child := startSleeper(t)
	pid := child.Process.Pid
	c := g.ChargeProcess("vllm", "EngineCore", pid, 10*gib)
	c.Set(gib)
	if g.Used() != gib {
		t.Fatalf("used %d after Set, want %d", g.Used(), gib)
	}
	out, _, code := smi(t, path, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
	if code != 0 || strings.TrimSpace(out) != strings.TrimSpace(strconv.Itoa(pid)+", 1024") {
		t.Fatalf("nvidia-smi: %q (%d), want pid %d with 1024 MiB", out, code, pid)
	}
	c.Release("sleep released")
	c.Release("twice")
	c.Set(2 * gib)
	if g.Used() != 0 || g.Users("vllm") != 0 {
		t.Fatalf("after Release: used %d users %d", g.Used(), g.Users("vllm"))
	}
	if n := strings.Count(Dump(g.Events()), "twice"); n != 0 {
		t.Fatal("a second Release recorded an event")
	}
}

// A PID whose start time is not the one charged is another process: the
// charge of a process gone before it was made ends at once, even if its
// PID names a living process now.
func TestChargeReusedPIDIsAnotherProcess(t *testing.T) {
	g := New()
	tb, err := procs.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	self, ok := tb.Get(int32(os.Getpid()))
	if !ok {
		t.Fatal("this process is not in the table")
	}
	old := self.ID
	old.Start-- // the process that had this PID before
	c := g.chargeID("llamaswap", "load old", old, gib)
	select {
	case <-c.Done():
	default:
		t.Fatal("the charge of a reused PID is alive")
	}
	if g.Users("llamaswap") != 0 || g.Used() != 0 {
		t.Fatalf("users %d, used %d", g.Users("llamaswap"), g.Used())
	}
	live := g.chargeID("llamaswap", "load self", self.ID, gib)
	if g.Users("llamaswap") != 1 {
		t.Fatal("the charge of the living process has ended")
	}
	live.Release("done")
}
