package gpu

import (
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// effects is the GPU as its lock sees it: what the lock orders done, and
// what it tells of its changes. A type of its own, so that these stay off
// the GPU's API.
type effects GPU

// Free implements lock.Effects: before the GPU leaves exclusive use, the
// image engines that ran are freed (confirmed), then the LLM engines that
// were put to sleep are woken (confirmed).
func (x *effects) Free() {
	g := (*GPU)(x)
	ctx, span := g.startFree()
	done := g.free(ctx)
	if !done {
		span.SetStatus(codes.Error, "an image engine may still hold memory, or an LLM engine still sleeps")
	}
	span.End()
}

// Transition implements lock.Effects. It runs under the lock's mutex and
// takes g.mu, which comes after it.
func (x *effects) Transition(from, to lock.State) {
	g := (*GPU)(x)
	now := time.Now()
	c := g.cfg()
	g.mu.Lock()
	g.since = now
	if to != lock.Idle {
		if g.lastUser != lock.Idle && g.lastUser != to {
			g.lastSwitch = now
		}
		g.lastUser = to
	}
	if to == lock.LLM {
		g.resumeLLM(c)
	}
	g.history.addTransition(now, from, to)
	g.mu.Unlock()
	if log := g.log(); log.Core().Enabled(zap.DebugLevel) {
		log.Debug("lock transition", zap.Stringer("from", from), zap.Stringer("to", to))
	}
}

// Changed implements lock.Observer. It runs under the lock's mutex, on
// every LLM request's way in and out: while nobody waits for a change or
// subscribes to the events, it does nothing more than read a flag.
func (x *effects) Changed(snap func() lock.Snapshot) {
	g := (*GPU)(x)
	if !g.watched.Load() {
		return
	}
	g.mu.Lock()
	if len(g.hub.subs) > 0 {
		g.hub.queue(change{event: "status", snap: snap()})
	}
	g.signal()
	g.mu.Unlock()
}

// Interface guards
var (
	_ lock.Effects  = (*effects)(nil)
	_ lock.Observer = (*effects)(nil)
)
