// Package poll paces the polling of an upstream for a change that has no
// event (Ollama's /api/ps emptying, ComfyUI's memory being freed): every
// 5 ms for the first 100 ms, where most changes land, then backing off by
// half each time up to a maximum. A change is then seen at most 5 ms late
// early on, and the upstream is not hammered later.
package poll

import (
	"context"
	"time"
)

const (
	fast       = 5 * time.Millisecond
	fastPeriod = 100 * time.Millisecond
)

// Pacer hands out the waits between polls.
type Pacer struct {
	start time.Time
	next  time.Duration
	max   time.Duration
}

// New returns a pacer whose interval never exceeds max.
func New(max time.Duration) *Pacer {
	return &Pacer{start: time.Now(), next: fast, max: max}
}

// Wait sleeps until the next poll is due, or returns ctx's error.
func (p *Pacer) Wait(ctx context.Context) error {
	d := min(p.next, p.max)
	if time.Since(p.start) >= fastPeriod {
		p.next = min(p.next*3/2, p.max)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Sleep waits d, or until ctx ends, and returns ctx's error if it did.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
