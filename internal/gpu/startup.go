package gpu

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/comfy"
)

// startUp probes the upstreams once, when the first config starts. Until
// ComfyUI's queue is known to be empty, the GPU is treated as ComfyUI's: a
// job may have been queued before Caddy started. It runs under g.mu.
func (g *GPU) startUp(c *Config) {
	if c.Ollama != nil {
		go g.probeOllama(c)
	}
	if c.Comfy != nil {
		if err := g.lock.AcquireExclusive(g.ctx, lock.Image); err == nil {
			g.probing.Store(true)
			g.job = &Job{Source: "comfyui", Phase: "start-up probe", Started: time.Now()}
			go g.reconcileAtStart(c)
		}
	}
}

// Probing reports whether the start-up probe holds the GPU: ComfyUI is
// being asked whether work was queued before Caddy started.
func (g *GPU) Probing() bool { return g.probing.Load() }

func (g *GPU) currentWatcher() *comfy.Watcher {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.watcher
}

func (g *GPU) reportWatch(connected bool, err error) {
	g.wsUp.Store(connected)
	if connected {
		g.comfyUp.set(nil)
		g.log().Debug("comfyui websocket connected")
		return
	}
	g.log().Warn("comfyui websocket down; job ends are found by polling until it is back", zap.Error(err))
}

// reconcileAtStart runs with the lock held exclusively from start-up: it
// asks ComfyUI whether work is queued, and keeps the GPU for it until it
// ends. If ComfyUI cannot be asked within probe_timeout, the GPU is
// released and the websocket watch takes over.
func (g *GPU) reconcileAtStart(c *Config) {
	ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
	running, pending, err := g.probeQueue(ctx, c)
	cancel()
	g.probing.Store(false)
	jobRan := false
	switch {
	case err != nil && !comfy.Refused(err):
		g.log().Warn("comfyui queue unknown at start-up; GPU released, the websocket watch takes over",
			zap.String("url", c.ComfyURL), zap.Error(err))
	case len(running)+len(pending) > 0:
		g.log().Info("comfyui has queued work at start-up; holding the GPU for it",
			zap.Int("running", len(running)), zap.Int("pending", len(pending)))
		g.drainForeign(c)
		jobRan = true
	}
	g.setJob(nil)
	g.releaseExclusive(jobRan, jobRan)
}

// probeOllama reports at start-up whether Ollama answers.
func (g *GPU) probeOllama(c *Config) {
	ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
	defer cancel()
	models, err := c.Ollama.PS(ctx)
	g.ollamaUp.set(err)
	if err != nil {
		g.log().Warn("ollama not reachable at start-up; image jobs proceed only if it refuses connections (not running)",
			zap.String("url", c.OllamaURL), zap.Error(err))
		return
	}
	g.log().Info("ollama reachable", zap.String("url", c.OllamaURL), zap.Int("models_loaded", len(models)))
}

// probeQueue reads ComfyUI's queue, retrying with backoff while ComfyUI
// answers with errors, until ctx ends. A refused connection is final: no
// ComfyUI process, no work.
func (g *GPU) probeQueue(ctx context.Context, c *Config) (running, pending []string, err error) {
	delay := min(c.BackoffInitial, 100*time.Millisecond)
	for {
		running, pending, err = c.Comfy.Queue(ctx)
		g.comfyUp.set(err)
		if err == nil || comfy.Refused(err) || ctx.Err() != nil {
			return running, pending, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(delay):
		}
		delay = min(delay*2, c.BackoffMax)
	}
}

// watchForeignWork takes the GPU for work queued on ComfyUI directly (its
// own UI on its own port), which bypassed the turnstile: the broadcasts say
// the queue is not empty while no job of ours holds the GPU.
func (g *GPU) watchForeignWork(ctx context.Context, w *comfy.Watcher) {
	for {
		changed := w.Changed()
		if n, known := w.QueueRemaining(); known && n > 0 && !g.jobActive() && g.foreign.CompareAndSwap(false, true) {
			go g.runForeign()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func (g *GPU) jobActive() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.job != nil
}

func (g *GPU) runForeign() {
	defer g.foreign.Store(false)
	c := g.cfg()
	g.log().Info("comfyui has work that did not come through the turnstile; taking the GPU for it")
	if err := g.acquireExclusive(g.ctx, lock.Image); err != nil {
		return
	}
	g.setJob(&Job{Source: "comfyui", Phase: "unloading", Started: time.Now()})
	g.drainForeign(c)
	g.setJob(nil)
	g.releaseExclusive(true, true)
}

// drainForeign empties Ollama and waits until ComfyUI's queue is empty;
// the caller holds the lock exclusively.
func (g *GPU) drainForeign(c *Config) {
	if err := g.unloadOllama(c); err != nil {
		g.log().Error("ollama not emptied while comfyui runs work queued directly", zap.Error(err))
	}
	g.setPhase("draining queue")
	ctx, cancel := context.WithTimeout(g.ctx, c.JobTimeout)
	defer cancel()
	start := time.Now()
	err := c.Comfy.WaitIdle(ctx, g.currentWatcher(), c.HistoryPoll)
	g.log().Info("comfyui queue drained", zap.Duration("duration", time.Since(start)), zap.Error(err))
}
