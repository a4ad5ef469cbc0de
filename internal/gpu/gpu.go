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
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
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
	// Memory is memory-aware admission; nil when off.
	Memory *MemoryConfig

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
	// ProcessStore keeps what is known of the LLM engines' processes
	// across restarts; nil keeps it in memory only.
	ProcessStore ProcessStore
	// LearnedStore keeps the figures measured here (job and step times)
	// across restarts; nil keeps them in memory only. The first
	// config's store is the one they are read from.
	LearnedStore LearnedStore
	// CardProcesses lists the compute processes on the card and the
	// memory each uses (vram_probe nvidia-smi); nil where the card is
	// not read that way.
	CardProcesses func(ctx context.Context) (map[int32]int64, error)
	// CardUsed reads the card's used memory, where CardProcesses is set.
	CardUsed func(ctx context.Context) (int64, error)
}

// Metrics receives what the orchestration measures. Every method must be
// cheap and safe for concurrent use.
type Metrics interface {
	// Waited reports how long an exclusive user (image job, hold), or an
	// LLM request that waited for a shared place (ServeLLM), waited.
	Waited(kind lock.State, d time.Duration)
	// Step reports a timed step of an engine (by name): "unload", "free",
	// "wake" or "warm".
	Step(step, engine string, d time.Duration)
	// UpstreamError counts a failed call to an upstream for an operation
	// ("unload", "free", "wake", "warm", "probe"): upstream is an engine's
	// kind's label (engine.Kind.LabelOrName) or "vram", engine its name
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
	// CoResident counts an LLM request admitted beside an image job
	// (co_resident).
	CoResident()
}

// GPU is the orchestration of one GPU. It outlives any one config: Apply
// makes a config current, Close ends everything.
type GPU struct {
	name    string
	lock    *lock.Lock
	metrics Metrics

	cfgp atomic.Pointer[Config]
	logp atomic.Pointer[zap.Logger]
	// watched is set while anyone holds the channel of Changed or
	// subscribes to the events: the lock's observer, on every LLM
	// request's way, reads it and does nothing more while it is clear.
	watched atomic.Bool
	// unreached is set while an engine's last contact failed, so that a
	// successful forward, which checks it, records a contact only then.
	unreached atomic.Bool

	// ctx ends with Close; background work and job watches end with it.
	ctx    context.Context
	cancel context.CancelFunc

	// Every goroutine the GPU starts is counted in running (see spawn), and
	// Close waits for them all.
	running sync.WaitGroup

	// lookKick asks the process loop for a look at the LLM engines
	// (processes.go); lookMu makes one look at a time.
	lookKick    chan struct{}
	lookMu      sync.Mutex
	listenCache map[string]*listenerCache // by engine name, under lookMu
	// learnSave makes one save of the learned figures at a time
	// (learned.go).
	learnSave sync.Mutex

	mu sync.Mutex // the owner of state: a leaf (state.go)
	state
}

// New returns the orchestration of the GPU named name, idle, with no
// config yet. m receives its measurements.
func New(name string, m Metrics) *GPU {
	ctx, cancel := context.WithCancel(context.Background())
	g := &GPU{
		name:     name,
		metrics:  m,
		ctx:      ctx,
		cancel:   cancel,
		lookKick: make(chan struct{}, 1),
	}
	g.act = activity{holds: map[string]*Hold{}}
	g.since = time.Now()
	g.history = newHistory(historySize)
	g.hub = newHub()
	// What the LLM engine was doing before Caddy started is unknown: the
	// first emptying is confirmed as after an abnormal end, long ago.
	g.abnormal = time.Unix(0, 1)
	g.logp.Store(zap.NewNop())
	g.lock = lock.New((*effects)(g), lock.Options{})
	return g
}

// Name returns the GPU's (turnstile's) name.
func (g *GPU) Name() string { return g.name }

// Close ends everything and returns once every goroutine the GPU started
// has returned. It cancels first, so that what runs stops and nothing new
// starts (spawn refuses from then on), then ends the holds: with the
// context done, their release frees nothing and warms nothing. The GPU is
// not used after.
func (g *GPU) Close() {
	g.cancel()
	g.mu.Lock()
	g.touch()
	g.closed = true
	for _, w := range g.watches {
		w.stop()
	}
	hs := g.holdList()
	g.mu.Unlock()
	for _, h := range hs {
		h.End("shutdown")
	}
	g.closeSubscribers()
	g.running.Wait()
}

func (g *GPU) cfg() *Config     { return g.cfgp.Load() }
func (g *GPU) log() *zap.Logger { return g.logp.Load() }

// Apply makes a started config's settings current; the first call also
// starts the start-up (startup.go), which runs on a goroutine of its own:
// Apply returns at once.
func (g *GPU) Apply(c *Config, log *zap.Logger) {
	if g.ctx.Err() != nil {
		return // closed
	}
	added := g.register(c)
	g.cfgp.Store(c)
	g.logp.Store(log)
	g.lock.SetOptions(lock.Options{MaxExclusiveStreak: c.MaxImageStreak})

	g.watchEngines(c)
	g.mu.Lock()
	first := !g.started
	g.started = true
	g.watchPresence(c)
	g.watchMemory(c)
	g.watchProcesses()
	g.touch()
	g.mu.Unlock()
	switch {
	case first:
		g.loadLearned(c)
		g.startUp(c)
	case len(added) > 0:
		g.spawn(func() { g.probeAdded(c, added) })
	}
}

// engineWatch is the running watch over one image engine's events.
type engineWatch struct {
	url  string
	e    ImageEngine
	w    Watch
	stop context.CancelFunc
}

// watchEngines starts a watch over each image engine of c whose URL is new,
// and stops those of engines c no longer has. The watches are made
// outside g.mu (adapter code), then installed under it.
func (g *GPU) watchEngines(c *Config) {
	g.mu.Lock()
	var fresh []ImageEngine
	for _, e := range c.Images {
		if w := g.watches[e.Name()]; w == nil || w.url != e.URL() {
			fresh = append(fresh, e)
		}
	}
	g.mu.Unlock()
	made := map[string]*engineWatch{}
	for _, e := range fresh {
		w := e.Watch("gpu-turnstile-"+g.name+"-"+randomID(), func(up bool, err error) { g.reportWatch(e, up, err) })
		made[e.Name()] = &engineWatch{url: e.URL(), w: w, e: e}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.watches == nil {
		g.watches = map[string]*engineWatch{}
	}
	keep := map[string]bool{}
	for _, e := range c.Images {
		keep[e.Name()] = true
	}
	for name, ew := range made {
		if old := g.watches[name]; old != nil {
			old.stop()
		}
		g.startWatchLocked(ew)
	}
	for name, w := range g.watches {
		if !keep[name] {
			w.stop()
			delete(g.watches, name)
		}
	}
}

// startWatchLocked runs ew and the watch for work started directly on its
// engine; g.mu is held.
func (g *GPU) startWatchLocked(ew *engineWatch) {
	ctx, cancel := context.WithCancel(g.ctx)
	ew.stop = cancel
	g.watches[ew.e.Name()] = ew
	g.spawnLocked(func() { ew.w.Run(ctx) })
	g.spawnLocked(func() { g.watchForeignWork(ctx, ew.e, ew.w) })
}

// reachability is what the last contact with an upstream showed, and
// when one last succeeded; under g.mu.
type reachability struct {
	v    int8      // 0 unknown, 1 reachable, 2 not
	okAt time.Time // the last successful contact
}

// set records a contact whose every failure is a failed contact (a
// readiness probe, a lost event stream, a failed forward).
func (r *reachability) set(err error) {
	if err == nil {
		r.okAt = time.Now()
		r.v = 1
	} else {
		r.v = 2
	}
}

// note records the outcome of a call to the engine: an answer of any
// kind, or a confirmation that failed after answers (the engine said its
// model still runs), is a contact; only a call that got no answer
// (engine.Unreached) is a failed one. Anything else (the caller's own
// deadline) says nothing either way.
func (r *reachability) note(err error) {
	switch {
	case engine.Unreached(err):
		r.set(err)
	case err == nil, engine.Answered(err), errors.Is(err, ErrNotEmptied):
		r.set(nil)
	}
}

// get returns nil while unknown.
func (r *reachability) get() *bool {
	switch r.v {
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
	return r.v == 1 && now.Sub(r.okAt) < window
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
