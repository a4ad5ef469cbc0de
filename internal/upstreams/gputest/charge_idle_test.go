package gputest

import (
	"testing"
	"time"
)

// An idle charge (a sleeping engine's residue) keeps its bytes but
// overlaps nothing; busy again, it does; it ends with its process either
// way.
func TestIdleChargeKeepsBytesWithoutOccupying(t *testing.T) {
	g := New()
	g.SetMemory(24 * gib)
	child := startSleeper(t)
	c := g.ChargeProcess("vllm", "weights m", child.Process.Pid, 8*gib)
	c.Idle(2 * gib)
	if g.Users("vllm") != 0 || g.Used() != 2*gib {
		t.Fatalf("idle: users %d, used %d", g.Users("vllm"), g.Used())
	}
	g.Occupy("comfy", "job beside the residue")("job end")
	if o := g.Overlaps(); len(o) != 0 {
		t.Fatalf("overlaps %v beside an idle charge", o)
	}
	job := g.Occupy("comfy", "job")
	c.Busy(8 * gib)
	job("job end")
	if o := g.Overlaps(); len(o) != 1 || g.Users("vllm") != 1 || g.Used() != 8*gib {
		t.Fatalf("busy during a job: overlaps %v, users %d, used %d", o, g.Users("vllm"), g.Used())
	}
	c.Idle(gib)
	child.Process.Kill()
	child.Wait()
	if !g.WaitFor(5*time.Second, func(ev []Event) bool { return Index(ev, 0, "vllm", "weights m exit") >= 0 }) {
		t.Fatalf("no exit event:\n%s", Dump(g.Events()))
	}
	if g.Users("vllm") != 0 || g.Used() != 0 {
		t.Fatalf("after the exit: users %d, used %d", g.Users("vllm"), g.Used())
	}
}
