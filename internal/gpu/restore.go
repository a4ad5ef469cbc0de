package gpu

import (
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// restoreTimeout bounds the start-up's read of the hold store: past it,
// no hold is restored and the start-up goes on.
const restoreTimeout = 10 * time.Second

// loadHolds reads the hold store at start-up and returns the hold that was
// in place when Caddy last stopped: the latest granted whose lease has not
// run out (holds are exclusive, so any other is a leftover, and is
// deleted). The read runs in a goroutine of its own that nobody waits
// for, so that a store that never answers holds up neither the start-up
// (past restoreTimeout) nor Close.
func (g *GPU) loadHolds(c *Config) *SavedHold {
	type result struct {
		saved []SavedHold
		err   error
	}
	done := make(chan result, 1)
	go func() {
		saved, err := c.HoldStore.Load()
		done <- result{saved, err}
	}()
	t := time.NewTimer(restoreTimeout)
	defer t.Stop()
	var r result
	select {
	case r = <-done:
	case <-t.C:
		g.log().Error("reading the saved holds took longer than "+restoreTimeout.String()+": none is restored", zap.Error(r.err))
		return nil
	case <-g.ctx.Done():
		return nil
	}
	if r.err != nil {
		g.log().Error("reading the saved holds: none is restored", zap.Error(r.err))
		return nil
	}
	live, stale := latestLive(r.saved, time.Now())
	for _, id := range stale {
		g.spawn(func() {
			if err := c.HoldStore.Delete(id); err != nil {
				g.log().Warn("deleting a leftover saved hold", zap.String("hold", id), zap.Error(err))
			}
		})
	}
	return live
}

// latestLive picks, among saved, the latest granted hold whose lease runs
// past now, and the ids of the others.
func latestLive(saved []SavedHold, now time.Time) (live *SavedHold, stale []string) {
	for i := range saved {
		s := &saved[i]
		switch {
		case !s.ExpiresAt.After(now):
			stale = append(stale, s.ID)
		case live == nil || s.Since.After(live.Since):
			if live != nil {
				stale = append(stale, live.ID)
			}
			live = s
		default:
			stale = append(stale, s.ID)
		}
	}
	return live, stale
}

// restoreHold takes the hold live again, keeping its id and lease, and
// reports whether it did. The GPU, which the start-up holds, passes to the
// hold directly: the hold's request is queued (the only exclusive one, as
// the others wait for the start-up) and the start-up's released, so no LLM
// request gets in between. The engines are emptied for the hold in the
// background, and the image engines probed once it ends.
func (g *GPU) restoreHold(c *Config, live *SavedHold) bool {
	granted := make(chan error, 1)
	if !g.spawn(func() { granted <- g.lock.AcquireExclusive(g.ctx, lock.ExternalHold) }) {
		g.endStartUp(c, true)
		return true // closing
	}
	g.waitLock(func(s lock.Snapshot) bool { return s.HoldWaiting > 0 })
	g.update(func() {
		g.act.probing = false
		g.setJobLocked(nil)
	})
	if !g.lock.ReleaseExclusive(false) {
		g.log().Warn("the restored hold waits its turn: LLM requests were let in before it")
	}
	if err := <-granted; err != nil {
		g.settled()
		return true // closing
	}
	g.grantRestored(c, live)
	if len(c.Images) > 0 {
		// Queued before the image jobs and holds that waited for the
		// start-up are let through: the probe comes next.
		g.spawn(func() {
			if err := g.lock.AcquireExclusive(g.ctx, lock.ImageJob); err == nil {
				g.update(func() { g.markStartUpLocked(c, "start-up probe") })
				g.reconcileAtStart(&use{g: g, c: c})
			}
		})
		g.waitLock(func(s lock.Snapshot) bool { return s.ImageWaiting > 0 })
	} else {
		for _, e := range c.LLMs {
			g.spawn(func() { g.probeLLM(c, e) })
		}
	}
	g.settled()
	return true
}

// waitLock waits, on the change signal, until the lock's snapshot meets
// cond (a request of the start-up's own is queued), or the GPU closes.
func (g *GPU) waitLock(cond func(lock.Snapshot) bool) {
	for {
		ch := g.Changed()
		if cond(g.lock.Snapshot()) || g.ctx.Err() != nil {
			return
		}
		select {
		case <-ch:
		case <-g.ctx.Done():
		}
	}
}

// grantRestored records the restored hold, which has the GPU, and empties
// the engines for it in the background.
func (g *GPU) grantRestored(c *Config, live *SavedHold) {
	u := &use{g: g, c: c}
	h := &Hold{ID: live.ID, Owner: live.Owner, Source: sourceAdmin, Since: live.Since, TTL: live.TTL, g: g, use: u, ready: make(chan struct{})}
	closing := false
	g.update(func() {
		if closing = g.closed; closing {
			return // Close has collected the holds
		}
		// The image engines are probed once the hold ends: until then
		// what they hold is unknown (A1111 loads its checkpoint at
		// launch), so each is freed for the hold.
		for _, e := range c.Images {
			g.runLocked(e.Name()).owed = true
		}
		g.act.holds[h.ID] = h
		h.armLocked(live.ExpiresAt)
	})
	if closing {
		u.end()
		return
	}
	g.metrics.HoldEvent("restored")
	g.log().Info("GPU hold restored", zap.String("hold", h.ID), zap.String("owner", h.Owner),
		zap.Time("expires_at", live.ExpiresAt))
	if !g.spawn(func() {
		defer close(h.ready)
		if err := g.prepareHold(g.ctx, u); err != nil {
			g.log().Warn("emptying the GPU for the restored hold", zap.String("hold", h.ID), zap.Error(err))
		}
	}) {
		close(h.ready)
	}
}
