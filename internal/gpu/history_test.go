package gpu

import (
	"sync"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

func TestRingIsBoundedAndOrdered(t *testing.T) {
	t.Parallel()
	r := newRing[int](4)
	if _, ok := r.last(); ok {
		t.Fatal("an empty ring has a last entry")
	}
	for i := range 10 {
		r.add(i)
	}
	if got := r.items(); len(got) != 4 || got[0] != 6 || got[3] != 9 {
		t.Fatalf("items %v, want the newest four, oldest first", got)
	}
	r.pop()
	if got := r.items(); len(got) != 3 || got[2] != 8 {
		t.Fatalf("after pop %v", got)
	}
	r.add(10)
	if got := r.items(); len(got) != 4 || got[0] != 6 || got[3] != 10 {
		t.Fatalf("after pop and add %v", got)
	}
}

func TestHistoryMergesShortIdleGaps(t *testing.T) {
	t.Parallel()
	h := newHistory(16)
	t0 := time.Now()
	h.addTransition(t0, lock.Idle, lock.LLM)
	h.addTransition(t0.Add(10*time.Millisecond), lock.LLM, lock.Idle)
	h.addTransition(t0.Add(20*time.Millisecond), lock.Idle, lock.LLM) // merged: one chat after another
	h.addTransition(t0.Add(30*time.Millisecond), lock.LLM, lock.Image)
	h.addTransition(t0.Add(2*time.Second), lock.Image, lock.Idle)
	h.addTransition(t0.Add(4*time.Second), lock.Idle, lock.LLM) // kept: a real idle period
	got := h.view(time.Time{}).Transitions
	want := []string{"idle>llm", "llm>image", "image>idle", "idle>llm"}
	if len(got) != len(want) {
		t.Fatalf("transitions %+v", got)
	}
	for i, tr := range got {
		if tr.From+">"+tr.To != want[i] {
			t.Fatalf("transition %d: %s>%s, want %s", i, tr.From, tr.To, want[i])
		}
	}
	if n := len(h.view(t0.Add(time.Second)).Transitions); n != 2 {
		t.Fatalf("since filter: %d transitions, want 2", n)
	}
}

func TestHistoryIsBoundedUnderConcurrentUse(t *testing.T) {
	t.Parallel()
	g := New("t", &recorder{})
	defer g.Close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				(*effects)(g).Transition(lock.Image, lock.Hold)
				g.addJob(JobEntry{PromptID: "p", Started: time.Now(), Outcome: "success", Seconds: float64(w*1000 + i)})
				g.addEvent("free", time.Millisecond, "")
				if i%100 == 0 {
					g.History(time.Time{})
					g.EstimateWait(time.Second)
				}
			}
		}()
	}
	wg.Wait()
	v := g.History(time.Time{})
	if len(v.Transitions) != historySize || len(v.Jobs) != historySize || len(v.Events) != historySize {
		t.Fatalf("sizes %d %d %d, want %d each", len(v.Transitions), len(v.Jobs), len(v.Events), historySize)
	}
	// Each writer's entries keep their order (Seconds = writer*1000 + i).
	last := map[int]int{}
	for _, j := range v.Jobs {
		w, i := int(j.Seconds)/1000, int(j.Seconds)%1000
		if prev, ok := last[w]; ok && i <= prev {
			t.Fatalf("writer %d: entry %d after %d", w, i, prev)
		}
		last[w] = i
	}
}
