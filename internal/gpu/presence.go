package gpu

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/presence"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// presenceKind is the lock kind of a presence hold.
const presenceKind = lock.PresenceHold

// presenceState is one presence condition (hold_while) and the hold it
// has engaged. It is keyed by the sampler's description, so that a reload
// with the same condition keeps its hold.
type presenceState struct {
	key    string
	cancel context.CancelFunc // ends the watch
	w      *presence.Watcher

	// Under g.mu:
	acquiring context.CancelFunc // set while a hold is being taken
	hold      *Hold
	shown     PresenceStatus // what the watcher last reported, for the status
}

// PresenceStatus is one hold_while condition as the status shows it.
type PresenceStatus struct {
	Condition string `json:"condition"`
	Engaged   bool   `json:"engaged"`
	Owner     string `json:"owner,omitempty"`
	Error     string `json:"error,omitempty"`
}

// watchPresence starts a watch for each hold_while condition of c, stops
// those of the config before, and ends the hold of a condition that c no
// longer has. A condition kept across a reload keeps its hold: its new
// watch engages again at once (a no-op) or releases it once clear. It
// runs under g.mu.
func (g *GPU) watchPresence(c *Config) {
	old := g.presence
	g.presence = map[string]*presenceState{}
	for _, s := range c.Presence {
		st := &presenceState{key: s.String()}
		st.shown.Condition = st.key
		if prev := old[st.key]; prev != nil {
			st.hold, prev.hold = prev.hold, nil
		}
		ctx, cancel := context.WithCancel(g.ctx)
		st.cancel = cancel
		st.w = presence.NewWatcher(s, c.PresencePoll, c.HoldReleaseAfter, g.log(),
			func(owner string) { g.engagePresence(st, owner) }, func() { g.releasePresence(st) })
		// What the watcher reports is part of the status: it is copied
		// in after each sample, which signals (a no-op for the events
		// when nothing changed).
		st.w.OnSample(func() { g.showPresence(st) })
		if st.hold != nil {
			st.w.Resume(st.hold.Owner)
		}
		g.presence[st.key] = st
		g.spawnLocked(func() { st.w.Run(ctx) })
	}
	for key, prev := range old {
		prev.cancel()
		if _, kept := g.presence[key]; !kept {
			if h := prev.hold; h != nil {
				prev.hold = nil
				g.spawnLocked(func() { h.End("released") })
			}
		}
		// A hold still being taken for the old state would land where
		// nothing releases it: it is given back as it comes, and a kept
		// condition's new watch takes it again.
		prev.stopAcquiring()
	}
}

// stopAcquiring stops the taking of a hold for st, if one is being
// taken; g.mu is held.
func (st *presenceState) stopAcquiring() {
	if st.acquiring != nil {
		st.acquiring()
		st.acquiring = nil
	}
}

// engagePresence takes a presence hold for owner, unless the condition
// has one or is taking one. Taking it waits its turn (at the front of the
// queue) and empties the engines, so it runs in its own goroutine.
func (g *GPU) engagePresence(st *presenceState, owner string) {
	g.showPresence(st)
	g.mu.Lock()
	defer g.mu.Unlock()
	if st.hold != nil || st.acquiring != nil {
		return
	}
	ctx, cancel := context.WithCancel(g.ctx)
	st.acquiring = cancel
	if !g.spawnLocked(func() { g.engaged(st, ctx, cancel, owner) }) {
		st.acquiring = nil
		cancel()
	}
}

// engaged takes the presence hold for st, and keeps it unless st was
// released meanwhile.
func (g *GPU) engaged(st *presenceState, ctx context.Context, cancel context.CancelFunc, owner string) {
	h, err := g.takePresence(ctx, owner)
	g.mu.Lock()
	released := st.acquiring == nil
	if !released {
		st.acquiring = nil
		if err == nil {
			st.hold = h
		}
	}
	g.mu.Unlock()
	cancel()
	switch {
	case released && h != nil:
		h.End("released")
	case !released && err != nil:
		g.log().Error("presence hold not taken", zap.String("owner", owner), zap.Error(err))
	}
}

// releasePresence ends the condition's hold, or stops taking it.
func (g *GPU) releasePresence(st *presenceState) {
	g.showPresence(st)
	g.mu.Lock()
	st.stopAcquiring()
	h := st.hold
	st.hold = nil
	g.mu.Unlock()
	if h != nil {
		h.End("released")
	}
}

// takePresence waits for the GPU at the front of the queue, empties the
// engines and returns a hold with no lease: it lasts until released.
func (g *GPU) takePresence(ctx context.Context, owner string) (*Hold, error) {
	start := time.Now()
	ctx = WithWaiter(ctx, Waiter{Owner: owner})
	if err := g.acquireExclusive(ctx, presenceKind); err != nil {
		return nil, err
	}
	return g.grantHold(ctx, owner, 0, start, sourcePresence)
}

// presenceStatus lists the hold_while conditions, those that cannot run
// here first; g.mu is held.
func (g *GPU) presenceStatus(c *Config) []PresenceStatus {
	out := make([]PresenceStatus, 0, len(g.presence))
	if c != nil {
		for cond, why := range c.PresenceOff {
			out = append(out, PresenceStatus{Condition: cond, Error: why})
		}
	}
	for _, st := range g.presence {
		out = append(out, st.shown)
	}
	return out
}

// showPresence copies what st's watcher reports into the GPU's state,
// read outside g.mu, and signals the change.
func (g *GPU) showPresence(st *presenceState) {
	owner, engaged, err := st.w.Status()
	ps := PresenceStatus{Condition: st.key, Engaged: engaged, Owner: owner}
	if err != nil {
		ps.Error = err.Error()
	}
	g.update(func() { st.shown = ps })
}
