package turnstile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/comfy"
)

// turnstiles holds one runtime per turnstile name, process-wide. Each
// config generation takes a reference in Provision and drops it in
// Cleanup, so a reload (which provisions the new config before cleaning up
// the old) keeps the same lock, the same running job and the same holds.
var turnstiles = caddy.NewUsagePool()

// turnstile is the runtime of one named turnstile: its lock, the settings
// of the config now running, and the work in flight. It outlives any one
// config.
type turnstile struct {
	name    string
	lock    *lock.Lock
	metrics *turnstileMetrics
	history *history

	cfgp atomic.Pointer[config]
	logp atomic.Pointer[zap.Logger]

	// ctx ends when the last config that uses this turnstile is cleaned
	// up (Caddy stops); background work and job watches end with it.
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	started   bool
	watchURL  string
	watcher   *comfy.Watcher
	stopWatch context.CancelFunc
	job       *jobInfo
	holds     map[string]*hold

	waiting waitTracker // when each waiting request started waiting
	budget  waitBudget  // what waiting requests hold (budget.go)
	foreign atomic.Bool // a watch over work queued directly on ComfyUI runs
	probing atomic.Bool // the start-up probe holds the lock
	// abnormal is when LLM use last ended abnormally (UnixNano; 0: not
	// since Ollama was last confirmed empty). See emptyOllama.
	abnormal atomic.Int64
	warming  atomic.Bool // a warm-up holds a shared place
	ollamaUp,
	comfyUp reachability
	wsUp atomic.Bool
	// noGPUReading is set once ComfyUI is seen to report no GPU memory.
	noGPUReading atomic.Bool

	trMu       sync.Mutex // guards the fields Transition writes
	since      time.Time  // when the current state began
	lastSwitch time.Time  // when the GPU last went from one service to another
	lastUser   lock.State // the last non-idle state
}

// jobInfo describes the image work holding the GPU.
type jobInfo struct {
	PromptID string    `json:"prompt_id,omitempty"`
	Source   string    `json:"source"` // "proxy" or "comfyui" (queued directly)
	Phase    string    `json:"phase"`  // "unloading", "submitting", "running", "draining queue"
	Started  time.Time `json:"started"`
}

// reachability is what the last contact with an upstream showed.
type reachability struct{ v atomic.Int32 }

func (r *reachability) set(err error) {
	if err == nil {
		r.v.Store(1)
	} else {
		r.v.Store(2)
	}
}

// get returns nil while unknown.
func (r *reachability) get() *bool {
	switch r.v.Load() {
	case 1:
		t := true
		return &t
	case 2:
		f := false
		return &f
	}
	return nil
}

func newTurnstile(name string) *turnstile {
	ctx, cancel := context.WithCancel(context.Background())
	ts := &turnstile{
		name:    name,
		metrics: newTurnstileMetrics(name),
		history: newHistory(historySize),
		ctx:     ctx,
		cancel:  cancel,
		holds:   map[string]*hold{},
		since:   time.Now(),
	}
	ts.logp.Store(zap.NewNop())
	ts.lock = lock.New(ts, lock.Options{})
	// What Ollama was doing before Caddy started is unknown: the first
	// emptying is confirmed as after an abnormal end, without waiting out
	// an abort that happened before Caddy was there to see it.
	ts.abnormal.Store(time.Now().Add(-abortSettle).UnixNano())
	return ts
}

// Destruct implements caddy.Destructor: the last config using this
// turnstile is gone (Caddy stops). Job watches and holds end, which
// releases the lock.
func (ts *turnstile) Destruct() error {
	ts.endHolds()
	ts.mu.Lock()
	if ts.stopWatch != nil {
		ts.stopWatch()
	}
	ts.mu.Unlock()
	ts.cancel()
	return nil
}

func (ts *turnstile) cfg() *config     { return ts.cfgp.Load() }
func (ts *turnstile) log() *zap.Logger { return ts.logp.Load() }

// apply makes a started config's settings current. It runs in the app's
// Start, so a config that fails to load changes nothing.
func (ts *turnstile) apply(c *config, log *zap.Logger) {
	ts.cfgp.Store(c)
	ts.logp.Store(log)
	ts.lock.SetOptions(lock.Options{MaxExclusiveStreak: c.MaxImageStreak})

	ts.mu.Lock()
	defer ts.mu.Unlock()
	if c.Comfy != ts.watchURL {
		if ts.stopWatch != nil {
			ts.stopWatch()
			ts.stopWatch, ts.watcher = nil, nil
		}
		ts.watchURL = c.Comfy
		if c.comfy != nil {
			ctx, cancel := context.WithCancel(ts.ctx)
			ts.stopWatch = cancel
			ts.watcher = c.comfy.NewWatcher("gpu-turnstile-"+ts.name+"-"+randomID(), c.backoffInitial, c.backoffMax, ts.reportWatch)
			go ts.watcher.Run(ctx)
			go ts.watchForeignWork(ctx, ts.watcher)
		}
	}
	if !ts.started {
		ts.started = true
		if c.ollama != nil {
			go ts.probeOllama(c)
		}
		if c.comfy != nil {
			// Until ComfyUI's queue is known to be empty, treat the GPU as
			// ComfyUI's: a job may have been queued before Caddy started.
			if err := ts.lock.AcquireExclusive(ts.ctx, lock.Image); err == nil {
				ts.probing.Store(true)
				ts.job = &jobInfo{Source: "comfyui", Phase: "start-up probe", Started: time.Now()}
				go ts.reconcileAtStart(c)
			}
		}
	}
}

func (ts *turnstile) currentWatcher() *comfy.Watcher {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.watcher
}

func (ts *turnstile) reportWatch(connected bool, err error) {
	ts.wsUp.Store(connected)
	if connected {
		ts.comfyUp.set(nil)
		ts.log().Debug("comfyui websocket connected")
		return
	}
	ts.log().Warn("comfyui websocket down; job ends are found by polling until it is back", zap.Error(err))
}

// reconcileAtStart runs with the lock held exclusively from start-up: it
// asks ComfyUI whether work is queued, and keeps the GPU for it until it
// ends. If ComfyUI cannot be asked within probe_timeout, the GPU is
// released and the websocket watch takes over.
func (ts *turnstile) reconcileAtStart(c *config) {
	ctx, cancel := context.WithTimeout(ts.ctx, c.probeTimeout)
	running, pending, err := ts.probeQueue(ctx, c)
	cancel()
	ts.probing.Store(false)
	jobRan := false
	switch {
	case err != nil && !comfy.Refused(err):
		ts.log().Warn("comfyui queue unknown at start-up; GPU released, the websocket watch takes over",
			zap.String("url", c.Comfy), zap.Error(err))
	case len(running)+len(pending) > 0:
		ts.log().Info("comfyui has queued work at start-up; holding the GPU for it",
			zap.Int("running", len(running)), zap.Int("pending", len(pending)))
		ts.drainForeign(c)
		jobRan = true
	}
	ts.setJob(nil)
	ts.releaseExclusive(jobRan, jobRan)
}

// probeOllama reports at start-up whether Ollama answers.
func (ts *turnstile) probeOllama(c *config) {
	ctx, cancel := context.WithTimeout(ts.ctx, c.probeTimeout)
	defer cancel()
	models, err := c.ollama.PS(ctx)
	ts.ollamaUp.set(err)
	if err != nil {
		ts.log().Warn("ollama not reachable at start-up; image jobs proceed only if it refuses connections (not running)",
			zap.String("url", c.Ollama), zap.Error(err))
		return
	}
	ts.log().Info("ollama reachable", zap.String("url", c.Ollama), zap.Int("models_loaded", len(models)))
}

// probeQueue reads ComfyUI's queue, retrying with backoff while ComfyUI
// answers with errors, until ctx ends. A refused connection is final: no
// ComfyUI process, no work.
func (ts *turnstile) probeQueue(ctx context.Context, c *config) (running, pending []string, err error) {
	delay := min(c.backoffInitial, 100*time.Millisecond)
	for {
		running, pending, err = c.comfy.Queue(ctx)
		ts.comfyUp.set(err)
		if err == nil || comfy.Refused(err) || ctx.Err() != nil {
			return running, pending, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, err
		case <-time.After(delay):
		}
		delay = min(delay*2, c.backoffMax)
	}
}

// watchForeignWork takes the GPU for work queued on ComfyUI directly (its
// own UI on its own port), which bypassed the turnstile: the broadcasts say
// the queue is not empty while no job of ours holds the GPU.
func (ts *turnstile) watchForeignWork(ctx context.Context, w *comfy.Watcher) {
	for {
		changed := w.Changed()
		if n, known := w.QueueRemaining(); known && n > 0 && !ts.jobActive() && ts.foreign.CompareAndSwap(false, true) {
			go ts.runForeign()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func (ts *turnstile) jobActive() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.job != nil
}

func (ts *turnstile) runForeign() {
	defer ts.foreign.Store(false)
	c := ts.cfg()
	ts.log().Info("comfyui has work that did not come through the turnstile; taking the GPU for it")
	if err := ts.acquireExclusive(ts.ctx, lock.Image); err != nil {
		return
	}
	ts.setJob(&jobInfo{Source: "comfyui", Phase: "unloading", Started: time.Now()})
	ts.drainForeign(c)
	ts.setJob(nil)
	ts.releaseExclusive(true, true)
}

// drainForeign empties Ollama and waits until ComfyUI's queue is empty;
// the caller holds the lock exclusively.
func (ts *turnstile) drainForeign(c *config) {
	if err := ts.unloadOllama(c); err != nil {
		ts.log().Error("ollama not emptied while comfyui runs work queued directly", zap.Error(err))
	}
	ts.setPhase("draining queue")
	ctx, cancel := context.WithTimeout(ts.ctx, c.jobTimeout)
	defer cancel()
	start := time.Now()
	err := c.comfy.WaitIdle(ctx, ts.currentWatcher(), c.historyPoll)
	ts.log().Info("comfyui queue drained", zap.Duration("duration", time.Since(start)), zap.Error(err))
}

func (ts *turnstile) setJob(j *jobInfo) {
	ts.mu.Lock()
	ts.job = j
	ts.mu.Unlock()
}

func (ts *turnstile) setPhase(phase string) {
	ts.mu.Lock()
	if ts.job != nil {
		j := *ts.job
		j.Phase = phase
		ts.job = &j
	}
	ts.mu.Unlock()
}

func (ts *turnstile) setPromptID(id string) {
	ts.mu.Lock()
	if ts.job != nil {
		j := *ts.job
		j.PromptID, j.Phase = id, "running"
		ts.job = &j
	}
	ts.mu.Unlock()
}

// acquireExclusive waits for the GPU for an image job or a hold. With
// early_unload, Ollama is asked to unload while the LLM requests drain.
func (ts *turnstile) acquireExclusive(ctx context.Context, kind lock.Kind) error {
	if c := ts.cfg(); c.EarlyUnload && c.ollama != nil && ts.lock.State() == lock.LLM {
		go ts.unloadEarly(c)
	}
	start := time.Now()
	id := ts.waiting.add(start)
	err := ts.lock.AcquireExclusive(ctx, kind)
	ts.waiting.done(id)
	if err != nil {
		return err
	}
	waited := time.Since(start).Seconds()
	if kind == lock.Hold {
		ts.metrics.waitHold.Observe(waited)
	} else {
		ts.metrics.waitImage.Observe(waited)
	}
	return nil
}

// Free implements lock.Effects: ComfyUI's memory is freed, and the free
// confirmed, before the GPU leaves exclusive use.
func (ts *turnstile) Free() {
	c := ts.cfg()
	if c == nil || c.comfy == nil || ts.ctx.Err() != nil {
		return // no ComfyUI, or Caddy is stopping and nobody will use the GPU after
	}
	ctx, cancel := context.WithTimeout(ts.ctx, c.freeTimeout)
	defer cancel()
	start := time.Now()
	freed, err := c.comfy.FreeAndConfirm(ctx, c.unloadPoll)
	if errors.Is(err, comfy.ErrNoGPUReading) {
		ts.reportNoGPUReading(err)
		err = nil
	}
	if err == nil && freed == comfy.FreedUnverified {
		ts.log().Debug("comfyui free sent but not confirmed: its /system_stats does not show PyTorch's reserved memory falling")
	}
	took := time.Since(start)
	if err == nil {
		if verr := ts.waitVRAM(c, max(c.freeTimeout-took, 0), "LLM use"); verr != nil {
			ts.log().Warn("LLM requests go ahead without the memory min_free_vram asks for", zap.Error(verr))
		}
		took = time.Since(start)
	}
	switch {
	case err == nil:
		ts.comfyUp.set(nil)
		ts.metrics.free.Observe(took.Seconds())
		ts.history.addEvent("free", took, "")
		ts.log().Info("comfyui freed", zap.Duration("duration", took))
	case comfy.Refused(err):
		ts.comfyUp.set(err)
		ts.log().Warn("comfyui refuses connections: not running, so holding no GPU memory", zap.Error(err))
	default:
		ts.metrics.upstreamErrors.WithLabelValues(ts.name, "comfy", "free").Inc()
		ts.log().Error("comfyui free not confirmed within free_timeout; releasing the GPU anyway",
			zap.Duration("free_timeout", c.freeTimeout), zap.Error(err))
	}
}

// reportNoGPUReading says once, in the log and the status, that ComfyUI
// reports no GPU memory, so its frees and min_free_vram's comfy probe
// cannot be confirmed.
func (ts *turnstile) reportNoGPUReading(err error) {
	if ts.noGPUReading.CompareAndSwap(false, true) {
		ts.log().Warn("comfyui reports no GPU memory: its frees are not confirmed, and min_free_vram is not checked through it (use vram_probe nvidia-smi)",
			zap.Error(err))
	}
}

// Transition implements lock.Effects. It runs under the lock's mutex.
func (ts *turnstile) Transition(from, to lock.State) {
	now := time.Now()
	ts.trMu.Lock()
	ts.since = now
	if to != lock.Idle {
		if ts.lastUser != lock.Idle && ts.lastUser != to {
			ts.lastSwitch = now
		}
		ts.lastUser = to
	}
	ts.trMu.Unlock()
	ts.history.addTransition(now, from, to)
	if log := ts.log(); log.Core().Enabled(zap.DebugLevel) {
		log.Debug("lock transition", zap.Stringer("from", from), zap.Stringer("to", to))
	}
}

// releaseExclusive gives the lock back after exclusive use. If it is not
// handed to another exclusive waiter and rewarm is set (Ollama was
// emptied for this use), the warm model is loaded again.
func (ts *turnstile) releaseExclusive(jobRan, rewarm bool) {
	if !ts.lock.ReleaseExclusive(jobRan) && rewarm {
		ts.warm()
	}
}

// warm loads warm_model in the background as a shared holder of the lock,
// so an image job that arrives meanwhile waits for it to finish instead of
// unloading a model that is still loading. If an exclusive waiter is
// already queued, there is no point: nothing is warmed.
func (ts *turnstile) warm() {
	c := ts.cfg()
	if c == nil || c.WarmModel == "" || c.ollama == nil || !ts.lock.TryAcquireShared() {
		return
	}
	ts.warming.Store(true)
	go func() {
		defer ts.lock.ReleaseShared()
		defer ts.warming.Store(false)
		ctx, cancel := context.WithTimeout(ts.ctx, c.warmTimeout)
		defer cancel()
		start := time.Now()
		err := c.ollama.Warm(ctx, c.WarmModel, "")
		took := time.Since(start)
		ts.ollamaUp.set(err)
		if err != nil {
			ts.markAbnormal() // a warm-up cut short leaves its runner behind a while
			ts.metrics.upstreamErrors.WithLabelValues(ts.name, "ollama", "warm").Inc()
			ts.log().Warn("warm-up failed", zap.String("model", c.WarmModel), zap.Duration("duration", took), zap.Error(err))
			return
		}
		ts.metrics.warm.Observe(took.Seconds())
		ts.history.addEvent("warm", took, c.WarmModel)
		ts.log().Info("model warmed", zap.String("model", c.WarmModel), zap.Duration("duration", took))
	}()
}

// waitTracker remembers when each waiting request began to wait, for the
// status' oldest_wait_seconds. Only waiting requests pay for it.
type waitTracker struct {
	mu    sync.Mutex
	next  uint64
	since map[uint64]time.Time
}

func (w *waitTracker) add(t time.Time) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.since == nil {
		w.since = map[uint64]time.Time{}
	}
	w.next++
	w.since[w.next] = t
	return w.next
}

func (w *waitTracker) done(id uint64) {
	w.mu.Lock()
	delete(w.since, id)
	w.mu.Unlock()
}

func (w *waitTracker) oldest() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var o time.Time
	for _, t := range w.since {
		if o.IsZero() || t.Before(o) {
			o = t
		}
	}
	return o
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Interface guards
var (
	_ caddy.Destructor = (*turnstile)(nil)
	_ lock.Effects     = (*turnstile)(nil)
)
