package gpu

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/eta"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// AcquireShared waits, until ctx ends, for a shared place on the GPU for
// an LLM request that could not have one at once; the wait shows in the
// status. The caller releases it with Lock().ReleaseShared.
func (g *GPU) AcquireShared(ctx context.Context) error {
	span := g.startLLMWait(ctx)
	done := g.wait(ctx, lock.LLM, time.Now())
	err := g.lock.AcquireShared(ctx)
	done()
	EndSpan(span, err)
	return err
}

// acquireExclusive waits for the GPU for an image job or a hold. With
// early_unload, the LLM engines are asked to unload while the LLM requests
// drain.
func (g *GPU) acquireExclusive(ctx context.Context, kind lock.Kind) error {
	if c := g.cfg(); c != nil && c.EarlyUnload && len(c.LLMs) > 0 && g.lock.State() == lock.LLM {
		g.spawn(func() { g.unloadEarly(c) })
	}
	start := time.Now()
	if kind == lock.PresenceHold {
		w := waiterFrom(ctx)
		w.presence = true
		ctx = WithWaiter(ctx, w)
	}
	done := g.wait(ctx, kind.State(), start)
	err := g.afterStartUp(ctx)
	if err == nil {
		err = g.lockExclusive(ctx, kind)
	}
	done()
	if err != nil {
		return err
	}
	g.metrics.Waited(kind.State(), time.Since(start))
	return nil
}

// lockExclusive waits for the lock on a goroutine of the GPU's, until ctx
// ends. If the lock grants it as ctx ends, the grant is given back there,
// with the free it may owe, and the caller returns at once; otherwise the
// caller returns once its request has left the lock's queue (at once).
// A grant that the lock sees only after the end (it gives that back
// itself, in AcquireExclusive) is given back on that goroutine too, but
// the caller waits for it.
func (g *GPU) lockExclusive(ctx context.Context, kind lock.Kind) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(g.ctx)
	defer cancel()
	result := make(chan error, 1)
	taken, left := make(chan struct{}), make(chan struct{})
	if !g.spawn(func() {
		err := g.lock.AcquireExclusive(wctx, kind)
		result <- err
		if err != nil {
			return
		}
		select {
		case <-taken:
		case <-left:
			g.lock.ReleaseExclusive(false)
		}
	}) {
		return g.ctx.Err() // closing
	}
	select {
	case err := <-result:
		close(taken)
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-result: // granted as ctx ended
		if err == nil {
			close(left)
		}
	default:
		cancel()
		if err := <-result; err == nil {
			close(left)
		}
	}
	return ctx.Err()
}

// afterStartUp waits until the start-up has settled who has the GPU
// first, or ctx ends.
func (g *GPU) afterStartUp(ctx context.Context) error {
	g.mu.Lock()
	settling := g.settling
	g.mu.Unlock()
	if settling == nil {
		return nil
	}
	select {
	case <-settling:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// free readies the GPU for LLM use and reports whether every step did its
// job: each owed free was confirmed or could not be checked (or the engine
// is not running), each wake confirmed. False means an image engine may
// still hold memory or an LLM engine still sleeps.
func (g *GPU) free(ctx context.Context) (done bool) {
	c := g.cfg()
	if c == nil || g.ctx.Err() != nil {
		return true // Caddy is stopping and nobody will use the GPU after
	}
	owed := g.owedEngines()
	done = true
	for _, e := range owed {
		if e, ok := e.(ImageEngine); ok && !g.freeImage(ctx, c, e) {
			done = false
		}
	}
	if done {
		if err := g.waitVRAM(c, c.FreeTimeout, "LLM use"); err != nil {
			trace.SpanFromContext(ctx).RecordError(err)
			g.log().Warn("LLM requests go ahead without the memory min_free_vram asks for", zap.Error(err))
		}
	}
	for _, e := range owed {
		e, _ := e.(LLMEngine)
		if w, ok := e.(Waker); ok && !g.wake(ctx, c, e, w) {
			done = false
			g.spawn(func() { g.retryWake(c, e, w) })
		}
	}
	return done
}

// freeImage frees one image engine, within free_timeout, and reports
// whether it did its job (see free).
func (g *GPU) freeImage(ctx context.Context, c *Config, e ImageEngine) bool {
	ctx, cancel := context.WithTimeout(ctx, c.FreeTimeout)
	defer cancel()
	g.setState(e, stateFreeing)
	start := time.Now()
	confirmed, err := e.Free(ctx)
	if errors.Is(err, ErrNoGPUReading) {
		g.reportNoGPUReading(e.Name(), err)
		err = nil
	}
	if err == nil && !confirmed {
		g.log().Debug(e.Name() + " free sent but not confirmed: the engine cannot show its memory falling")
	}
	took := time.Since(start)
	stepEvent(ctx, "freed", e.Name(), took, err)
	switch {
	case err == nil:
		g.reached(e, nil)
		g.learnStep(e.Name(), eta.Free, took)
		g.metrics.Step("free", e.Name(), took)
		g.addEvent("free", took, e.Name())
		g.log().Info(e.Name()+" freed", zap.Duration("duration", took))
	case engine.Refused(err):
		g.reached(e, err)
		g.log().Warn(e.Name()+" refuses connections: not running, so holding no GPU memory", zap.Error(err))
	default:
		g.setState(e, stateReady)
		g.metrics.UpstreamError(upstreamKind(e), e.Name(), "free")
		g.log().Error(e.Name()+" free not confirmed within free_timeout; releasing the GPU anyway",
			zap.Duration("free_timeout", c.FreeTimeout), zap.Error(err))
		return false
	}
	g.withRun(e, func(r *engineRun) {
		r.state = stateFreed
		r.owed = false
	})
	return true
}

// wake wakes an LLM engine that was put to sleep and confirms it, within
// unload_timeout, and reports whether it did.
func (g *GPU) wake(ctx context.Context, c *Config, e LLMEngine, w Waker) bool {
	ctx, cancel := context.WithTimeout(ctx, c.UnloadTimeout)
	defer cancel()
	g.setState(e, stateWaking)
	start := time.Now()
	err := w.Wake(ctx)
	took := time.Since(start)
	stepEvent(ctx, "woken", e.Name(), took, err)
	g.withRun(e, func(r *engineRun) {
		r.up.note(err)
		if err != nil {
			r.state = stateAsleep
		} else {
			r.owed = false
			r.state = stateReady
		}
	})
	if err != nil {
		g.metrics.UpstreamError(e.Kind(), e.Name(), "wake")
		g.log().Error(e.Name()+" did not wake within unload_timeout: its requests queue inside it until it does",
			zap.Duration("unload_timeout", c.UnloadTimeout), zap.Error(err))
		return false
	}
	g.learnStep(e.Name(), eta.Wake, took)
	g.metrics.Step("wake", e.Name(), took)
	g.addEvent("wake", took, e.Name())
	g.log().Info(e.Name()+" woken", zap.Duration("duration", took))
	return true
}

// retryWake wakes, with backoff, an LLM engine whose wake failed, while
// LLM requests go to it (it queues them until awake). Each attempt holds a
// shared place, so that it never wakes the engine beside an exclusive
// holder; while one holds or waits for the GPU it waits, since that use
// leaves the engine owed a wake again anyway.
func (g *GPU) retryWake(c *Config, e LLMEngine, w Waker) {
	delay := c.BackoffInitial
	for g.isOwed(e) {
		select {
		case <-g.ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, c.BackoffMax)
		if g.wakeShared(c, e, w) {
			return
		}
	}
}

// wakeShared wakes e holding a shared place, if it can have one at once,
// and reports whether the wake was done (or no longer owed).
func (g *GPU) wakeShared(c *Config, e LLMEngine, w Waker) bool {
	if !g.lock.TryAcquireShared() {
		return false
	}
	defer g.lock.ReleaseShared()
	return !g.isOwed(e) || g.wake(g.ctx, c, e, w)
}

// reportNoGPUReading says once per engine, in the log and the status,
// that an image engine reports no GPU memory, so its frees (and
// min_free_vram's probe through it) cannot be confirmed.
func (g *GPU) reportNoGPUReading(engine string, err error) {
	first := false
	g.update(func() {
		r := g.runLocked(engine)
		first, r.noGPUReading = !r.noGPUReading, true
	})
	if first {
		g.log().Warn(engine+" reports no GPU memory: its frees are not confirmed, and min_free_vram is not checked through it (use vram_probe nvidia-smi)",
			zap.Error(err))
	}
}

// upstreamKind is an engine's upstream label in the metrics: its kind's
// label (the labels before engines had kinds).
func upstreamKind(e Engine) string { return engine.Label(e, false) }

// warm loads warm_model in the background as a shared holder of the lock,
// so an image job that arrives meanwhile waits for it to finish instead of
// unloading a model that is still loading. If an exclusive waiter is
// already queued, there is no point: nothing is warmed. Its span is
// linked to from's, the request whose use of the GPU it follows.
func (g *GPU) warm(from spanLink) {
	c := g.cfg()
	if c == nil || c.WarmModel == "" || c.warmEngine() == nil || g.ctx.Err() != nil || !g.lock.TryAcquireShared() {
		return
	}
	g.setWarming(true)
	if !g.spawn(func() { g.warmUp(c, from) }) {
		g.setWarming(false) // closing: nothing is warmed
		g.lock.ReleaseShared()
	}
}

// warmUp runs the warm-up warm started, holding a shared place.
func (g *GPU) warmUp(c *Config, from spanLink) {
	defer g.lock.ReleaseShared()
	defer g.setWarming(false)
	e := c.warmEngine()
	ctx, span := g.startWarm(from, c.WarmModel, e.Name())
	ctx, cancel := context.WithTimeout(ctx, c.WarmTimeout)
	defer cancel()
	start := time.Now()
	err := e.Warm(ctx, c.WarmModel)
	took := time.Since(start)
	EndSpan(span, err)
	g.reached(e, err)
	if err != nil {
		g.markAbnormal() // a warm-up cut short leaves its runner behind a while
		g.metrics.UpstreamError(e.Kind(), e.Name(), "warm")
		g.log().Warn("warm-up failed", zap.String("model", c.WarmModel), zap.Duration("duration", took), zap.Error(err))
		return
	}
	g.learn(func(l *eta.Learned) { l.AddLoad(e.Name(), c.WarmModel, took) })
	g.metrics.Step("warm", e.Name(), took)
	g.addEvent("warm", took, c.WarmModel)
	g.log().Info("model warmed", zap.String("model", c.WarmModel), zap.Duration("duration", took))
}
