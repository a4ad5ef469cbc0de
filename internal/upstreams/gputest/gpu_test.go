package gputest

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const gib = 1 << 30

func TestOccupyRecordsOverlapsOnly(t *testing.T) {
	g := New()
	g.ShareAmong("ollama", "vllm")
	a := g.Occupy("ollama", "load a")
	b := g.Occupy("vllm", "weights")
	if len(g.Overlaps()) != 0 {
		t.Fatalf("overlaps within a sharing group: %v", g.Overlaps())
	}
	c := g.Occupy("comfy", "job")
	if n := len(g.Overlaps()); n != 2 {
		t.Fatalf("overlaps %v, want comfy against ollama and vllm", g.Overlaps())
	}
	a("unload")
	b("sleep")
	c("free")
	c("free again")
	if g.Users("comfy") != 0 || g.Users("ollama") != 0 {
		t.Fatal("a double release counted twice")
	}
	u := g.OccupyUnbidden("ollama", "restart")
	defer u("exit")
	if len(g.Overlaps()) != 2 || len(g.Unbidden()) != 0 {
		t.Fatalf("overlaps %v unbidden %v", g.Overlaps(), g.Unbidden())
	}
}

// With no size, bytes are counted but nothing is checked.
func TestNoSizeChecksNothing(t *testing.T) {
	g := New()
	r := g.OccupyBytes("ollama", "load huge", 1<<50)
	defer r("unload")
	g.Foreign("game", 4242, 1<<50)
	if len(g.OverCommits()) != 0 || g.Free() != 0 || g.Used() != 2<<50 {
		t.Fatalf("over-commits %v, free %d, used %d", g.OverCommits(), g.Free(), g.Used())
	}
}

func TestChargesAndOverCommits(t *testing.T) {
	g := New()
	g.SetMemory(8 * gib)
	a := g.OccupyBytes("ollama", "load a", 5*gib)
	if g.Used() != 5*gib || g.Free() != 3*gib || g.Total() != 8*gib {
		t.Fatalf("used %d free %d total %d", g.Used(), g.Free(), g.Total())
	}
	game := g.Foreign("game", 4242, 2*gib)
	if len(g.Overlaps()) != 0 {
		t.Fatalf("a foreign process counts as an overlap: %v", g.Overlaps())
	}
	if g.Free() != 1*gib {
		t.Fatalf("free %d with the game, want 1 GiB", g.Free())
	}
	b := g.OccupyBytes("ollama", "load b", 2*gib)
	if g.Free() != 0 {
		t.Fatalf("free %d when over-committed, want 0", g.Free())
	}
	oc := g.OverCommits()
	if len(oc) != 1 || !strings.Contains(oc[0], `ollama "load b"`) || !strings.Contains(oc[0], "9216 MiB used of 8192 MiB") {
		t.Fatalf("over-commits %v", oc)
	}
	b("unload b")
	game()
	game()
	a("unload a")
	if g.Used() != 0 || g.Free() != 8*gib || len(g.OverCommits()) != 1 {
		t.Fatalf("after releases: used %d free %d over-commits %v", g.Used(), g.Free(), g.OverCommits())
	}
	if len(g.Overlaps()) != 0 {
		t.Fatalf("overlaps %v", g.Overlaps())
	}
	ev := g.Events()
	if i := Index(ev, 0, "foreign", "game (pid 4242) takes 2048 MiB"); i < 0 || ev[i].Used != 7*gib {
		t.Fatalf("no foreign event with the card's use:\n%s", Dump(ev))
	}
	// A size set below what is used is an over-commit too.
	c := g.OccupyBytes("comfy", "job", 6*gib)
	defer c("free")
	g.SetMemory(4 * gib)
	if oc := g.OverCommits(); len(oc) != 2 || !strings.Contains(oc[1], "size set") {
		t.Fatalf("over-commits %v", oc)
	}
}

// An unbidden use's over-commit at its start is the engine's own doing.
func TestUnbiddenOverCommit(t *testing.T) {
	g := New()
	g.SetMemory(4 * gib)
	a := g.OccupyBytes("comfy", "models", 3*gib)
	defer a("free")
	r := g.OccupyUnbiddenBytes("a1111", "checkpoint at launch", 2*gib)
	defer r("exit")
	if len(g.OverCommits()) != 0 || len(g.Overlaps()) != 0 || len(g.Unbidden()) != 2 {
		t.Fatalf("over-commits %v overlaps %v unbidden %v", g.OverCommits(), g.Overlaps(), g.Unbidden())
	}
	// What starts while it lasts still counts.
	b := g.OccupyBytes("comfy", "job", 1)
	defer b("end")
	if len(g.OverCommits()) != 1 || len(g.Overlaps()) != 1 {
		t.Fatalf("over-commits %v overlaps %v", g.OverCommits(), g.Overlaps())
	}
}

// smi runs the fake nvidia-smi once.
func smi(t *testing.T, path string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(path, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

const csv = "--format=csv,noheader,nounits"

func TestFakeSMIQueries(t *testing.T) {
	g := New()
	g.SetMemory(24 * gib)
	path := g.FakeSMI(t.TempDir())
	check := func(want string, args ...string) {
		t.Helper()
		out, errOut, code := smi(t, path, args...)
		if out != want || code != 0 {
			t.Errorf("nvidia-smi %s: %q (stderr %q, status %d), want %q", strings.Join(args, " "), out, errOut, code, want)
		}
	}
	gpu := "--query-gpu=uuid,memory.total,memory.free"
	apps := "--query-compute-apps=pid,used_memory"
	check(UUID+", 24576, 24576\n", gpu, csv, "-i", "0")
	check("", apps, csv, "-i", "0")

	me := strconv.Itoa(os.Getpid())
	a := g.OccupyBytes("ollama", "load a", 5*gib)
	b := g.OccupyBytes("comfy", "models", 3*gib+512<<20)
	game := g.Foreign("game", 4242, 1*gib)
	g.Occupy("vllm", "nothing charged")
	check(UUID+", 24576, 14848\n", gpu, csv, "-i", "0")
	check("24576, 14848\n", "--query-gpu=memory.total,memory.free", csv, "-i", "0")
	check("14848\n", "-i", "0", "--query-gpu=memory.free", csv)
	check("14848, 24576, "+UUID+"\n", "--query-gpu=memory.free,memory.total,uuid", csv)
	if os.Getpid() < 4242 {
		check(me+", 8704\n4242, 1024\n", apps, csv, "-i", "0")
		check("8704, "+me+"\n1024, 4242\n", "--query-compute-apps=used_memory,pid", csv, "--id=0")
	} else {
		check("4242, 1024\n"+me+", 8704\n", apps, csv, "-i", "0")
		check("1024, 4242\n8704, "+me+"\n", "--query-compute-apps=used_memory,pid", csv, "--id=0")
	}
	b("free")
	game()
	check(me+", 5120\n", apps, csv, "-i", "0")
	check(me+", 5120, "+os.Args[0]+"\n", "--query-compute-apps=pid,used_memory,process_name", csv, "-i", UUID)

	// Over-committed: nvidia-smi never prints a negative free.
	c := g.OccupyBytes("comfy", "job", 20*gib)
	check(UUID+", 24576, 0\n", gpu, csv, "-i", "0")
	c("end")
	a("unload")

	for _, args := range [][]string{
		{},
		{gpu},
		{gpu, "--format=csv", "-i", "0"},
		{gpu, csv, "-i", "1"},
		{gpu, csv, "-i"},
		{"--query-gpu=temperature.gpu", csv},
		{apps, gpu, csv},
		{gpu, csv, "-lms", "x"},
		{"-q"},
	} {
		if out, _, code := smi(t, path, args...); code != 9 || out != "" {
			t.Errorf("nvidia-smi %s: %q status %d, want status 9", strings.Join(args, " "), out, code)
		}
	}

	g.SetSMIFailing(true)
	if out, errOut, code := smi(t, path, gpu, csv, "-i", "0"); code != 9 || out != "" || !strings.Contains(errOut, "NVIDIA driver") {
		t.Errorf("failing: %q %q status %d, want an error and status 9", out, errOut, code)
	}
	g.SetSMIFailing(false)
	check(UUID+", 24576, 24576\n", gpu, csv, "-i", "0")
}

// loop starts nvidia-smi -lms and returns its lines as they come.
func loop(t *testing.T, path string, args ...string) (lines <-chan string, cmd *exec.Cmd) {
	t.Helper()
	cmd = exec.Command(path, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 100)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return ch, cmd
}

func next(t *testing.T, lines <-chan string, within time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("the loop ended")
		}
		return l
	case <-time.After(within):
		t.Fatalf("no line within %v", within)
		return ""
	}
}

func TestFakeSMILoop(t *testing.T) {
	g := New()
	g.SetMemory(16 * gib)
	path := g.FakeSMI(t.TempDir())
	lines, cmd := loop(t, path, "--query-gpu=uuid,memory.total,memory.free", csv, "-lms", "50", "-i", "0")
	want := UUID + ", 16384, 16384"
	if l := next(t, lines, 5*time.Second); l != want {
		t.Fatalf("first line %q, want %q", l, want)
	}
	if l := next(t, lines, 5*time.Second); l != want {
		t.Fatalf("second line %q, want %q", l, want)
	}
	r := g.OccupyBytes("ollama", "load", 4*gib)
	defer r("unload")
	deadline := time.After(5 * time.Second)
	for l := ""; l != UUID+", 16384, 12288"; {
		select {
		case l = <-lines:
		case <-deadline:
			t.Fatalf("the loop never showed the load; last %q", l)
		}
	}

	// A stalled loop prints nothing, and goes on running.
	g.SetSMIStalled(true)
	time.Sleep(200 * time.Millisecond) // a line may have been under way
	for len(lines) > 0 {
		<-lines
	}
	select {
	case l := <-lines:
		t.Fatalf("a stalled loop printed %q", l)
	case <-time.After(300 * time.Millisecond):
	}
	// It prints again once resumed: it was still running.
	g.SetSMIStalled(false)
	next(t, lines, 5*time.Second)

	// A failing driver ends the loop with status 9.
	g.SetSMIFailing(true)
	deadline = time.After(5 * time.Second)
	for done := false; !done; {
		select {
		case _, ok := <-lines:
			done = !ok
		case <-deadline:
			t.Fatal("the loop went on with the driver gone")
		}
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 9 {
		t.Fatalf("loop ended with %v, want status 9", err)
	}
}

// The compute-apps query loops too.
func TestFakeSMIAppsLoop(t *testing.T) {
	g := New()
	g.SetMemory(16 * gib)
	g.Foreign("game", 77, 2*gib)
	path := g.FakeSMI(t.TempDir())
	lines, _ := loop(t, path, "-lms", "20", "--query-compute-apps=pid,used_memory", csv)
	for range 2 {
		if l := next(t, lines, 5*time.Second); l != "77, 2048" {
			t.Fatalf("line %q", l)
		}
	}
}
