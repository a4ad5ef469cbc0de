package presence

import (
	"errors"
	"testing"
	"time"
)

// A process is busy once it has been at or over the threshold in every
// sample for the duration; a sample under it, a `-` (0) or a missing
// sample starts it over.
func TestUsageTrackerRuns(t *testing.T) {
	const interval = 2 * time.Second
	t0 := time.Date(2026, 3, 10, 21, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * interval) }
	game := func(pct int) procUse { return procUse{pid: 9001, name: "Game.exe", percent: pct} }
	busyAt := func(tr *usageTracker, i int) bool { return len(tr.busy(at(i))) == 1 }

	tr := newUsageTracker(20, 10*time.Second, interval) // 5 samples
	for i := range 4 {
		tr.observe(at(i), game(60))
		if busyAt(tr, i) {
			t.Fatalf("busy after %d samples, want 5", i+1)
		}
	}
	tr.observe(at(4), game(60))
	if got := tr.busy(at(4)); len(got) != 1 || got[0] != game(60) {
		t.Fatalf("busy after 5 samples = %+v, want the game", got)
	}
	if busyAt(tr, 6) {
		t.Fatal("still busy two intervals after its last sample")
	}

	tr = newUsageTracker(20, 10*time.Second, interval)
	for i := range 3 {
		tr.observe(at(i), game(60))
	}
	tr.observe(at(3), game(0)) // a `-`
	for i := 4; i < 8; i++ {
		tr.observe(at(i), game(60))
	}
	if busyAt(tr, 7) {
		t.Fatal("busy although a `-` sample broke the run 4 samples ago")
	}
	tr.observe(at(9), game(60)) // sample 8 missing: the run starts over
	if busyAt(tr, 9) {
		t.Fatal("busy although a sample was missing")
	}
	for i := 10; i < 14; i++ {
		tr.observe(at(i), game(60))
	}
	if !busyAt(tr, 13) {
		t.Fatal("not busy after 5 samples in a row")
	}
}

func TestUsageTrackerOrderAndDown(t *testing.T) {
	now := time.Now()
	tr := newUsageTracker(20, time.Second, time.Second)
	tr.observe(now, procUse{pid: 2, name: "b", percent: 40})
	tr.observe(now, procUse{pid: 1, name: "a", percent: 90})
	tr.observe(now, procUse{pid: 3, name: "browser", percent: 3})
	if got := tr.busy(now); len(got) != 2 || got[0].pid != 1 || got[1].pid != 2 {
		t.Fatalf("busy = %+v, want pid 1 then 2 (the busiest first), not the browser", got)
	}
	tr.down(errors.New("nvidia-smi pmon: exit status 9"))
	if got := tr.busy(now); len(got) != 0 || tr.state() == nil {
		t.Fatalf("after down: busy %+v, state %v", got, tr.state())
	}
	tr.down(nil)
	if tr.state() != nil {
		t.Fatal("state stays down after a sample")
	}
}
