package eta

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }

// figures: jobs of workflow "w" run 10 s, of "v" 20 s; ollama unloads in
// 2 s, comfy frees in 1 s, vllm wakes in 3 s, a1111 prepares in 4 s.
func figures() *Learned {
	l := &Learned{}
	l.AddJob("w", sec(10))
	l.AddJob("v", sec(20))
	l.AddJob("v", sec(20))
	l.AddStep("ollama", Unload, sec(2))
	l.AddStep("comfy", Free, sec(1))
	l.AddStep("vllm", Wake, sec(3))
	l.AddStep("a1111", Prepare, sec(4))
	return l
}

// at is t0 plus n seconds; -1 stands for unknown.
func at(n float64) time.Time {
	if n < 0 {
		return time.Time{}
	}
	return t0.Add(sec(n))
}

func TestPredict(t *testing.T) {
	job := func(w string) Waiter { return Waiter{Kind: Job, Engine: "comfy", Workflow: w} }
	running := Holder{Kind: Job, Engine: "comfy", Workflow: "w", Started: t0.Add(-sec(4)), Ran: t0.Add(-sec(4))}
	ollama := []LLMEngine{{Name: "ollama", Loaded: true}}
	cases := []struct {
		name  string
		s     Situation
		queue []Place
		llm   Place
	}{
		{name: "idle: an LLM request starts now",
			s:   Situation{LLMWaiting: true},
			llm: Place{1, at(0)}},
		{name: "idle, no waiter",
			s: Situation{}},
		{name: "a job runs 4 s of 10: the LLM waiters start after it and its free",
			s:   Situation{Holder: running, LLMWaiting: true},
			llm: Place{1, at(7)}},
		{name: "a job overruns its median: the rest counts as none",
			s:   Situation{Holder: Holder{Kind: Job, Engine: "comfy", Workflow: "w", Started: t0.Add(-sec(30)), Ran: t0.Add(-sec(30))}, LLMWaiting: true},
			llm: Place{1, at(1)}},
		{name: "a job being readied: its unload left, then its run",
			s: Situation{Holder: Holder{Kind: Job, Engine: "comfy", Workflow: "w", Started: t0.Add(-sec(1))},
				LLMs: ollama, LLMWaiting: true},
			// 2 s unload, 1 gone: 1 + 10 run + 1 free.
			llm: Place{1, at(12)}},
		{name: "image waiters are handed the GPU in turn, the LLM waiters after them",
			s:     Situation{Holder: running, Queue: []Waiter{job("w"), job("v")}, LLMWaiting: true},
			queue: []Place{{1, at(6)}, {2, at(16)}},
			llm:   Place{3, at(37)}},
		{name: "a workflow never measured: any job's median",
			s:     Situation{Holder: running, Queue: []Waiter{job("new"), job("w")}},
			queue: []Place{{1, at(6)}, {2, at(26)}}},
		{name: "no job measured yet: nothing after the running job is known",
			s:     Situation{Holder: running, Queue: []Waiter{job("w")}, LLMWaiting: true},
			queue: []Place{{1, time.Time{}}},
			llm:   Place{2, time.Time{}}},
		{name: "presence holds go first; nothing after one is known",
			s:     Situation{Holder: running, Queue: []Waiter{job("w"), {Kind: Presence}, {Kind: Hold, Lease: sec(5)}, {Kind: Presence}}},
			queue: []Place{{3, time.Time{}}, {1, at(6)}, {4, time.Time{}}, {2, time.Time{}}}},
		{name: "a hold holds until its lease ends, a waiting hold for its lease",
			s: Situation{Holder: Holder{Kind: Hold, Expires: at(30)}, Queue: []Waiter{{Kind: Hold, Lease: sec(60)}, job("w")},
				LLMWaiting: true},
			queue: []Place{{1, at(30)}, {2, at(90)}},
			llm:   Place{3, at(101)}},
		{name: "a hold without a lease leaves what follows unknown",
			s:     Situation{Holder: Holder{Kind: Hold}, Queue: []Waiter{job("w")}},
			queue: []Place{{1, time.Time{}}}},
		{name: "LLM use now: the first image waiter starts once it drains, the next after the first's unload and run",
			s:     Situation{Holder: Holder{Kind: LLM}, LLMs: ollama, Queue: []Waiter{job("w"), job("w")}},
			queue: []Place{{1, at(0)}, {2, at(12)}}},
		{name: "the streak bound gives the LLM waiters a turn between image jobs",
			s: Situation{Holder: running, LLMs: []LLMEngine{{Name: "ollama"}}, Queue: []Waiter{job("w"), job("w"), job("w")},
				LLMWaiting: true, Streak: 1, MaxStreak: 2},
			// job 1 at 6 (streak 2), then free 1 s: LLM at 17; job 2 after
			// the unload 2 s: 17+2 = runs to 29, then 3 at 29.
			queue: []Place{{1, at(6)}, {3, at(17)}, {4, at(29)}},
			llm:   Place{2, at(17)}},
		{name: "a presence hold goes before the streak's LLM turn",
			s:     Situation{Holder: running, Queue: []Waiter{{Kind: Presence}}, LLMWaiting: true, Streak: 5, MaxStreak: 2},
			queue: []Place{{1, at(6)}},
			llm:   Place{2, time.Time{}}},
		{name: "a free under way: the LLM waiters after it",
			s:   Situation{Freeing: true, OwesFree: []string{"comfy"}, LLMWaiting: true},
			llm: Place{1, at(1)}},
		{name: "a free under way, an image waiter queued meanwhile: served after the free",
			s:     Situation{Freeing: true, OwesFree: []string{"comfy"}, Queue: []Waiter{job("w")}, LLMWaiting: true},
			queue: []Place{{1, at(1)}},
			llm:   Place{2, at(12)}},
		{name: "an engine put to sleep is woken before LLM use",
			s: Situation{Holder: Holder{Kind: Job, Engine: "a1111", Workflow: "w", Started: at(0)},
				LLMs: []LLMEngine{{Name: "vllm", Loaded: true, Sleeps: true}}, LLMWaiting: true},
			// readied: prepare 4 + run 10, then free (none learned for
			// a1111) and the wake 3.
			llm: Place{1, at(17)}},
		{name: "an engine asleep now is woken after the next free",
			s:   Situation{Holder: Holder{Kind: Hold, Expires: at(5)}, LLMs: []LLMEngine{{Name: "vllm", Asleep: true, Sleeps: true}}, LLMWaiting: true},
			llm: Place{1, at(8)}},
		{name: "A1111's prepare counts before its job",
			s: Situation{Holder: running, Queue: []Waiter{{Kind: Job, Engine: "a1111", Workflow: "w"}}, LLMWaiting: true},
			// at 6; prepare 4 + 10 = 20; free of comfy 1 (a1111 unlearned).
			queue: []Place{{1, at(6)}},
			llm:   Place{2, at(21)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := figures()
			if tc.name == "no job measured yet: nothing after the running job is known" {
				l = &Learned{}
			}
			tc.s.Now = t0
			p := Predict(l, tc.s)
			if len(p.Queue) != len(tc.queue) {
				t.Fatalf("queue %v, want %v", p.Queue, tc.queue)
			}
			for i := range tc.queue {
				if !same(p.Queue[i], tc.queue[i]) {
					t.Errorf("waiter %d: %s, want %s", i, show(p.Queue[i]), show(tc.queue[i]))
				}
			}
			if !same(p.LLM, tc.llm) {
				t.Errorf("LLM waiters: %s, want %s", show(p.LLM), show(tc.llm))
			}
		})
	}
}

func same(a, b Place) bool { return a.Position == b.Position && a.Start.Equal(b.Start) }

func show(p Place) string {
	if !p.Known() {
		return "#" + itoa(p.Position) + " unknown"
	}
	return "#" + itoa(p.Position) + " at +" + p.Start.Sub(t0).String()
}

func itoa(n int) string { return time.Duration(n).String()[:len(time.Duration(n).String())-2] }
