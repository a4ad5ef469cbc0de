package main

import (
	"slices"
	"testing"
	"time"
)

const sec = time.Second

// The two original rows of BENCHMARKS.md's simulated day, for seed 1: the
// co-resident policy's fields of the workload must not move them.
func TestDayExistingRows(t *testing.T) {
	ev := dayWorkload(1, 1, 3)
	for _, c := range []struct {
		p                                            dayPolicy
		switches, coldLLM, coldComfy, frees, warmups int
		switching                                    time.Duration
	}{
		{dayPolicy{}, 90, 0, 45, 45, 45, 10*time.Minute + 30*sec},
		{dayPolicy{batch: true}, 16, 0, 8, 8, 8, time.Minute + 52*sec},
	} {
		st := simulate(ev, c.p)
		if st.switches != c.switches || st.coldLLM != c.coldLLM || st.coldComfy != c.coldComfy ||
			st.frees != c.frees || st.warmups != c.warmups || st.switching != c.switching {
			t.Errorf("%+v: %d %d %d %d %d %v", c.p, st.switches, st.coldLLM, st.coldComfy, st.frees, st.warmups, st.switching)
		}
	}
}

// With no chat for the co_resident model, the co-resident policy is ours.
func TestDayCoResidentWithoutItsModelIsOurs(t *testing.T) {
	ev := dayWorkload(1, 0, 3)
	a, b := simulate(ev, dayPolicy{batch: true}), simulate(ev, dayPolicy{batch: true, coResident: true})
	if a.switches != b.switches || a.coldLLM != b.coldLLM || a.coldComfy != b.coldComfy || a.frees != b.frees ||
		a.warmups != b.warmups || a.switching != b.switching || a.llmWait != b.llmWait || b.beside != 0 ||
		!slices.Equal(a.duringRenders(), b.duringRenders()) {
		t.Fatalf("ours %+v\nco-resident %+v", a, b)
	}
}

// waitOf is the wait of the chat that arrived at at.
func waitOf(t *testing.T, st dayStats, at time.Duration) time.Duration {
	t.Helper()
	for _, c := range st.chats {
		if c.at == at {
			return c.wait
		}
	}
	t.Fatalf("no chat at %v", at)
	return 0
}

// A chat during the first render of a workflow waits for the render's end
// (then the free and the warm-up); one during a later render of the same,
// measured, workflow waits only for its model's load beside it.
func TestDayCoResidentChatDuringARender(t *testing.T) {
	ev := []dayEvent{
		{at: 0, image: true, dur: 30 * sec},
		{at: 10 * sec, dur: llmRequestTime, co: true},
		{at: 1000 * sec, image: true, dur: 30 * sec},
		{at: 1010 * sec, dur: llmRequestTime, co: true},
	}
	st := simulate(ev, dayPolicy{batch: true, coResident: true})
	// Unload 1 s, ComfyUI load 8 s, render 30 s, free 1 s, warm-up 4 s.
	if w := waitOf(t, st, 10*sec); w != 34*sec {
		t.Errorf("chat during the first-seen workflow's render waited %v, want 34s", w)
	}
	if w := waitOf(t, st, 1010*sec); w != costBesideLoad {
		t.Errorf("chat during the measured workflow's render waited %v, want its load, %v", w, costBesideLoad)
	}
	if st.beside != 1 || st.coldLLM != 1 || st.lostHandovers != 0 || st.drains != 0 {
		t.Errorf("beside %d, cold LLM %d, lost hand-overs %d, drains %d", st.beside, st.coldLLM, st.lostHandovers, st.drains)
	}
	if w := st.duringRenders(); !slices.Equal(w, []time.Duration{costBesideLoad, 34 * sec}) {
		t.Errorf("waits during renders %v", w)
	}
	if w := waitOf(t, simulate(ev, dayPolicy{batch: true}), 1010*sec); w != 34*sec {
		t.Errorf("without co-residency the second chat waited %v, want 34s", w)
	}
}

// A chat beside a render, in flight at the job's end, costs the batch its
// hand-over: a free, a drain and a cold ComfyUI load before the next job.
// The co_resident model stays loaded through that job (of the same,
// measured, workflow): no unload, and a chat beside it loads nothing.
func TestDayCoResidentLostHandover(t *testing.T) {
	ev := []dayEvent{
		{at: 0, image: true, dur: 30 * sec}, // measures workflow 0
		{at: 1000 * sec, image: true, dur: 30 * sec},
		{at: 1001 * sec, image: true, dur: 30 * sec},
		{at: 1035 * sec, dur: llmRequestTime, co: true}, // beside the first, to 1045 s
		{at: 1060 * sec, dur: llmRequestTime, co: true}, // beside the second, its model kept
	}
	st := simulate(ev, dayPolicy{batch: true, coResident: true})
	if w := waitOf(t, st, 1035*sec); w != costBesideLoad {
		t.Errorf("chat waited %v", w)
	}
	if st.lostHandovers != 1 || st.drains != 1 || st.drainTime != 5*sec {
		t.Errorf("lost hand-overs %d, drains %d (%v), want 1, 1 (5s)", st.lostHandovers, st.drains, st.drainTime)
	}
	if w := waitOf(t, st, 1060*sec); w != 0 {
		t.Errorf("chat beside the job that kept its model waited %v, want 0", w)
	}
	if st.switches != 6 || st.coldLLM != 1 || st.coldComfy != 3 || st.frees != 3 || st.warmups != 2 || st.switching != 41*sec {
		t.Errorf("switches %d, cold LLM %d, cold ComfyUI %d, frees %d, warm-ups %d, switching %v; want 6 1 3 3 2 41s",
			st.switches, st.coldLLM, st.coldComfy, st.frees, st.warmups, st.switching)
	}
	if r := st.renders[2]; r != [2]time.Duration{1045 * sec, 1083 * sec} {
		t.Errorf("the next job held the GPU %v, want from the drain's end (1045s) to 1083s", r)
	}
}
