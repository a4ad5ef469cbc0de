package gpu

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/vram"
)

// keepPlan is the co_resident models that may stay loaded through the
// next image job, rather than be unloaded before it and loaded again for
// the next request beside it.
type keepPlan struct {
	models map[string]bool // by modelKey
	peak   int64           // the job's workflow's peak
}

// keeps reports whether the plan keeps model (as an engine names it).
func (p *keepPlan) keeps(model string) bool { return p.models[modelKey(model)] }

// planKeep lists the co_resident models loaded now, on an engine that can
// be emptied of the rest (engine.Keeper), that may stay through a job of
// workflow: its peak is known, LLM use last ended normally (after an
// abort the engine's listing is no proof), and the reading is fresh. Nil
// when nothing may stay: every model is unloaded, as without
// co_resident. Whether they fit is confirmed once the rest is emptied
// (keptFit).
func (g *GPU) planKeep(c *Config, workflow string) *keepPlan {
	if c.Memory == nil || len(c.Memory.CoResident) == 0 || workflow == "" {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	m := &g.mem
	fp, known := m.footprintOf(c.Memory, workflow)
	if !known || fp.Alone || fp.Bytes <= 0 || !g.abnormal.IsZero() || m.stale(c.Memory, time.Now()) {
		return nil
	}
	p := &keepPlan{models: map[string]bool{}, peak: fp.Bytes}
	for model, r := range m.resident {
		if coResident(c.Memory, model) && slices.ContainsFunc(c.LLMs, func(e LLMEngine) bool {
			_, ok := e.(engine.Keeper)
			return ok && e.Name() == r.engine
		}) {
			p.models[model] = true
		}
	}
	if len(p.models) == 0 {
		return nil
	}
	return p
}

// keptFit reads the card, once the rest is emptied, and reports whether
// the kept models leave the job's peak free beside them (and
// min_free_vram): what a model admitted beside the job must leave too.
func (g *GPU) keptFit(ctx context.Context, c *Config, p *keepPlan) bool {
	rctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
	defer cancel()
	r, err := vram.Read(rctx, c.Memory.SMIPath, c.Memory.Index)
	models := make([]string, 0, len(p.models))
	for m := range p.models {
		models = append(models, m)
	}
	slices.Sort(models)
	fields := []zap.Field{zap.Strings("models", models), zap.Int64("peak_mib", p.peak>>20)}
	switch {
	case err != nil:
		g.log().Warn("co_resident models unloaded for the image job: the card could not be read", append(fields, zap.Error(err))...)
		return false
	case r.Free-c.Memory.Reserve < p.peak || r.Free < c.MinFreeVRAM:
		g.log().Info("co_resident models unloaded for the image job: they leave too little room for its peak",
			append(fields, zap.Int64("free_mib", r.Free>>20), zap.Int64("reserve_mib", c.Memory.Reserve>>20))...)
		return false
	}
	g.log().Info("co_resident models kept loaded through the image job", append(fields, zap.Int64("free_mib", r.Free>>20))...)
	return true
}
