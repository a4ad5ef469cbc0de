package gpu

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// AcquireShared waits, until ctx ends, for a shared place on the GPU for
// an LLM request that could not have one at once; the wait shows in the
// status. The caller releases it with Lock().ReleaseShared.
func (g *GPU) AcquireShared(ctx context.Context) error {
	done := g.wait(lock.LLM, time.Now())
	err := g.lock.AcquireShared(ctx)
	done()
	return err
}

// acquireExclusive waits for the GPU for an image job or a hold. With
// early_unload, Ollama is asked to unload while the LLM requests drain.
func (g *GPU) acquireExclusive(ctx context.Context, kind lock.Kind) error {
	if c := g.cfg(); c != nil && c.EarlyUnload && c.LLM != nil && g.lock.State() == lock.LLM {
		g.spawn(func() { g.unloadEarly(c) })
	}
	start := time.Now()
	done := g.wait(kind.State(), start)
	err := g.lock.AcquireExclusive(ctx, kind)
	done()
	if err != nil {
		return err
	}
	g.metrics.Waited(kind.State(), time.Since(start))
	return nil
}

// Free implements lock.Effects: ComfyUI's memory is freed, and the free
// confirmed, before the GPU leaves exclusive use.
func (g *GPU) Free() { g.free() }

// free frees the image engine and reports whether it did its job: the free
// was confirmed or could not be checked, or the engine is not running.
// False means it may still hold memory: the free was not confirmed within
// free_timeout, or failed.
func (g *GPU) free() (done bool) {
	c := g.cfg()
	if c == nil || c.Image == nil || g.ctx.Err() != nil {
		return true // no ComfyUI, or Caddy is stopping and nobody will use the GPU after
	}
	ctx, cancel := context.WithTimeout(g.ctx, c.FreeTimeout)
	defer cancel()
	start := time.Now()
	confirmed, err := c.Image.Free(ctx)
	if errors.Is(err, ErrNoGPUReading) {
		g.reportNoGPUReading(err)
		err = nil
	}
	if err == nil && !confirmed {
		g.log().Debug(c.Image.Name() + " free sent but not confirmed: the engine cannot show its memory falling")
	}
	took := time.Since(start)
	if err == nil {
		if verr := g.waitVRAM(c, max(c.FreeTimeout-took, 0), "LLM use"); verr != nil {
			g.log().Warn("LLM requests go ahead without the memory min_free_vram asks for", zap.Error(verr))
		}
		took = time.Since(start)
	}
	switch {
	case err == nil:
		g.imageUp.set(nil)
		g.metrics.Step("free", took)
		g.history.addEvent("free", took, "")
		g.log().Info(c.Image.Name()+" freed", zap.Duration("duration", took))
	case jsonhttp.Refused(err):
		g.imageUp.set(err)
		g.log().Warn(c.Image.Name()+" refuses connections: not running, so holding no GPU memory", zap.Error(err))
	default:
		g.metrics.UpstreamError(c.Image.Kind(), "free")
		g.log().Error(c.Image.Name()+" free not confirmed within free_timeout; releasing the GPU anyway",
			zap.Duration("free_timeout", c.FreeTimeout), zap.Error(err))
		return false
	}
	return true
}

// reportNoGPUReading says once, in the log and the status, that ComfyUI
// reports no GPU memory, so its frees and min_free_vram's comfy probe
// cannot be confirmed.
func (g *GPU) reportNoGPUReading(err error) {
	if g.noGPUReading.CompareAndSwap(false, true) {
		g.log().Warn("the image engine reports no GPU memory: its frees are not confirmed, and min_free_vram is not checked through it (use vram_probe nvidia-smi)",
			zap.Error(err))
	}
}

// warm loads warm_model in the background as a shared holder of the lock,
// so an image job that arrives meanwhile waits for it to finish instead of
// unloading a model that is still loading. If an exclusive waiter is
// already queued, there is no point: nothing is warmed.
func (g *GPU) warm() {
	c := g.cfg()
	if c == nil || c.WarmModel == "" || c.LLM == nil || !g.lock.TryAcquireShared() {
		return
	}
	g.setWarming(true)
	g.spawn(func() { g.warmUp(c) })
}

// warmUp runs the warm-up warm started, holding a shared place.
func (g *GPU) warmUp(c *Config) {
	defer g.lock.ReleaseShared()
	defer g.setWarming(false)
	ctx, cancel := context.WithTimeout(g.ctx, c.WarmTimeout)
	defer cancel()
	start := time.Now()
	err := c.LLM.Warm(ctx, c.WarmModel)
	took := time.Since(start)
	g.llmUp.set(err)
	if err != nil {
		g.markAbnormal() // a warm-up cut short leaves its runner behind a while
		g.metrics.UpstreamError(c.LLM.Kind(), "warm")
		g.log().Warn("warm-up failed", zap.String("model", c.WarmModel), zap.Duration("duration", took), zap.Error(err))
		return
	}
	g.metrics.Step("warm", took)
	g.history.addEvent("warm", took, c.WarmModel)
	g.log().Info("model warmed", zap.String("model", c.WarmModel), zap.Duration("duration", took))
}
