//go:build !linux

package gputest

import (
	"context"
	"sync"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
)

// exitWatch tells whether one process has exited, by reading the process
// table: the process is gone when no process has its PID and start time.
type exitWatch struct {
	mu   sync.Mutex
	id   procs.ID
	gone bool
}

// watchProcess watches the process id names.
func watchProcess(id procs.ID) *exitWatch {
	return &exitWatch{id: id, gone: id.PID <= 0 || id.Start == 0}
}

// exited reports whether the process has exited, without waiting.
func (w *exitWatch) exited() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.gone {
		if tb, err := procs.Snapshot(context.Background()); err == nil && !tb.Alive(w.id) {
			w.gone = true
		}
	}
	return w.gone
}

// close stops watching.
func (w *exitWatch) close() {
	w.mu.Lock()
	w.gone = true
	w.mu.Unlock()
}

// waitExit waits period: the table has no way to wake it at an exit.
func waitExit(ws []*exitWatch, period time.Duration) { time.Sleep(period) }
