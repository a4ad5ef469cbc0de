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
	ID     string
	Owner  string
	Source string // sourceAdmin, or sourcePresence (hold_while: no lease, not stored)
	Since  time.Time
	TTL    time.Duration // the lease a renewal without a ttl gets

	g   *GPU
	use *use // the GPU, from the moment it is held
	// ready is closed once use may be ended: at once for a new hold, once
	// the engines are emptied for a restored one (nil: ready).
	ready chan struct{}

	// Under g.mu: the lease, its timer, and whether the hold has ended.
	expires time.Time
	timer   *time.Timer
	ended   bool

	// storeMu orders the hold's writes to the hold store, so that no
	// renewal's save lands after the end's delete. It is held across the
	// store's I/O, so it cannot be g.mu.
	storeMu sync.Mutex
}

// HoldStore keeps holds across restarts of Caddy. Its methods are called
// without the GPU's locks held; an error is logged, and the hold goes on
// in memory.
type HoldStore interface {
	// Save writes the hold's record, replacing any with its ID.
	Save(SavedHold) error
	// Delete removes the record of the hold with this ID; a missing
	// record is not an error.
	Delete(id string) error
	// Load returns every record.
	Load() ([]SavedHold, error)
}

// SavedHold is a hold as the hold store keeps it.
type SavedHold struct {
	ID        string
	Owner     string
	TTL       time.Duration // the lease a renewal without a ttl gets
	Since     time.Time
	ExpiresAt time.Time
}

// HoldStatus is a hold as the status and the admin API show it.
type HoldStatus struct {
	ID        string    `json:"id"`
	Turnstile string    `json:"turnstile"`
	Owner     string    `json:"owner"`
	Source    string    `json:"source"` // admin (the hold routes) or presence (hold_while)
	Since     time.Time `json:"since"`
	ExpiresAt time.Time `json:"expires_at,omitzero"` // none for a presence hold
}

// Where a hold comes from.
const (
	sourceAdmin    = "admin"
	sourcePresence = "presence"
)

// Presence reports whether h is a presence hold (hold_while), which has
// no lease and ends when its condition clears.
func (h *Hold) Presence() bool { return h.Source == sourcePresence }

// Status returns the hold as the status shows it.
func (h *Hold) Status() HoldStatus {
	h.g.mu.Lock()
	defer h.g.mu.Unlock()
	return h.statusLocked()
}

// statusLocked is Status with g.mu held.
func (h *Hold) statusLocked() HoldStatus {
	return HoldStatus{ID: h.ID, Turnstile: h.g.name, Owner: h.Owner, Source: h.Source, Since: h.Since, ExpiresAt: h.expires}
}

// ErrHoldPrepare is returned when the GPU could not be emptied for a hold.
var ErrHoldPrepare = errors.New("the GPU could not be emptied for the hold")

// TakeHold waits its turn for the GPU (FIFO with image jobs), empties
// Ollama and ComfyUI, and returns the hold. If ctx ends first (the client
// went away), no hold is left behind.
func (g *GPU) TakeHold(ctx context.Context, owner string, ttl time.Duration) (*Hold, error) {
	start := time.Now()
	w := waiterFrom(ctx)
	w.Owner, w.lease = owner, ttl
	ctx = WithWaiter(ctx, w)
	span := g.startWait(ctx, &traced{req: linkOf(ctx), kind: "hold"})
	err := g.acquireExclusive(ctx, lock.ExternalHold)
	EndSpan(span, err)
	if err != nil {
		g.metrics.HoldEvent("cancelled")
		return nil, err
	}
	return g.grantHold(ctx, owner, ttl, start, sourceAdmin)
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
	return g.grantHold(ctx, owner, ttl, time.Now(), sourceAdmin)
}

// grantHold empties the GPU, which the caller holds exclusively, for a
// new hold and returns it. A presence hold has no lease and is not stored:
// its condition is looked at again after a restart.
func (g *GPU) grantHold(ctx context.Context, owner string, ttl time.Duration, start time.Time, source string) (*Hold, error) {
	u := &use{g: g, c: g.cfg(), tr: traced{req: linkOf(ctx), kind: "hold"}}
	if err := g.prepareHold(ctx, u); err != nil {
		u.end()
		g.metrics.HoldEvent("failed")
		return nil, fmt.Errorf("%w: %v", ErrHoldPrepare, err)
	}
	h := &Hold{ID: randomID(), Owner: owner, Source: source, Since: time.Now(), TTL: ttl, g: g, use: u}
	u.tr.detached = true // ended by a later request, or its lease
	g.mu.Lock()
	closing := g.closed
	if !closing {
		g.act.holds[h.ID] = h
		g.touch()
	}
	g.mu.Unlock()
	if closing { // Close has collected the holds: this one ends here
		h.ended = true
		u.end()
		return nil, g.ctx.Err()
	}
	if source == sourcePresence {
		g.metrics.HoldEvent("presence")
	}
	// The grant is told before the lease is armed: a short lease may run
	// out at once, and its end must not be told first.
	g.metrics.HoldEvent("granted")
	g.log().Info("GPU held", zap.String("hold", h.ID), zap.String("owner", owner),
		zap.Duration("ttl", ttl), zap.Duration("waited", time.Since(start)))
	if source != sourcePresence {
		h.Renew(ttl)
	}
	return h, nil
}

// prepareHold empties every engine for the hold that u is: the LLM
// engines, and the image engines that may hold memory through frees it
// pays at once. Once that succeeds, the warm model is loaded again after
// the hold.
func (g *GPU) prepareHold(ctx context.Context, u *use) error {
	sctx, span := u.tr.start(g, "gpu_turnstile.unload")
	if waiterFrom(ctx).Force {
		sctx = withForce(sctx)
	}
	_, err := g.emptyForExclusive(sctx, u.c, nil, "")
	EndSpan(span, err)
	if err != nil {
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

// Renew extends the lease to ttl from now, and saves it in the hold
// store; false if the hold has ended.
func (h *Hold) Renew(ttl time.Duration) bool {
	if !h.arm(time.Now().Add(ttl)) {
		return false
	}
	h.save()
	return true
}

// arm sets the lease to end at expires; false if the hold has ended.
func (h *Hold) arm(expires time.Time) bool {
	g := h.g
	g.mu.Lock()
	defer g.mu.Unlock()
	return h.armLocked(expires)
}

// armLocked is arm with g.mu held.
func (h *Hold) armLocked(expires time.Time) bool {
	if h.ended {
		return false
	}
	h.expires = expires
	if h.timer != nil {
		h.timer.Stop()
	}
	h.timer = time.AfterFunc(time.Until(expires), func() { h.g.spawn(func() { h.End("expired") }) })
	h.g.touch()
	return true
}

// save writes the hold's lease to the hold store, unless it has ended.
func (h *Hold) save() {
	store := h.g.holdStore()
	if store == nil {
		return
	}
	h.storeMu.Lock()
	defer h.storeMu.Unlock()
	h.g.mu.Lock()
	rec := SavedHold{ID: h.ID, Owner: h.Owner, TTL: h.TTL, Since: h.Since, ExpiresAt: h.expires}
	ended := h.ended
	h.g.mu.Unlock()
	if ended {
		return
	}
	if err := store.Save(rec); err != nil {
		h.g.log().Warn("saving the hold: it will not survive a restart", zap.String("hold", h.ID), zap.Error(err))
	}
}

// forget deletes the hold's record from the hold store.
func (h *Hold) forget() {
	store := h.g.holdStore()
	if store == nil {
		return
	}
	h.storeMu.Lock()
	defer h.storeMu.Unlock()
	if err := store.Delete(h.ID); err != nil {
		h.g.log().Warn("deleting the saved hold: a restart within its ttl may take it again", zap.String("hold", h.ID), zap.Error(err))
	}
}

func (g *GPU) holdStore() HoldStore {
	if c := g.cfg(); c != nil {
		return c.HoldStore
	}
	return nil
}

// End releases the hold once; reason is released, expired or shutdown.
// It reports whether this call ended it; the GPU is given back after, in
// the background. A hold ended by shutdown stays in
// the hold store, to be taken again when Caddy starts within its ttl.
func (h *Hold) End(reason string) bool {
	g := h.g
	g.mu.Lock()
	if h.ended {
		g.mu.Unlock()
		return false
	}
	h.ended = true
	if h.timer != nil {
		h.timer.Stop()
	}
	delete(g.act.holds, h.ID)
	g.touch()
	g.mu.Unlock()
	g.metrics.HoldEvent(reason)
	g.log().Info("GPU hold ended", zap.String("hold", h.ID), zap.String("owner", h.Owner),
		zap.String("reason", reason), zap.Duration("held", time.Since(h.Since)))
	if reason != "shutdown" && !h.Presence() {
		h.forget()
	}
	// The GPU is given back (a free, a warm-up) on the GPU's own
	// goroutine: the caller (a DELETE, the presence watcher) returns at
	// once. Once Close has begun, spawn refuses, and it is done here,
	// where the context's end makes it quick.
	release := func() {
		if h.ready != nil {
			<-h.ready
		}
		h.use.end()
	}
	if !g.spawn(release) {
		release()
	}
	return true
}

// FindHold returns the hold with this id, or nil.
func (g *GPU) FindHold(id string) *Hold {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.act.holds[id]
}

// holdList returns the holds; g.mu is held.
func (g *GPU) holdList() []*Hold {
	hs := make([]*Hold, 0, len(g.act.holds))
	for _, h := range g.act.holds {
		hs = append(hs, h)
	}
	return hs
}
