package gpu

import (
	"context"
	"errors"
	"fmt"
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

// emptyForExclusive empties the LLM engine before the GPU goes to an
// exclusive holder, confirms it, and waits for min_free_vram.
func (g *GPU) emptyForExclusive(c *Config) error {
	if c.LLM != nil {
		if err := g.emptyLLM(c); err != nil {
			return err
		}
	}
	return g.waitVRAM(c, c.UnloadTimeout, "exclusive use")
}

// emptyLLM unloads every model of the LLM engine and confirms it, within
// unload_timeout.
func (g *GPU) emptyLLM(c *Config) error {
	ctx, cancel := context.WithTimeout(g.ctx, c.UnloadTimeout)
	defer cancel()
	e := c.LLM
	start := time.Now()
	abnormal := g.abnormal.Load()
	var since time.Time
	if abnormal != 0 {
		since = time.Unix(0, abnormal)
	}
	names, contact, err := e.Empty(ctx, g.log(), since)
	took := time.Since(start)
	g.llmUp.set(contact)
	if err != nil {
		g.metrics.UpstreamError(e.Kind(), "unload")
		if errors.Is(err, ErrNotEmptied) {
			return err
		}
		return fmt.Errorf("%s %w: %v", e.Name(), ErrNotEmptied, err)
	}
	g.abnormal.CompareAndSwap(abnormal, 0)
	if len(names) > 0 {
		g.metrics.Step("unload", took)
		g.history.addEvent("unload", took, fmt.Sprintf("%d model(s)", len(names)))
		g.log().Info(e.Name()+" unloaded", zap.Strings("models", names), zap.Duration("duration", took))
	}
	return nil
}

// unloadEarly asks the LLM engine to unload while its requests drain.
func (g *GPU) unloadEarly(c *Config) {
	ctx, cancel := context.WithTimeout(g.ctx, c.UnloadTimeout)
	defer cancel()
	n, err := c.LLM.UnloadSoon(ctx)
	if err == nil && n > 0 {
		g.log().Debug("early unload requested while LLM requests drain", zap.Int("models", n))
	}
}
