package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/eta"
)

// markAbnormal records that LLM use has just ended in a way that may leave
// a load in flight that the LLM engine's listing does not show.
func (g *GPU) markAbnormal() {
	now := time.Now()
	g.mu.Lock()
	g.abnormal = now
	g.mu.Unlock()
}

// NoteLLMEnd marks the end of a proxied LLM request as abnormal if the
// client went away or the upstream failed. It costs no allocation.
func (g *GPU) NoteLLMEnd(ctx context.Context, err error) {
	if err != nil || ctx.Err() != nil {
		g.markAbnormal()
	}
}

// emptyForExclusive readies the GPU for an exclusive holder: every LLM
// engine is emptied and the emptying confirmed, all at once; every image
// engine but owner (the job's own, nil for a hold) that may hold memory is
// freed; and the card must then have min_free_vram. A free that fails is
// logged, as before LLM use, and stays owed. ctx is g.ctx or derived from
// it, with the step's span.
//
// For an image job of a workflow whose peak is known, co_resident models
// that leave room for that peak stay loaded (planKeep, keptFit): the
// next request for one goes beside the job without loading it again.
//
// It returns the plan of what was kept, nil if nothing was.
func (g *GPU) emptyForExclusive(ctx context.Context, c *Config, owner ImageEngine, workflow string) (*keepPlan, error) {
	var keep *keepPlan
	if owner != nil {
		keep = g.planKeep(c, workflow)
	}
	if err := g.emptyLLMs(ctx, c, keep); err != nil {
		return nil, err
	}
	for _, e := range g.owedEngines() {
		if e, ok := e.(ImageEngine); ok && (owner == nil || e.Name() != owner.Name()) {
			g.freeImage(ctx, c, e)
		}
	}
	if keep != nil && !g.keptFit(ctx, c, keep) {
		keep = nil
		if err := g.emptyLLMs(ctx, c, nil); err != nil {
			return nil, err
		}
	}
	if keep != nil && len(keep.kept) == 0 {
		keep = nil
	}
	return keep, g.waitVRAM(c, c.UnloadTimeout, "exclusive use")
}

// emptyLLMs empties every LLM engine at once, within unload_timeout, and
// returns the first failure. keep, if not nil, is what stays loaded on
// the engines that can keep it.
func (g *GPU) emptyLLMs(ctx context.Context, c *Config, keep *keepPlan) error {
	g.mu.Lock()
	abnormal := g.abnormal
	g.mu.Unlock()
	errs := make([]error, len(c.LLMs))
	kept := make([][]string, len(c.LLMs))
	var wg sync.WaitGroup
	for i, e := range c.LLMs {
		wg.Go(func() { kept[i], errs[i] = g.emptyLLM(ctx, c, e, abnormal, keep) })
	}
	wg.Wait()
	if keep != nil {
		keep.kept = slices.Concat(kept...)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	g.mu.Lock()
	if g.abnormal.Equal(abnormal) {
		g.abnormal = time.Time{}
	}
	g.mu.Unlock()
	return nil
}

// emptyLLM unloads every model of one LLM engine, but those keep keeps
// on an engine that can, and confirms it; it returns the models kept.
// abnormal is when LLM use last ended abnormally (zero if not).
func (g *GPU) emptyLLM(ctx context.Context, c *Config, e LLMEngine, abnormal time.Time, keep *keepPlan) ([]string, error) {
	start := time.Now()
	var prev engineState
	g.withRun(e, func(r *engineRun) {
		prev, r.state = r.state, stateEmptying
	})
	g.lookBeforeEmptying(ctx, c, e)
	ctx, cancel := context.WithTimeout(ctx, c.UnloadTimeout)
	defer cancel()
	var names, kept []string
	var contact, err error
	if k, ok := e.(Keeper); ok && keep != nil && abnormal.IsZero() {
		names, kept, contact, err = k.EmptyBut(ctx, g.log(), keep.keeps)
	} else {
		names, contact, err = e.Empty(ctx, g.log(), abnormal)
	}
	if err == nil {
		err = g.confirmGone(ctx, c, e, contact)
	}
	took := time.Since(start)
	stepEvent(ctx, "emptied", e.Name(), took, err)
	_, waker := e.(Waker)
	g.withRun(e, func(r *engineRun) {
		r.up.note(contact)
		switch {
		case err != nil && errors.Is(err, ErrCannotEmpty):
			r.state = stateUnemptiable
		case err != nil:
			// A sleep cut short by unload_timeout may yet happen: the
			// engine is woken before LLM use (waking one awake is a no-op).
			r.state = prev
			r.owed = r.owed || waker
		case waker:
			r.owed, r.state = true, stateAsleep
		default:
			r.state = stateEmptied
		}
	})
	if err != nil {
		g.metrics.UpstreamError(upstreamKind(e), e.Name(), "unload")
		if errors.Is(err, ErrNotEmptied) {
			return nil, err
		}
		return nil, fmt.Errorf("%s %w: %v", e.Name(), ErrNotEmptied, err)
	}
	if c.Memory != nil {
		g.forgetResidents(e.Name(), kept)
	}
	if len(names) > 0 {
		g.learnStep(e.Name(), eta.Unload, took)
		g.metrics.Step("unload", e.Name(), took)
		g.addEvent("unload", took, fmt.Sprintf("%s: %d model(s)", e.Name(), len(names)))
		g.log().Info(e.Name()+" unloaded", zap.Strings("models", names), zap.Duration("duration", took))
	}
	return kept, nil
}

// lookBeforeEmptying remembers what runs e's models now, before the
// unload, which may answer while a wrapper's child still holds one. It is
// bounded by probe_timeout, not taken from unload_timeout; a failed look
// keeps what was remembered.
func (g *GPU) lookBeforeEmptying(ctx context.Context, c *Config, e LLMEngine) {
	ctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
	defer cancel()
	g.lookAt(ctx, c, e, askServers)
}

// unloadEarly asks the LLM engines to unload while their requests drain.
func (g *GPU) unloadEarly(c *Config) {
	ctx, cancel := context.WithTimeout(g.ctx, c.UnloadTimeout)
	defer cancel()
	for _, e := range c.LLMs {
		n, err := e.UnloadSoon(ctx)
		if err == nil && n > 0 {
			g.log().Debug("early unload requested while LLM requests drain", zap.String("engine", e.Name()), zap.Int("models", n))
		}
	}
}
