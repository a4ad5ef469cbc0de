package a1111

import (
	"context"
	"sync"
	"time"
)

// progressWatch follows an A1111's queue by polling /progress: its UI
// generates through Gradio, which tells an outsider nothing else.
type progressWatch struct {
	e      *Engine
	report func(bool, error)

	mu      sync.Mutex
	changed chan struct{}
	count   int
	known   bool
	up      bool
}

// Run polls until ctx ends.
func (w *progressWatch) Run(ctx context.Context) {
	t := time.NewTicker(w.e.progress)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, max(w.e.progress, time.Second))
		p, err := w.e.c.Progress(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.note(p.JobCount, err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// note records a reading and wakes the waiters on a change. A job loading
// its model shows job_count -1: it counts as one.
func (w *progressWatch) note(count int, err error) {
	if count < 0 {
		count = 1
	}
	w.mu.Lock()
	up := err == nil
	report := up != w.up || !w.known && !up
	w.up = up
	change := up && (!w.known || count != w.count)
	if up {
		w.count, w.known = count, true
	}
	if change {
		close(w.changed)
		w.changed = make(chan struct{})
	}
	w.mu.Unlock()
	if report {
		w.report(up, err)
	}
}

// Changed implements Watch.
func (w *progressWatch) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// QueueRemaining implements Watch: job_count at the last reading.
func (w *progressWatch) QueueRemaining() (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count, w.known
}
