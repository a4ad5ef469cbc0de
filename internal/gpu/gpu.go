// Package gpu orchestrates one GPU shared by an LLM engine (Ollama) and an
// image engine (ComfyUI): it decides what the GPU does. It takes the lock
// of package lock for each use, empties Ollama before exclusive use, frees
// ComfyUI after it and warms a model again, watches image jobs to their
// end, guards work queued on ComfyUI directly, and keeps holds, the recent
// history and the status.
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

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// Config is what the orchestration of one GPU needs of a turnstile's
// settings, with defaults filled in and clients built.
type Config struct {
	LLM   LLMEngine   // nil if none
	Image ImageEngine // nil if none

	WarmModel      string // "" for none
	EarlyUnload    bool
	MaxImageStreak int
	MinFreeVRAM    int64
	Probe          VRAMProbe // nil without min_free_vram

	UnloadTimeout, JobTimeout, FreeTimeout, InterruptGrace, WarmTimeout time.Duration
	// UnloadPoll paces the VRAM checks; ProbeTimeout bounds each probe
	// and the start-up probes; the backoff paces retries of the start-up
	// queue probe.
	UnloadPoll, ProbeTimeout, BackoffInitial, BackoffMax time.Duration
}

// Metrics receives what the orchestration measures. Every method must be
// cheap and safe for concurrent use.
type Metrics interface {
	// Waited reports how long an exclusive user (image job, hold) waited.
	Waited(kind lock.State, d time.Duration)
	// Step reports a timed step: "unload", "free" or "warm".
	Step(step string, d time.Duration)
	// UpstreamError counts a failed call to an upstream ("ollama",
	// "comfy", "vram") for an operation ("unload", "free", "warm", "probe").
	UpstreamError(upstream, op string)
	// JobEnded reports an image job that held the GPU, by outcome.
	JobEnded(outcome string, d time.Duration)
	// HoldEvent counts a hold's event: granted, released, expired,
	// cancelled, failed, shutdown.
	HoldEvent(event string)
}

// GPU is the orchestration of one GPU. It outlives any one config: Apply
// makes a config current, Close ends everything.
type GPU struct {
	name    string
	lock    *lock.Lock
	metrics Metrics
	history *history

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

	mu        sync.Mutex // guards what follows, up to abnormal
	started   bool
	watchURL  string
	watcher   Watch // the image engine's, nil without one
	stopWatch context.CancelFunc
	act       activity // what holds or waits for the GPU (activity.go)

	// abnormal is when LLM use last ended abnormally (UnixNano; 0: not
	// since the LLM engine was last confirmed empty). See emptyLLM.
	abnormal atomic.Int64
	// What the engines' health was at last contact; not what the GPU
	// does, which is act's.
	llmUp,
	imageUp reachability
	wsUp atomic.Bool
	// noGPUReading is set once the image engine is seen to report no GPU
	// memory.
	noGPUReading atomic.Bool

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
		ctx:     ctx,
		cancel:  cancel,
		act:     activity{holds: map[string]*Hold{}},
		since:   time.Now(),
	}
	g.logp.Store(zap.NewNop())
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
	if g.stopWatch != nil {
		g.stopWatch()
	}
	g.mu.Unlock()
	g.cancel()
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
	g.cfgp.Store(c)
	g.logp.Store(log)
	g.lock.SetOptions(lock.Options{MaxExclusiveStreak: c.MaxImageStreak})

	g.mu.Lock()
	defer g.mu.Unlock()
	if url := imageURL(c); url != g.watchURL {
		if g.stopWatch != nil {
			g.stopWatch()
			g.stopWatch, g.watcher = nil, nil
		}
		g.watchURL = url
		if c.Image != nil {
			ctx, cancel := context.WithCancel(g.ctx)
			g.stopWatch = cancel
			g.watcher = c.Image.Watch("gpu-turnstile-"+g.name+"-"+randomID(), g.reportWatch)
			w := g.watcher
			g.spawn(func() { w.Run(ctx) })
			g.spawn(func() { g.watchForeignWork(ctx, w) })
		}
	}
	if !g.started {
		g.started = true
		g.startUp(c)
	}
}

func imageURL(c *Config) string {
	if c.Image == nil {
		return ""
	}
	return c.Image.URL()
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
	g.history.addTransition(now, from, to)
	if log := g.log(); log.Core().Enabled(zap.DebugLevel) {
		log.Debug("lock transition", zap.Stringer("from", from), zap.Stringer("to", to))
	}
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

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Interface guards
var _ lock.Effects = (*GPU)(nil)
