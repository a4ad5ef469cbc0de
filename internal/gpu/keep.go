package gpu

import (
	"context"
	"slices"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu/ledger"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/vram"
)

// keepPlan is what may stay loaded through the next image job, rather
// than be unloaded before it and loaded again for the next request beside
// it: the co_resident models, on the engines that can keep some models
// and unload the rest (engine.Keeper).
type keepPlan struct {
	mem  *MemoryConfig
	peak int64    // the job's workflow's peak
	kept []string // what the engines kept, as they name it (emptyLLMs)
}

// keeps reports whether the plan keeps model (as an engine names it).
func (p *keepPlan) keeps(model string) bool { return coResident(p.mem, modelKey(model)) }

// planKeep plans to keep the co_resident models through a job of
// workflow when its peak is known and LLM use last ended normally (after
// an abort, and before the first emptying since Caddy started, the
// engine's listing is no proof). Nil otherwise: every model is unloaded.
// Whether what is kept fits is confirmed once the rest is emptied
// (keptFit).
func (g *GPU) planKeep(c *Config, workflow string) *keepPlan {
	if c.Memory == nil || len(c.Memory.CoResident) == 0 || workflow == "" {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	peak := g.mem.ledger.KeepPeak(c.Memory.rules(), workflow)
	if peak == 0 || !g.abnormal.IsZero() {
		return nil
	}
	return &keepPlan{mem: c.Memory, peak: peak}
}

// keptFit reads the card, once the rest is emptied, and reports whether
// the models kept leave the job's peak free beside them, less
// vram_reserve (and min_free_vram): what a model admitted beside the job
// must leave too. It is true when nothing was kept.
func (g *GPU) keptFit(ctx context.Context, c *Config, p *keepPlan) bool {
	models := slices.Sorted(slices.Values(p.kept))
	if len(models) == 0 {
		return true
	}
	rctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
	defer cancel()
	r, err := vram.Read(rctx, c.Memory.SMIPath, c.Memory.Index)
	rules := c.Memory.rules()
	rules.MinFree = c.MinFreeVRAM
	fields := []zap.Field{zap.Strings("models", models), zap.Int64("peak_mib", p.peak>>20)}
	switch {
	case err != nil:
		g.log().Warn("co_resident models unloaded for the image job: the card could not be read", append(fields, zap.Error(err))...)
		return false
	case !ledger.KeepFits(rules, r.Free, p.peak):
		g.log().Info("co_resident models unloaded for the image job: they leave too little room for its peak",
			append(fields, zap.Int64("free_mib", r.Free>>20), zap.Int64("reserve_mib", c.Memory.Reserve>>20))...)
		return false
	}
	g.log().Info("co_resident models kept loaded through the image job", append(fields, zap.Int64("free_mib", r.Free>>20))...)
	return true
}
