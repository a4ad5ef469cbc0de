// Package gpu orchestrates one GPU shared by LLM engines (Ollama,
// llama.cpp, llama-swap, vLLM) and image engines (ComfyUI, Automatic1111
// and Forge): it decides what the GPU does. It takes the lock of package
// lock for each use, empties every LLM engine before exclusive use, frees
// the image engines after it, wakes the LLM engines that need it and warms
// a model again, watches image jobs to their end, guards work started on
// an image engine directly, and keeps holds, the recent history and the
// status.
//
// It knows nothing of Caddy or Prometheus: the caller brings the settings
// (Config), a Metrics sink and a logger, and answers HTTP itself. Logs go
// through the *zap.Logger the caller hands in, since that is what Caddy
// gives every module; a logger interface of our own would only add an
// adapter and lose zap's cheap level check on the hot paths.
package gpu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/presence"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// Config is what the orchestration of one GPU needs of a turnstile's
// settings, with defaults filled in and clients built.
type Config struct {
	LLMs   []LLMEngine   // in config order
	Images []ImageEngine // in config order

	WarmModel      string    // "" for none
	WarmEngine     LLMEngine // the engine that warms it; nil for the first of LLMs
	EarlyUnload    bool
	MaxImageStreak int
	MinFreeVRAM    int64
	Probe          VRAMProbe // nil without min_free_vram

	UnloadTimeout, JobTimeout, FreeTimeout, InterruptGrace, WarmTimeout time.Duration
	// Presence are the hold_while conditions: while one holds, the GPU is
	// held for the person at the machine. Sampled every PresencePoll,
	// released once clear for HoldReleaseAfter.
	Presence                       []presence.Sampler
	PresencePoll, HoldReleaseAfter time.Duration
	// PresenceOff are the hold_while conditions that cannot run on this
	// host, with why (no nvidia-smi): the status shows them.
	PresenceOff map[string]string

	// UnloadPoll paces the VRAM checks; ProbeTimeout bounds each probe
	// and the start-up probes; the backoff paces retries of the start-up
	// queue probe.
	UnloadPoll, ProbeTimeout, BackoffInitial, BackoffMax time.Duration

	// HoldStore keeps the holds across restarts; nil keeps them in memory
	// only. The first config's store is the one holds are restored from.
	HoldStore HoldStore
}

// Metrics receives what the orchestration measures. Every method must be
// cheap and safe for concurrent use.
type Metrics interface {
	// Waited reports how long an exclusive user (image job, hold) waited.
	Waited(kind lock.State, d time.Duration)
	// Step reports a timed step of an engine (by name): "unload", "free",
	// "wake" or "warm".
	Step(step, engine string, d time.Duration)
	// UpstreamError counts a failed call to an upstream for an operation
	// ("unload", "free", "wake", "warm", "probe"): upstream is an engine's
	// kind ("ollama", "comfy" for ComfyUI) or "vram", engine its name
	// ("" for vram).
	UpstreamError(upstream, engine, op string)
	// JobEnded reports an image job that held the GPU, by outcome.
	JobEnded(outcome string, d time.Duration)
	// HoldEvent counts a hold's event: granted, released, expired,
	// cancelled, busy (refused without waiting), failed, shutdown, restored
	// (taken again at start-up from the hold store).
	HoldEvent(event string)
	// InterruptOverdue counts an interrupted image job whose engine (by
	// name) did not show its end within interrupt_grace.
	InterruptOverdue(engine string)
}

// GPU is the orchestration of one GPU. It outlives any one config: Apply
// makes a config current, Close ends everything.
type GPU struct {
	name    string
	lock    *lock.Lock
	metrics Metrics
	history *history
	hub     *hub // the live events (events.go)

	cfgp atomic.Pointer[Config]
	logp atomic.Pointer[zap.Logger]

	// ctx ends with Close; background work and job watches end with it.
	ctx    context.Context
	cancel context.CancelFunc

	// Every goroutine the GPU starts is counted in running (see spawn), and
	// Close waits for them all.
	goMu    sync.Mutex
	closed  bool
	running sync.WaitGroup

	mu       sync.Mutex // guards what follows, up to abnormal
	started  bool
	watches  map[string]*engineWatch   // by image engine name
	presence map[string]*presenceState // by hold_while condition
	recheck  chan struct{}             // closed to have the watches look again (recheckDirect)
	act      activity                  // what holds or waits for the GPU (activity.go)
	imageJob *ImageJob                 // the proxied image job holding the GPU, for CancelJob

	// releasing is the use giving the GPU back, while it does: the Free
	// effect that may run then is a step of its trace. (A waiter granted
	// the GPU just after its wait was cancelled gives it back at once; a
	// free it runs before the last holder has cleared this is traced as
	// that holder's, whose debt it pays.)
	releasing atomic.Pointer[use]

	// abnormal is when LLM use last ended abnormally (UnixNano; 0: not
	// since the LLM engines were last confirmed empty). See emptyLLM.
	abnormal atomic.Int64

	// runs are the engines' records, by name (engines.go).
	runsMu sync.Mutex
	runs   atomic.Pointer[map[string]*engineRun]

	// trMu guards the fields Transition writes. Transition runs under
	// the lock's mutex, and code holding mu calls into the lock, so it
	// cannot take mu.
	trMu       sync.Mutex
	since      time.Time  // when the current state began
	lastSwitch time.Time  // when the GPU last went from one service to another
	lastUser   lock.State // the last non-idle state
}

// New returns the orchestration of the GPU named name, idle, with no
// config yet. m receives its measurements.
func New(name string, m Metrics) *GPU {
	ctx, cancel := context.WithCancel(context.Background())
	g := &GPU{
		name:    name,
		metrics: m,
		history: newHistory(historySize),
		hub:     newHub(),
		ctx:     ctx,
		cancel:  cancel,
		act:     activity{holds: map[string]*Hold{}},
		since:   time.Now(),
	}
	g.logp.Store(zap.NewNop())
	g.history.recorded = g.recorded
	g.lock = lock.New(g, lock.Options{})
	// What the LLM engine was doing before Caddy started is unknown: the
	// first emptying is confirmed as after an abnormal end, long ago.
	g.abnormal.Store(1)
	return g
}

// Lock returns the GPU's lock. The LLM fast path takes it directly.
func (g *GPU) Lock() *lock.Lock { return g.lock }

// Name returns the GPU's (turnstile's) name.
func (g *GPU) Name() string { return g.name }

// Close ends job watches, holds and background work, which releases the
// lock, and returns once every goroutine the GPU started has returned.
// The GPU is not used after.
func (g *GPU) Close() {
	g.endHolds()
	g.mu.Lock()
	for _, w := range g.watches {
		w.stop()
	}
	g.mu.Unlock()
	g.cancel()
	g.hub.closeAll()
	g.goMu.Lock()
	g.closed = true
	g.goMu.Unlock()
	g.running.Wait()
}

// spawn runs f in a goroutine that Close waits for. Once Close has begun,
// f runs at once in the caller instead (a job's end must still give the
// lock back): with ctx done it returns quickly, and Close never waits for
// a goroutine it could not have seen start. Callers of spawn do not hold
// g.mu, except Apply, which does nothing once Close has begun.
func (g *GPU) spawn(f func()) {
	g.goMu.Lock()
	if g.closed {
		g.goMu.Unlock()
		f()
		return
	}
	g.running.Add(1)
	g.goMu.Unlock()
	go func() {
		defer g.running.Done()
		f()
	}()
}

func (g *GPU) cfg() *Config     { return g.cfgp.Load() }
func (g *GPU) log() *zap.Logger { return g.logp.Load() }

// Apply makes a started config's settings current; the first call also
// starts the start-up probes.
func (g *GPU) Apply(c *Config, log *zap.Logger) {
	if g.ctx.Err() != nil {
		return // closed
	}
	added := g.register(c)
	g.cfgp.Store(c)
	g.logp.Store(log)
	g.lock.SetOptions(lock.Options{MaxExclusiveStreak: c.MaxImageStreak})

	g.mu.Lock()
	defer g.mu.Unlock()
	g.watchEngines(c)
	g.watchPresence(c)
	if !g.started {
		g.started = true
		g.startUp(c)
	} else if len(added) > 0 {
		g.spawn(func() { g.probeAdded(c, added) })
	}
}

// engineWatch is the running watch over one image engine's events.
type engineWatch struct {
	url  string
	w    Watch
	stop context.CancelFunc
}

// watchEngines starts a watch over each image engine of c whose URL is new,
// and stops those of engines c no longer has. It runs under g.mu.
func (g *GPU) watchEngines(c *Config) {
	if g.watches == nil {
		g.watches = map[string]*engineWatch{}
	}
	keep := map[string]bool{}
	for _, e := range c.Images {
		keep[e.Name()] = true
		if w := g.watches[e.Name()]; w != nil && w.url == e.URL() {
			continue
		} else if w != nil {
			w.stop()
		}
		ctx, cancel := context.WithCancel(g.ctx)
		run := g.run(e)
		w := e.Watch("gpu-turnstile-"+g.name+"-"+randomID(), func(up bool, err error) { g.reportWatch(e, run, up, err) })
		g.watches[e.Name()] = &engineWatch{url: e.URL(), w: w, stop: cancel}
		g.spawn(func() { w.Run(ctx) })
		g.spawn(func() { g.watchForeignWork(ctx, e, w) })
	}
	for name, w := range g.watches {
		if !keep[name] {
			w.stop()
			delete(g.watches, name)
		}
	}
}

// Transition implements lock.Effects. It runs under the lock's mutex.
func (g *GPU) Transition(from, to lock.State) {
	now := time.Now()
	g.trMu.Lock()
	g.since = now
	if to != lock.Idle {
		if g.lastUser != lock.Idle && g.lastUser != to {
			g.lastSwitch = now
		}
		g.lastUser = to
	}
	g.trMu.Unlock()
	if to == lock.LLM {
		g.resumeLLM()
	}
	g.history.addTransition(now, from, to)
	if log := g.log(); log.Core().Enabled(zap.DebugLevel) {
		log.Debug("lock transition", zap.Stringer("from", from), zap.Stringer("to", to))
	}
}

// reachability is what the last contact with an upstream showed, and
// when one last succeeded.
type reachability struct {
	v    atomic.Int32
	okAt atomic.Int64 // UnixNano of the last successful contact
}

func (r *reachability) set(err error) {
	if err == nil {
		r.okAt.Store(time.Now().UnixNano())
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

// fresh reports whether the last contact succeeded within window of now.
func (r *reachability) fresh(now time.Time, window time.Duration) bool {
	return r.v.Load() == 1 && now.Sub(time.Unix(0, r.okAt.Load())) < window
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Interface guards
var (
	_ lock.Effects  = (*GPU)(nil)
	_ lock.Observer = (*GPU)(nil)
)
