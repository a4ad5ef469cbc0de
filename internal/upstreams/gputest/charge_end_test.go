package gputest

import (
	"fmt"
	"testing"
)

// End on a living process's charge releases it with why; on an exited
// one's, whether or not the watcher has ended it yet, the exit comes
// first and why follows: why is never lost to the watcher.
func TestChargeEndRecordsWhyEitherWay(t *testing.T) {
	g := New()
	live := g.ChargeProcess("llamacpp", "load a", startSleeper(t).Process.Pid, gib)
	live.End("unloaded a")
	ev := g.Events()
	if Index(ev, 0, "llamacpp", "unloaded a") < 0 || Index(ev, 0, "llamacpp", "load a exit") >= 0 || g.Users("llamacpp") != 0 {
		t.Fatalf("End of a living process's charge:\n%s", Dump(ev))
	}
	for _, watched := range []bool{false, true} {
		what := fmt.Sprintf("load b (watcher first: %v)", watched)
		child := startSleeper(t)
		c := g.ChargeProcess("llamacpp", what, child.Process.Pid, gib)
		child.Process.Kill()
		child.Wait()
		if watched {
			<-c.Done()
		}
		c.End("unloaded b")
		ev := g.Events()
		exit := Index(ev, 0, "llamacpp", what+" exit")
		if why := Index(ev, exit, "llamacpp", "unloaded b"); exit < 0 || why < 0 || g.Users("llamacpp") != 0 || g.Used() != 0 {
			t.Fatalf("End after the exit (watcher first: %v):\n%s", watched, Dump(ev))
		}
	}
}
