package turnstile

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// maxHoldTTL bounds one hold's lease; a holder renews to keep it longer.
const maxHoldTTL = 24 * time.Hour

// defaultHoldTTL applies when a hold request names no ttl.
const defaultHoldTTL = 5 * time.Minute

// hold is an external holder's exclusive lease on the GPU (a game, a
// training run). It ends when released or when its ttl passes unrenewed.
type hold struct {
	ID      string
	Owner   string
	Since   time.Time
	TTL     time.Duration // the lease a renewal without a ttl gets
	ts      *turnstile
	mu      sync.Mutex
	expires time.Time
	timer   *time.Timer
	ended   bool
}

type holdStatus struct {
	ID        string    `json:"id"`
	Turnstile string    `json:"turnstile"`
	Owner     string    `json:"owner"`
	Since     time.Time `json:"since"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (h *hold) status() holdStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return holdStatus{ID: h.ID, Turnstile: h.ts.name, Owner: h.Owner, Since: h.Since, ExpiresAt: h.expires}
}

var errHoldPrepare = errors.New("the GPU could not be emptied for the hold")

// takeHold waits its turn for the GPU (FIFO with image jobs), empties
// Ollama and ComfyUI, and returns the hold. If ctx ends first (the client
// went away), no hold is left behind.
func (ts *turnstile) takeHold(ctx context.Context, owner string, ttl time.Duration) (*hold, error) {
	start := time.Now()
	if err := ts.acquireExclusive(ctx, lock.Hold); err != nil {
		holdEvents.WithLabelValues(ts.name, "cancelled").Inc()
		return nil, err
	}
	c := ts.cfg()
	err := ts.unloadOllama(c)
	if err == nil && c.comfy != nil {
		ts.Free()
		ts.lock.Paid()
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		ts.releaseExclusive(false, false)
		holdEvents.WithLabelValues(ts.name, "failed").Inc()
		return nil, fmt.Errorf("%w: %v", errHoldPrepare, err)
	}
	h := &hold{ID: randomID(), Owner: owner, Since: time.Now(), TTL: ttl, ts: ts}
	ts.mu.Lock()
	ts.holds[h.ID] = h
	ts.mu.Unlock()
	h.renew(ttl)
	holdEvents.WithLabelValues(ts.name, "granted").Inc()
	ts.log().Info("GPU held", zap.String("hold", h.ID), zap.String("owner", owner),
		zap.Duration("ttl", ttl), zap.Duration("waited", time.Since(start)))
	return h, nil
}

// renew extends the lease to ttl from now; false if the hold has ended.
func (h *hold) renew(ttl time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return false
	}
	h.expires = time.Now().Add(ttl)
	if h.timer != nil {
		h.timer.Stop()
	}
	h.timer = time.AfterFunc(ttl, func() { h.end("expired") })
	return true
}

// end releases the hold once; reason is released, expired or shutdown.
func (h *hold) end(reason string) bool {
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
	ts := h.ts
	ts.mu.Lock()
	delete(ts.holds, h.ID)
	ts.mu.Unlock()
	holdEvents.WithLabelValues(ts.name, reason).Inc()
	ts.log().Info("GPU hold ended", zap.String("hold", h.ID), zap.String("owner", h.Owner),
		zap.String("reason", reason), zap.Duration("held", time.Since(h.Since)))
	ts.releaseExclusive(false, true)
	return true
}

// findHold returns the hold with this id in any turnstile.
func findHold(id string) *hold {
	var found *hold
	turnstiles.Range(func(_, v any) bool {
		ts := v.(*turnstile)
		ts.mu.Lock()
		found = ts.holds[id]
		ts.mu.Unlock()
		return found == nil
	})
	return found
}

// endHolds ends every hold; Caddy is stopping.
func (ts *turnstile) endHolds() {
	ts.mu.Lock()
	hs := make([]*hold, 0, len(ts.holds))
	for _, h := range ts.holds {
		hs = append(hs, h)
	}
	ts.mu.Unlock()
	for _, h := range hs {
		h.end("shutdown")
	}
}
