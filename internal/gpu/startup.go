package gpu

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// startUp probes the upstreams once, when the first config starts. Until
// the image engine's queue is known to be empty, the GPU is treated as the
// engine's: a job may have been queued before Caddy started. It runs under
// g.mu.
func (g *GPU) startUp(c *Config) {
	if c.LLM != nil {
		g.spawn(func() { g.probeLLM(c) })
	}
	if c.Image != nil {
		if err := g.lock.AcquireExclusive(g.ctx, lock.ImageJob); err == nil {
			g.act.probing = true
			g.act.job = &Job{Source: c.Image.Name(), Phase: "start-up probe", Started: time.Now()}
			u := &use{g: g, c: c}
			g.spawn(func() { g.reconcileAtStart(u) })
		}
	}
}

func (g *GPU) currentWatcher() Watch {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.watcher
}

func (g *GPU) reportWatch(connected bool, err error) {
	g.wsUp.Store(connected)
	if connected {
		g.imageUp.set(nil)
		g.log().Debug("image engine's event stream connected")
		return
	}
	g.log().Warn("image engine's event stream down; job ends are found by polling until it is back", zap.Error(err))
}

// reconcileAtStart runs with the lock held exclusively from start-up: it
// asks ComfyUI whether work is queued, and keeps the GPU for it until it
// ends. If ComfyUI cannot be asked within probe_timeout, the GPU is
// released and the websocket watch takes over.
func (g *GPU) reconcileAtStart(u *use) {
	c := u.c
	ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
	running, pending, err := g.probeQueue(ctx, c)
	cancel()
	g.mu.Lock()
	g.act.probing = false
	g.mu.Unlock()
	switch {
	case err != nil && !jsonhttp.Refused(err):
		g.log().Warn(c.Image.Name()+" queue unknown at start-up; GPU released, the websocket watch takes over",
			zap.String("url", RedactURL(c.Image.URL())), zap.Error(err))
	case running+pending > 0:
		g.log().Info(c.Image.Name()+" has queued work at start-up; holding the GPU for it",
			zap.Int("running", running), zap.Int("pending", pending))
		g.drainDirect(u)
	}
	g.setJob(nil)
	u.end()
}

// probeLLM reports at start-up whether the LLM engine answers.
func (g *GPU) probeLLM(c *Config) {
	ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
	defer cancel()
	e := c.LLM
	models, err := e.Loaded(ctx)
	g.llmUp.set(err)
	if err != nil {
		g.log().Warn(e.Name()+" not reachable at start-up; image jobs proceed only if it refuses connections (not running)",
			zap.String("url", RedactURL(e.URL())), zap.Error(err))
		return
	}
	g.log().Info(e.Name()+" reachable", zap.String("url", RedactURL(e.URL())), zap.Int("models_loaded", len(models)))
}

// probeQueue reads ComfyUI's queue, retrying with backoff while ComfyUI
// answers with errors, until ctx ends. A refused connection is final: no
// ComfyUI process, no work.
func (g *GPU) probeQueue(ctx context.Context, c *Config) (running, pending int, err error) {
	delay := min(c.BackoffInitial, 100*time.Millisecond)
	for {
		running, pending, err = c.Image.Queue(ctx)
		g.imageUp.set(err)
		if err == nil || jsonhttp.Refused(err) || ctx.Err() != nil {
			return running, pending, err
		}
		select {
		case <-ctx.Done():
			return 0, 0, err
		case <-time.After(delay):
		}
		delay = min(delay*2, c.BackoffMax)
	}
}

// watchForeignWork takes the GPU for work queued on ComfyUI directly (its
// own UI on its own port), which bypassed the turnstile: the broadcasts say
// the queue is not empty while no job of ours holds the GPU.
func (g *GPU) watchForeignWork(ctx context.Context, w Watch) {
	for {
		changed := w.Changed()
		if n, known := w.QueueRemaining(); known && n > 0 && g.takeDirect() {
			g.spawn(g.runDirect)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// runDirect takes the GPU for work queued directly on the image engine
// and keeps it until the engine's queue is empty.
func (g *GPU) runDirect() {
	defer g.endDirect()
	c := g.cfg()
	g.log().Info(c.Image.Name() + " has work that did not come through the turnstile; taking the GPU for it")
	if err := g.acquireExclusive(g.ctx, lock.ImageJob); err != nil {
		return
	}
	u := &use{g: g, c: c}
	g.setJob(&Job{Source: c.Image.Name(), Phase: "unloading", Started: time.Now()})
	g.drainDirect(u)
	g.setJob(nil)
	u.end()
}

// drainDirect empties the LLM engine and waits until the image engine's
// queue is empty; u holds the GPU. The work ran, so the engine owes a free;
// the warm model is loaded again after, whether the emptying succeeded or
// not.
func (g *GPU) drainDirect(u *use) {
	c := u.c
	u.owesFree, u.warmAfter = true, true
	if err := g.emptyForExclusive(c); err != nil {
		g.log().Error("GPU not emptied while "+c.Image.Name()+" runs work queued directly", zap.Error(err))
	}
	g.setPhase("draining queue")
	ctx, cancel := context.WithTimeout(g.ctx, c.JobTimeout)
	defer cancel()
	start := time.Now()
	err := c.Image.WaitIdle(ctx, g.currentWatcher())
	g.log().Info(c.Image.Name()+" queue drained", zap.Duration("duration", time.Since(start)), zap.Error(err))
}
