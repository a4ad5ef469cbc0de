package gpu

import (
	"sync"
	"time"
)

// waitTracker remembers when each waiting request began to wait, for the
// status' oldest_wait_seconds. Only waiting requests pay for it.
type waitTracker struct {
	mu    sync.Mutex
	next  uint64
	since map[uint64]time.Time
}

func (w *waitTracker) add(t time.Time) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since == nil {
		w.since = map[uint64]time.Time{}
	}
	w.next++
	w.since[w.next] = t
	return w.next
}

func (w *waitTracker) done(id uint64) {
	w.mu.Lock()
	delete(w.since, id)
	w.mu.Unlock()
}

func (w *waitTracker) oldest() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var o time.Time
	for _, t := range w.since {
		if o.IsZero() || t.Before(o) {
			o = t
		}
	}
	return o
}
