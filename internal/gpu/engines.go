package gpu

import (
	"sync"
	"sync/atomic"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/netaddr"
)

// engineState is what an engine is known to be doing, as the status shows
// it.
type engineState int32

const (
	stateReady       engineState = iota // serving (LLM) or able to (image)
	stateEmptying                       // LLM: being emptied for exclusive use
	stateEmptied                        // LLM: emptied and confirmed
	stateAsleep                         // LLM (Waker): emptied, must be woken
	stateWaking                         // LLM (Waker): a wake is in progress
	stateUnemptiable                    // LLM: cannot be emptied as it runs
	stateRunning                        // image: a job runs on it
	stateFreeing                        // image: its memory is being freed
	stateFreed                          // image: freed and confirmed
)

var stateNames = [...]string{"ready", "emptying", "emptied", "asleep", "waking", "cannot_empty", "running", "freeing", "freed"}

func (s engineState) String() string { return stateNames[s] }

// engineRun is what the GPU keeps of one engine, by name, across configs:
// its health at last contact and what it was last seen to hold. These are
// facts about the engine, not about who has the GPU (that is activity's).
type engineRun struct {
	// eng is the engine's adapter in the newest config that has it: a
	// debt is paid through it even after a reload renamed or dropped the
	// engine.
	eng atomic.Pointer[engineRef]
	up  reachability
	ws  atomic.Bool // the image engine's event stream is connected
	// wsSeen is set once the event stream has been connected: a later
	// connection follows a loss of contact.
	wsSeen atomic.Bool
	state  atomic.Int32

	// owed is set on an image engine once work ran on it that may have
	// left memory behind, until a free did its job; on a Waker once it
	// has been emptied, until a wake was confirmed.
	owed atomic.Bool
	// noGPUReading is set once the image engine is seen to report no
	// GPU memory: its frees cannot be confirmed.
	noGPUReading atomic.Bool

	// probeMu guards probe, the readiness probe in flight, which
	// concurrent readiness checks share (ready.go).
	probeMu sync.Mutex
	probe   *probeCall
}

// engineRef boxes an Engine for an atomic.Pointer.
type engineRef struct{ Engine }

func (r *engineRun) set(s engineState)     { r.state.Store(int32(s)) }
func (r *engineRun) get() engineState      { return engineState(r.state.Load()) }
func (r *engineRun) is(s engineState) bool { return r.get() == s }

// run returns the engine's runtime record, made on first use. Records are
// kept in a copy-on-write map so that Transition, which runs under the
// lock's mutex, reads them without a mutex.
func (g *GPU) run(e Engine) *engineRun { return g.runNamed(e.Name()) }

func (g *GPU) runNamed(name string) *engineRun {
	if m := g.runs.Load(); m != nil {
		if r := (*m)[name]; r != nil {
			return r
		}
	}
	g.runsMu.Lock()
	defer g.runsMu.Unlock()
	old := g.runs.Load()
	if old != nil {
		if r := (*old)[name]; r != nil {
			return r
		}
	}
	m := make(map[string]*engineRun, 1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	r := &engineRun{}
	m[name] = r
	g.runs.Store(&m)
	return r
}

// register records c's engines as the ones to reach them through, and
// returns the image engines no config had before. A new adapter of an
// engine kept across the reload takes over what the old one knew of it.
func (g *GPU) register(c *Config) (added []ImageEngine) {
	for _, e := range c.LLMs {
		g.carryOver(g.run(e), e)
	}
	for _, e := range c.Images {
		r := g.run(e)
		if r.eng.Load() == nil {
			added = append(added, e)
		}
		g.carryOver(r, e)
	}
	return added
}

// carryOver makes e the adapter of r's engine.
func (g *GPU) carryOver(r *engineRun, e Engine) {
	if in, ok := e.(Inheritor); ok {
		if old := r.eng.Load(); old != nil {
			in.Inherit(old.Engine)
		}
	}
	r.eng.Store(&engineRef{e})
}

// owedRuns returns the engines that are owed something (a free, a wake),
// whether or not the current config still has them.
func (g *GPU) owedRuns() []*engineRun {
	m := g.runs.Load()
	if m == nil {
		return nil
	}
	var out []*engineRun
	for _, r := range *m {
		if r.owed.Load() && r.eng.Load() != nil {
			out = append(out, r)
		}
	}
	return out
}

// owed reports whether anything must be done before LLM use resumes: an
// image engine to free, an LLM engine to wake.
func (g *GPU) owed() bool { return len(g.owedRuns()) > 0 }

// resumeLLM marks the LLM engines that were emptied as serving again; it
// runs when the GPU goes to LLM use.
func (g *GPU) resumeLLM() {
	c := g.cfg()
	if c == nil {
		return
	}
	for _, e := range c.LLMs {
		g.run(e).state.CompareAndSwap(int32(stateEmptied), int32(stateReady))
	}
}

// imageEngine returns the image engine named name, or the first one if
// name is empty; nil if there is none.
func (c *Config) imageEngine(name string) ImageEngine {
	for _, e := range c.Images {
		if name == "" || e.Name() == name {
			return e
		}
	}
	return nil
}

// warmEngine is the engine that loads warm_model: WarmEngine, or the first
// LLM engine.
func (c *Config) warmEngine() LLMEngine {
	if c.WarmEngine != nil || len(c.LLMs) == 0 {
		return c.WarmEngine
	}
	return c.LLMs[0]
}

// EngineFor is the engine a request went to, as far as can be told: the
// one at hostport (the upstream Caddy's reverse_proxy dialled, "" if not
// known), else the first of kind (the kind of engine the route belongs
// to, "" if it says none), else, for an LLM route, the first LLM engine,
// else the only engine. Nil if none fits.
func (c *Config) EngineFor(hostport, kind string, llm bool) Engine {
	all := make([]Engine, 0, len(c.LLMs)+len(c.Images))
	for _, e := range c.LLMs {
		all = append(all, e)
	}
	for _, e := range c.Images {
		all = append(all, e)
	}
	if hostport != "" {
		up := netaddr.UpstreamAddr(hostport)
		for _, e := range all {
			if a, err := netaddr.EngineAddr(e.URL()); err == nil && a == up {
				return e
			}
		}
	}
	for _, e := range all {
		if kind != "" && e.Kind() == kind {
			return e
		}
	}
	switch {
	case llm && len(c.LLMs) > 0:
		return c.LLMs[0]
	case len(all) == 1:
		return all[0]
	}
	return nil
}
