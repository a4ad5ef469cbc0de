package gpu

import (
	"context"
	"errors"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/eta"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// state is all the GPU knows beside its lock, in one value under GPU.mu.
//
// GPU.mu is a leaf: while it is held there is no I/O, no waiting, no call
// into the lock, no callback into other code and no blocking channel
// operation. What a change decides to do (unload, free, warm, write the
// hold store) runs after the mutex is released. The lock's own mutex comes
// first: the lock's Transition and Changed run under it and take GPU.mu,
// never the other way round, so Status can read both at one instant
// (lock.View).
type state struct {
	// closed is set once Close has begun: spawn starts nothing more.
	closed bool
	// started is set once the first config's start-up has begun.
	started bool
	// looking is set once the loop that looks at the LLM engines'
	// processes runs (processes.go).
	looking bool
	// settling is closed once the start-up has settled who has the GPU
	// first (a restored hold); until then image jobs and holds wait for
	// it. Nil when not starting up.
	settling chan struct{}

	watches  map[string]*engineWatch   // by image engine name
	presence map[string]*presenceState // by hold_while condition
	recheck  chan struct{}             // closed to have the watches look again (recheckDirect)
	act      activity                  // what holds or waits for the GPU (activity.go)
	runs     map[string]*engineRun     // the engines' records, by name (engines.go)
	mem      memState                  // the card's memory, for vram_admission (memory.go)

	// releasing is the use giving the GPU back, while it does: the Free
	// effect that may run then is a step of its trace. (A waiter granted
	// the GPU just after its wait was cancelled gives it back at once; a
	// free it runs before the last holder has cleared this is traced as
	// that holder's, whose debt it pays.)
	releasing *use

	// abnormal is when LLM use last ended abnormally (zero: not since the
	// LLM engines were last confirmed empty). See emptyLLMs.
	abnormal time.Time

	since      time.Time  // when the lock's current state began
	lastSwitch time.Time  // when the GPU last went from one service to another
	lastUser   lock.State // the last non-idle state

	history history // the recent past (history.go)
	hub     hub     // the live events' queue and subscribers (events.go)

	// learned is what was measured here, for the predictions
	// (learned.go, predict.go).
	learned eta.Learned

	// changed is closed, and cleared, at the next change; nil while
	// nobody asked for it (Changed).
	changed chan struct{}
}

// Changed returns a channel closed at the next change of the GPU's state
// or its lock's: a wait for a status reads the status, and waits on the
// channel it took before while the status is not what it waits for. Once
// the GPU is closed the channel is closed already.
func (g *GPU) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return closedChan
	}
	if g.changed == nil {
		g.changed = make(chan struct{})
		g.watched.Store(true)
	}
	return g.changed
}

// closedChan is what Changed returns once the GPU is closed.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// ErrClosed is returned by WaitStatus for a GPU closed before the status
// met its condition.
var ErrClosed = errors.New("the GPU is closed")

// WaitStatus waits until the status meets cond, and returns it; or
// returns the last status with ctx's error once ctx ends, or ErrClosed
// once the GPU is closed.
func (g *GPU) WaitStatus(ctx context.Context, cond func(Status) bool) (Status, error) {
	for {
		ch := g.Changed()
		st := g.Status()
		if cond(st) {
			return st, nil
		}
		if ch == closedChan {
			return st, ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st, ctx.Err()
		}
	}
}

// touch signals a change of the GPU's state; g.mu is held. It closes
// the channel of Changed and has the live events send the status.
func (g *GPU) touch() {
	if !g.watched.Load() {
		return
	}
	if len(g.hub.subs) > 0 {
		g.hub.dirty = true
		g.hub.poke()
	}
	g.signal()
}

// signal closes the channel of Changed, if anyone took it; g.mu is held.
func (g *GPU) signal() {
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
	g.watched.Store(len(g.hub.subs) > 0)
}

// update runs f under g.mu and signals the change.
func (g *GPU) update(f func()) {
	g.mu.Lock()
	f()
	g.touch()
	g.mu.Unlock()
}

// spawn runs f in a goroutine that Close waits for, and reports whether
// it did: once Close has begun it starts nothing, and the caller does
// what must still be done (a job's end gives the lock back) itself.
func (g *GPU) spawn(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.spawnLocked(f)
}

// spawnLocked is spawn with g.mu held.
func (g *GPU) spawnLocked(f func()) bool {
	if g.closed {
		return false
	}
	g.running.Add(1)
	go func() {
		defer g.running.Done()
		f()
	}()
	return true
}
