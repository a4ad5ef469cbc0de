package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// Hold is an external holder's exclusive lease on the GPU (a game, a
// training run). It ends when released or when its ttl passes unrenewed.
type Hold struct {
	ID    string
	Owner string
	Since time.Time
	TTL   time.Duration // the lease a renewal without a ttl gets

	g       *GPU
	use     *use // the GPU, from the moment it is held
	mu      sync.Mutex
	expires time.Time
	timer   *time.Timer
	ended   bool
}

// HoldStatus is a hold as the status and the admin API show it.
type HoldStatus struct {
	ID        string    `json:"id"`
	Turnstile string    `json:"turnstile"`
	Owner     string    `json:"owner"`
	Since     time.Time `json:"since"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Status returns the hold as the status shows it.
func (h *Hold) Status() HoldStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return HoldStatus{ID: h.ID, Turnstile: h.g.name, Owner: h.Owner, Since: h.Since, ExpiresAt: h.expires}
}

// ErrHoldPrepare is returned when the GPU could not be emptied for a hold.
var ErrHoldPrepare = errors.New("the GPU could not be emptied for the hold")

// TakeHold waits its turn for the GPU (FIFO with image jobs), empties
// Ollama and ComfyUI, and returns the hold. If ctx ends first (the client
// went away), no hold is left behind.
func (g *GPU) TakeHold(ctx context.Context, owner string, ttl time.Duration) (*Hold, error) {
	start := time.Now()
	if err := g.acquireExclusive(ctx, lock.ExternalHold); err != nil {
		g.metrics.HoldEvent("cancelled")
		return nil, err
	}
	return g.grantHold(ctx, owner, ttl, start)
}

// ErrHoldBusy is returned by TryHold when the GPU cannot be held at once.
var ErrHoldBusy = errors.New("the GPU cannot be held at once")

// TryHold takes a hold only if the GPU can be had without waiting: no LLM
// request in flight, no image job or hold, no free running and nobody
// queued. Otherwise it returns ErrHoldBusy and leaves the queue as it was.
// Once the lock is taken it empties the engines like TakeHold; ctx bounds
// that part.
func (g *GPU) TryHold(ctx context.Context, owner string, ttl time.Duration) (*Hold, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !g.lock.TryAcquireExclusive(lock.ExternalHold) {
		g.metrics.HoldEvent("busy")
		return nil, ErrHoldBusy
	}
	return g.grantHold(ctx, owner, ttl, time.Now())
}

// grantHold empties the GPU, which the caller holds exclusively, for a
// new hold and returns it.
func (g *GPU) grantHold(ctx context.Context, owner string, ttl time.Duration, start time.Time) (*Hold, error) {
	u := &use{g: g, c: g.cfg()}
	if err := g.prepareHold(ctx, u); err != nil {
		u.end()
		g.metrics.HoldEvent("failed")
		return nil, fmt.Errorf("%w: %v", ErrHoldPrepare, err)
	}
	h := &Hold{ID: randomID(), Owner: owner, Since: time.Now(), TTL: ttl, g: g, use: u}
	g.mu.Lock()
	g.act.holds[h.ID] = h
	g.mu.Unlock()
	h.Renew(ttl)
	g.metrics.HoldEvent("granted")
	g.log().Info("GPU held", zap.String("hold", h.ID), zap.String("owner", owner),
		zap.Duration("ttl", ttl), zap.Duration("waited", time.Since(start)))
	return h, nil
}

// prepareHold empties every engine for the hold that u is: the LLM
// engines, and the image engines that may hold memory through frees it
// pays at once. Once that succeeds, the warm model is loaded again after
// the hold.
func (g *GPU) prepareHold(ctx context.Context, u *use) error {
	if err := g.emptyForExclusive(u.c, nil); err != nil {
		return err
	}
	// The lock's debt is settled once nothing is owed; an LLM engine put
	// to sleep is still owed its wake when the hold ends.
	if !g.owed() {
		g.lock.Paid()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	u.warmAfter = true
	return nil
}

// Renew extends the lease to ttl from now; false if the hold has ended.
func (h *Hold) Renew(ttl time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return false
	}
	h.expires = time.Now().Add(ttl)
	if h.timer != nil {
		h.timer.Stop()
	}
	h.timer = time.AfterFunc(ttl, func() { h.g.spawn(func() { h.End("expired") }) })
	return true
}

// End releases the hold once; reason is released, expired or shutdown.
// It reports whether this call ended it.
func (h *Hold) End(reason string) bool {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return false
	}
	h.ended = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	g := h.g
	g.mu.Lock()
	delete(g.act.holds, h.ID)
	g.mu.Unlock()
	g.metrics.HoldEvent(reason)
	g.log().Info("GPU hold ended", zap.String("hold", h.ID), zap.String("owner", h.Owner),
		zap.String("reason", reason), zap.Duration("held", time.Since(h.Since)))
	h.use.end()
	return true
}

// FindHold returns the hold with this id, or nil.
func (g *GPU) FindHold(id string) *Hold {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.act.holds[id]
}

// endHolds ends every hold; Caddy is stopping.
func (g *GPU) endHolds() {
	g.mu.Lock()
	hs := make([]*Hold, 0, len(g.act.holds))
	for _, h := range g.act.holds {
		hs = append(hs, h)
	}
	g.mu.Unlock()
	for _, h := range hs {
		h.End("shutdown")
	}
}
