package gpu

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// startUp begins the start-up, when the first config starts: a hold
// restored from the hold store, then the probe of the engines. Until the
// image engines' queues are known to be empty, the GPU is treated as
// theirs: a job may have been queued before Caddy started, and an engine
// that answers may hold a past job's memory (A1111 loads its checkpoint
// at launch), so it owes a free. A hold restored from the hold store comes
// first: it takes the GPU before anything else, and the image engines are
// probed once it ends.
//
// The GPU is taken here, before Apply returns, so that no LLM request gets
// in before the restored hold or the probe: they wait (within their wait
// budget). The rest runs on the GPU's own goroutine (settle): the hold
// store's read is I/O, bounded by restoreTimeout. Until it has settled,
// image jobs and holds wait too (acquireExclusive), so that the restored
// hold is the first of them.
func (g *GPU) startUp(c *Config) {
	if c.HoldStore == nil && len(c.Images) == 0 {
		for _, e := range c.LLMs {
			g.spawn(func() { g.probeLLM(c, e) })
		}
		return
	}
	held := g.lock.TryAcquireExclusive(lock.ImageJob)
	phase := "start-up probe"
	if c.HoldStore != nil {
		phase = "reading the saved holds"
	}
	g.update(func() {
		g.settling = make(chan struct{})
		g.markStartUpLocked(c, phase)
	})
	if !g.spawn(func() { g.settle(c, held) }) {
		g.endStartUp(c, held) // closing
	}
}

// endStartUp gives back what the start-up held, when it stops early.
func (g *GPU) endStartUp(c *Config, held bool) {
	g.settled()
	g.update(func() {
		g.act.probing = false
		g.setJobLocked(nil)
	})
	if held {
		(&use{g: g, c: c}).end()
	}
}

// settle runs the start-up on the GPU's goroutine, with the GPU held for
// it (taken here if Apply could not at once): the hold store first, then
// the probe of the engines.
func (g *GPU) settle(c *Config, held bool) {
	if !held {
		if err := g.lock.AcquireExclusive(g.ctx, lock.ImageJob); err != nil {
			g.endStartUp(c, false)
			return
		}
	}
	if c.HoldStore != nil {
		if live := g.loadHolds(c); live != nil && g.restoreHold(c, live) {
			return
		}
	}
	g.settled()
	if len(c.Images) == 0 {
		g.endStartUp(c, true)
		for _, e := range c.LLMs {
			g.spawn(func() { g.probeLLM(c, e) })
		}
		return
	}
	g.setPhase("start-up probe")
	g.reconcileAtStart(&use{g: g, c: c})
}

// settled lets the image jobs and holds that waited for the start-up go
// on to the lock.
func (g *GPU) settled() {
	g.update(func() {
		if g.settling != nil {
			close(g.settling)
			g.settling = nil
		}
	})
}

// markStartUpLocked records the start-up as the work holding the GPU;
// g.mu is held.
func (g *GPU) markStartUpLocked(c *Config, phase string) {
	source := "start-up"
	if len(c.Images) > 0 {
		source = c.Images[0].Name()
	}
	g.act.probing = true
	g.setJobLocked(&Job{Source: source, Phase: phase, Started: time.Now()})
}

// currentWatcher returns the running watch over e's events, or nil.
func (g *GPU) currentWatcher(e ImageEngine) Watch {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w := g.watches[e.Name()]; w != nil {
		return w.w
	}
	return nil
}

func (g *GPU) reportWatch(e ImageEngine, connected bool, err error) {
	back := false
	g.withRun(e, func(r *engineRun) {
		was := r.ws
		r.ws = connected
		if connected {
			// Back up after it was down: an engine that restarted may
			// hold memory it loaded on its own (A1111 loads its
			// checkpoint at launch), and is freed before the GPU next
			// goes to LLM use. The first contact is the start-up
			// probe's to judge. Its loading already shares the GPU
			// with whatever LLM use goes on: the GPU is taken from
			// LLM use at once, as for direct work, to free it.
			back = !was && r.wsSeen
			r.wsSeen = true
			r.owed = r.owed || back
			r.up.set(nil)
		} else if err != nil {
			r.up.set(err) // lost contact: unreachable until it is back
		}
	})
	if connected {
		if back {
			g.spawn(func() { g.freeAfterReturn(e.Name()) })
		}
		g.log().Debug(e.Name() + "'s event stream connected")
		return
	}
	g.log().Warn(e.Name()+"'s event stream down; job ends are found by polling until it is back", zap.Error(err))
}

// reconcileAtStart runs with the lock held exclusively from start-up: it
// probes every engine at once, asking each image engine whether work is
// queued, and keeps the GPU until that work ends.
func (g *GPU) reconcileAtStart(u *use) { g.reconcile(u, u.c.LLMs, u.c.Images) }

// probeAdded probes the image engines a config reload added, as the
// start-up probe does all of them, once it has the GPU alone: one may
// hold memory from its launch (A1111 loads its checkpoint then) or have
// work queued, and the GPU goes to nobody beside it until it is freed.
func (g *GPU) probeAdded(c *Config, added []ImageEngine) {
	if err := g.lock.AcquireExclusive(g.ctx, lock.ImageJob); err != nil {
		return // closed
	}
	g.update(func() {
		g.act.probing = true
		g.setJobLocked(&Job{Source: added[0].Name(), Phase: "probe of an engine the config added", Started: time.Now()})
	})
	g.reconcile(&use{g: g, c: c}, nil, added)
}

// reconcile probes llms and images at once, with the lock held
// exclusively for u, and keeps the GPU until the work found queued on an
// image engine ends. An image engine that cannot be asked within
// probe_timeout is left to its watch, owing a free.
func (g *GPU) reconcile(u *use, llms []LLMEngine, images []ImageEngine) {
	c := u.c
	ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
	busy := make([]bool, len(images))
	var wg sync.WaitGroup
	for _, e := range llms {
		wg.Go(func() { g.probeLLM(c, e) })
	}
	for i, e := range images {
		wg.Go(func() { busy[i] = g.probeImage(ctx, c, e) })
	}
	wg.Wait()
	cancel()
	// Until the GPU is given back (after the free), it is the probe's,
	// unless work was found: then it is that work's.
	if slices.Contains(busy, true) {
		g.setProbing(false)
	}
	for i, e := range images {
		if busy[i] {
			g.drainDirect(u, e)
		}
	}
	g.setJob(nil)
	u.end()
	g.setProbing(false)
}

func (g *GPU) setProbing(on bool) { g.update(func() { g.act.probing = on }) }

// probeImage asks e whether work is queued, and reports whether it is.
// An engine owes a free unless it refused the connection: one that
// answers may hold memory, and so may one that could not be asked (a 503
// while it starts, a timeout).
func (g *GPU) probeImage(ctx context.Context, c *Config, e ImageEngine) bool {
	running, pending, err := g.probeQueue(ctx, e)
	switch {
	case err != nil && !engine.Refused(err):
		g.owe(e)
		g.log().Warn(e.Name()+" queue unknown; its watch takes over, and it is freed before LLM use",
			zap.String("url", RedactURL(e.URL())), zap.Error(err))
		return false
	case err != nil:
		return false // not running: no work, no memory
	}
	g.owe(e)
	if running+pending == 0 {
		return false
	}
	g.log().Info(e.Name()+" has queued work at start-up; holding the GPU for it",
		zap.Int("running", running), zap.Int("pending", pending))
	return true
}

// probeLLM reports at start-up whether an LLM engine answers, and whether
// it can be emptied.
func (g *GPU) probeLLM(c *Config, e LLMEngine) {
	ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
	defer cancel()
	models, err := e.Loaded(ctx)
	switch {
	case errors.Is(err, ErrCannotEmpty):
		g.withRun(e, func(r *engineRun) {
			r.up.set(nil)
			r.state = stateUnemptiable
		})
		g.log().Error(e.Name()+" cannot be emptied as it runs: image jobs and holds will be refused with 503 rather than share the GPU",
			zap.String("url", RedactURL(e.URL())), zap.Error(err))
		return
	case err != nil:
		g.probed(e, err)
		g.log().Warn(e.Name()+" not reachable at start-up; image jobs proceed only if it refuses connections (not running)",
			zap.String("url", RedactURL(e.URL())), zap.Error(err))
		return
	}
	g.withRun(e, func(r *engineRun) {
		r.up.set(nil)
		if r.state == stateUnemptiable {
			r.state = stateReady
		}
	})
	g.log().Info(e.Name()+" reachable", zap.String("url", RedactURL(e.URL())), zap.Int("models_loaded", len(models)))
	// A sleeping engine found at start (put to sleep before Caddy
	// started) queues every request until woken. It is woken once the
	// start-up probe gives the GPU to LLM use, or at once without one.
	if w, ok := e.(Waker); ok {
		if asleep, err := w.Asleep(ctx); err == nil && asleep {
			g.withRun(e, func(r *engineRun) {
				r.owed = true
				r.state = stateAsleep
			})
			g.log().Warn(e.Name() + " sleeps at start-up; it is woken before LLM use")
			if len(c.Images) == 0 && !g.wakeShared(c, e, w) {
				g.spawn(func() { g.retryWake(c, e, w) })
			}
		}
	}
}

// probeQueue reads an image engine's queue, retrying with backoff while it
// answers with errors, until ctx ends. A refused connection is final: no
// process, no work.
func (g *GPU) probeQueue(ctx context.Context, e ImageEngine) (running, pending int, err error) {
	c := g.cfg()
	delay := min(c.BackoffInitial, 100*time.Millisecond)
	for {
		running, pending, err = e.Queue(ctx)
		g.probed(e, err)
		if err == nil || engine.Refused(err) || ctx.Err() != nil {
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

// watchForeignWork takes the GPU for work started on an image engine
// directly (its own UI on its own port), which bypassed the turnstile: its
// events say the queue is not empty while no job of ours on it holds the
// GPU.
func (g *GPU) watchForeignWork(ctx context.Context, e ImageEngine, w Watch) {
	for {
		changed, recheck := w.Changed(), g.recheckDirect()
		if n, known := w.QueueRemaining(); known && n > 0 {
			// Work runs on it, whoever takes care of it: it owes a free.
			g.owe(e)
			if g.takeDirect(e) && !g.spawn(func() { g.runDirect(e.Name()) }) {
				g.endDirect(e) // closing
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-recheck:
		}
	}
}

// recheckDirect returns a channel closed when the watches should look at
// their engines' queues again: work seen while a job or direct work held
// the engine is then taken care of, though no new event may come (A1111's
// job_count stays at 1 for the rest of a UI job).
func (g *GPU) recheckDirect() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.recheck == nil {
		g.recheck = make(chan struct{})
	}
	return g.recheck
}

// pokeDirect closes the recheck channel; g.mu is held.
func (g *GPU) pokeDirect() {
	if g.recheck != nil {
		close(g.recheck)
		g.recheck = nil
	}
}

// runDirect takes the GPU for work started directly on e and keeps it
// until e's queue is empty. The queue is read again before and once the
// GPU is held: the event that started this may be stale (a job of ours
// that just ended), and then nothing is done.
func (g *GPU) runDirect(name string) {
	c := g.cfg()
	e := c.imageEngine(name)
	if e == nil {
		g.endDirectNamed(name)
		return // dropped by a reload
	}
	defer g.endDirect(e)
	// Taking the GPU holds LLM requests back: only for work that is there.
	// Work seen and over already may have left its models behind (or the
	// event was stale, a job of ours that just ended: one free more), so
	// the engine owes a free, paid at the next hand-over.
	if !g.queued(c, e) {
		g.owe(e)
		return
	}
	if err := g.acquireExclusive(g.ctx, lock.ImageJob); err != nil {
		return
	}
	u := &use{g: g, c: c}
	g.setJob(&Job{Engine: e.Name(), Source: e.Name(), Phase: "unloading", Started: time.Now()})
	defer func() {
		g.setJob(nil)
		u.end()
	}()
	if !g.queued(c, e) {
		return
	}
	g.log().Info(e.Name() + " has work that did not come through the turnstile; taking the GPU for it")
	g.drainDirect(u, e)
}

// queued reads e's queue now: false only if it answered that nothing is
// running or pending.
func (g *GPU) queued(c *Config, e ImageEngine) bool {
	ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
	defer cancel()
	running, pending, err := e.Queue(ctx)
	return err != nil || running+pending > 0
}

// drainDirect empties the LLM engines (and frees the other image engines)
// and waits until e's queue is empty; u holds the GPU. The work ran, so e
// owes a free; the warm model is loaded again after, whether the emptying
// succeeded or not.
func (g *GPU) drainDirect(u *use, e ImageEngine) {
	c := u.c
	u.owesFree, u.warmAfter = true, true
	g.owe(e)
	if _, err := g.emptyForExclusive(g.ctx, c, e, ""); err != nil {
		g.log().Error("GPU not emptied while "+e.Name()+" runs work started on it directly", zap.Error(err))
	}
	g.setPhase("draining queue")
	ctx, cancel := context.WithTimeout(g.ctx, c.JobTimeout)
	defer cancel()
	start := time.Now()
	err := e.WaitIdle(ctx, g.currentWatcher(e))
	g.log().Info(e.Name()+" queue drained", zap.Duration("duration", time.Since(start)), zap.Error(err))
}

// freeAfterReturn takes the GPU alone for an image engine seen back after
// a loss of contact (it may have restarted and loaded its checkpoint, as
// A1111 does at launch), as for work started on it directly: the LLM
// requests in flight drain, none is admitted meanwhile, and the engine is
// freed and the free confirmed before the GPU goes back to LLM use. While
// the GPU is in exclusive use, or a job of ours or direct work holds the
// engine, the free it owes is paid when that use gives the GPU back.
func (g *GPU) freeAfterReturn(name string) {
	c := g.cfg()
	e := c.imageEngine(name)
	if e == nil || !g.takeDirect(e) {
		return
	}
	defer g.endDirect(e)
	if st := g.State(); st == lock.Image || st == lock.Hold {
		return
	}
	if err := g.acquireExclusive(g.ctx, lock.ImageJob); err != nil {
		return
	}
	g.log().Warn(e.Name() + " is back after a loss of contact and may have loaded memory on its own; taking the GPU to free it")
	g.setJob(&Job{Engine: e.Name(), Source: e.Name(), Phase: "freeing after a loss of contact", Started: time.Now()})
	u := &use{g: g, c: c, owesFree: true}
	defer func() {
		g.setJob(nil)
		u.end()
	}()
	// Work queued on it meanwhile is drained first, as direct work.
	if g.queued(c, e) {
		g.drainDirect(u, e)
	}
}
