package presence

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// procUse is one process's use of the GPU in one sample: the percentage
// of the time its work kept the GPU busy over the sample's interval
// (nvidia-smi pmon's sm, the 3D engine's Utilization Percentage).
type procUse struct {
	pid     int32
	name    string // as the source shows it; may be empty
	percent int
}

// usageTracker keeps, for each process, its current run of samples at or
// over the threshold. A sample under it (a `-` counts as 0) ends the
// process's run, and so does a missing sample: two samples of a run are
// at most gap apart. A process is busy once its run has need samples and
// its last one is recent. The source also records here why it gives no
// samples (down).
type usageTracker struct {
	percent int
	need    int
	gap     time.Duration

	mu   sync.Mutex
	runs map[int32]*usageRun
	err  error // why the source gives no samples now; nil while it does
}

type usageRun struct {
	name    string
	count   int       // samples at or over percent, in a row
	last    time.Time // the newest of them
	percent int       // the newest of them
}

// newUsageTracker judges samples taken every interval: a process must
// stay at or over percent in every sample for at least dur, the first
// sample counting for the interval before it (what the source averages
// over). Two samples of a run are at most one and a half intervals
// apart.
func newUsageTracker(percent int, dur, interval time.Duration) *usageTracker {
	need := int((dur + interval - 1) / interval)
	return &usageTracker{percent: percent, need: max(need, 1), gap: interval * 3 / 2, runs: map[int32]*usageRun{}}
}

// observe records one process's sample, taken at now.
func (t *usageTracker) observe(now time.Time, u procUse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u.percent < t.percent {
		delete(t.runs, u.pid)
		return
	}
	r := t.runs[u.pid]
	if r == nil || now.Sub(r.last) > t.gap {
		r = &usageRun{}
		t.runs[u.pid] = r
	}
	r.name, r.count, r.last, r.percent = u.name, r.count+1, now, u.percent
}

// busy lists the processes busy at now, the busiest first.
func (t *usageTracker) busy(now time.Time) []procUse {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []procUse
	for pid, r := range t.runs {
		switch {
		case now.Sub(r.last) > t.gap:
			delete(t.runs, pid)
		case r.count >= t.need:
			out = append(out, procUse{pid: pid, name: r.name, percent: r.percent})
		}
	}
	slices.SortFunc(out, func(a, b procUse) int {
		return cmp.Or(cmp.Compare(b.percent, a.percent), cmp.Compare(a.pid, b.pid))
	})
	return out
}

// down records why the source gives no samples (nil: it gives them
// again); the runs it had end.
func (t *usageTracker) down(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.err = err
	if err != nil {
		clear(t.runs)
	}
}

// state is why the source gives no samples, nil while it does.
func (t *usageTracker) state() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}
