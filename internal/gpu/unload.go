package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// markAbnormal records that LLM use has just ended in a way that may leave
// a load in flight that the LLM engine's listing does not show.
func (g *GPU) markAbnormal() { g.abnormal.Store(time.Now().UnixNano()) }

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
func (g *GPU) emptyForExclusive(ctx context.Context, c *Config, owner ImageEngine) error {
	if err := g.emptyLLMs(ctx, c); err != nil {
		return err
	}
	for _, r := range g.owedRuns() {
		if e, ok := r.eng.Load().Engine.(ImageEngine); ok && (owner == nil || e.Name() != owner.Name()) {
			g.freeImage(ctx, c, e)
		}
	}
	return g.waitVRAM(c, c.UnloadTimeout, "exclusive use")
}

// emptyLLMs empties every LLM engine at once, within unload_timeout, and
// returns the first failure.
func (g *GPU) emptyLLMs(ctx context.Context, c *Config) error {
	abnormal := g.abnormal.Load()
	errs := make([]error, len(c.LLMs))
	var wg sync.WaitGroup
	for i, e := range c.LLMs {
		wg.Go(func() { errs[i] = g.emptyLLM(ctx, c, e, abnormal) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	g.abnormal.CompareAndSwap(abnormal, 0)
	return nil
}

// emptyLLM unloads every model of one LLM engine and confirms it.
// abnormal is when LLM use last ended abnormally (UnixNano, 0 if not).
func (g *GPU) emptyLLM(ctx context.Context, c *Config, e LLMEngine, abnormal int64) error {
	ctx, cancel := context.WithTimeout(ctx, c.UnloadTimeout)
	defer cancel()
	run := g.run(e)
	start := time.Now()
	var since time.Time
	if abnormal != 0 {
		since = time.Unix(0, abnormal)
	}
	prev := run.get()
	run.set(stateEmptying)
	names, contact, err := e.Empty(ctx, g.log(), since)
	took := time.Since(start)
	stepEvent(ctx, "emptied", e.Name(), took, err)
	run.up.set(contact)
	if err != nil {
		run.set(prev)
		if errors.Is(err, ErrCannotEmpty) {
			run.set(stateUnemptiable)
		} else if _, ok := e.(Waker); ok {
			// A sleep cut short by unload_timeout may yet happen: the
			// engine is woken before LLM use (waking one awake is a no-op).
			run.owed.Store(true)
		}
		g.metrics.UpstreamError(upstreamKind(e), e.Name(), "unload")
		if errors.Is(err, ErrNotEmptied) {
			return err
		}
		return fmt.Errorf("%s %w: %v", e.Name(), ErrNotEmptied, err)
	}
	if _, ok := e.(Waker); ok {
		run.owed.Store(true)
		run.set(stateAsleep)
	} else {
		run.set(stateEmptied)
	}
	if len(names) > 0 {
		g.metrics.Step("unload", e.Name(), took)
		g.history.addEvent("unload", took, fmt.Sprintf("%s: %d model(s)", e.Name(), len(names)))
		g.log().Info(e.Name()+" unloaded", zap.Strings("models", names), zap.Duration("duration", took))
	}
	return nil
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
