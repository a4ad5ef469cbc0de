package gpu

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/netaddr"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/served"
)

// engineState is what an engine is known to be doing, as the status shows
// it.
type engineState int8

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
// Its fields are under g.mu.
type engineRun struct {
	// eng is the engine's adapter in the newest config that has it: a
	// debt is paid through it even after a reload renamed or dropped the
	// engine.
	eng Engine
	up  reachability
	ws  bool // the image engine's event stream is connected
	// wsSeen is set once the event stream has been connected: a later
	// connection follows a loss of contact.
	wsSeen bool
	state  engineState

	// owed is set on an image engine once work ran on it that may have
	// left memory behind, until a free did its job; on a Waker once it
	// has been emptied, until a wake was confirmed.
	owed bool
	// noGPUReading is set once the image engine is seen to report no
	// GPU memory: its frees cannot be confirmed.
	noGPUReading bool
	// lastWorkflow is the signature of the last job sent to an image
	// engine (where it is known): a front tier sends the next job of
	// the same workflow where its models may still be.
	lastWorkflow string

	// probe is the readiness probe in flight, which concurrent readiness
	// checks share (ready.go).
	probe *probeCall

	// served is what is remembered of an LLM engine's processes
	// (processes.go), restored from the process store once
	// (servedRestored); left are those still alive when it should be
	// empty, and waitWhy why that keeps it from counting as emptied.
	served         served.Record
	servedRestored bool
	left           []procs.Proc
	waitWhy        string
}

// runLocked returns the engine's record, made on first use; g.mu is held.
func (g *GPU) runLocked(name string) *engineRun {
	r := g.runs[name]
	if r == nil {
		if g.runs == nil {
			g.runs = map[string]*engineRun{}
		}
		r = &engineRun{}
		g.runs[name] = r
	}
	return r
}

// withRun changes the record of e with f, under g.mu, and signals the
// change.
func (g *GPU) withRun(e Engine, f func(r *engineRun)) {
	g.update(func() {
		f(g.runLocked(e.Name()))
		g.unreached.Store(g.anyUnreachedLocked()) // reachability changes only here
	})
}

// setState records what e is doing.
func (g *GPU) setState(e Engine, s engineState) {
	g.withRun(e, func(r *engineRun) { r.state = s })
}

// reached records the outcome of a call to e (reachability.note).
func (g *GPU) reached(e Engine, err error) {
	g.withRun(e, func(r *engineRun) { r.up.note(err) })
}

// all is c's engines, LLM engines first.
func (c *Config) all() []Engine {
	all := make([]Engine, 0, len(c.LLMs)+len(c.Images))
	for _, e := range c.LLMs {
		all = append(all, e)
	}
	for _, e := range c.Images {
		all = append(all, e)
	}
	return all
}

// engineAt is c's engine at the upstream hostport, or nil.
func (c *Config) engineAt(hostport string) Engine {
	if hostport == "" {
		return nil
	}
	up := netaddr.UpstreamAddr(hostport)
	for _, e := range c.all() {
		if a, err := netaddr.EngineAddr(e.URL()); err == nil && a == up {
			return e
		}
	}
	return nil
}

// anyUnreachedLocked reports whether an engine's last contact failed;
// g.mu is held.
func (g *GPU) anyUnreachedLocked() bool {
	for _, r := range g.runs {
		if r.up.v == 2 {
			return true
		}
	}
	return false
}

// Unreached reports whether an engine's last contact failed: only then is
// a successful forward worth recording (NoteForwarded). One atomic load,
// for the LLM fast path.
func (g *GPU) Unreached() bool { return g.unreached.Load() }

// NoteForwarded records that a request was forwarded to the upstream
// hostport and answered: a contact with the engine at that address, if
// one is. The status then shows it reachable again.
func (g *GPU) NoteForwarded(hostport string) {
	c := g.cfg()
	if c == nil || hostport == "" {
		return
	}
	if e := c.engineAt(hostport); e != nil {
		g.probed(e, nil)
	}
}

// probed records the outcome of a readiness probe of e, or of a forward
// to it: any failure is a failed contact.
func (g *GPU) probed(e Engine, err error) {
	g.withRun(e, func(r *engineRun) { r.up.set(err) })
}

// owe records that e is owed a free (image) or a wake (LLM).
func (g *GPU) owe(e Engine) {
	g.withRun(e, func(r *engineRun) { r.owed = true })
}

// isOwed reports whether e is owed a free or a wake.
func (g *GPU) isOwed(e Engine) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.runLocked(e.Name()).owed
}

// register records c's engines as the ones to reach them through, and
// returns the image engines no config had before. A new adapter of an
// engine kept across the reload takes over what the old one knew of it,
// outside g.mu (that is adapter code), before it is recorded.
func (g *GPU) register(c *Config) (added []ImageEngine) {
	all := make([]Engine, 0, len(c.LLMs)+len(c.Images))
	for _, e := range c.LLMs {
		all = append(all, e)
	}
	for _, e := range c.Images {
		all = append(all, e)
	}
	old := make([]Engine, len(all))
	g.mu.Lock()
	for i, e := range all {
		old[i] = g.runLocked(e.Name()).eng
	}
	g.mu.Unlock()
	for i, e := range all {
		if in, ok := e.(Inheritor); ok && old[i] != nil {
			in.Inherit(old[i])
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, e := range all {
		if i >= len(c.LLMs) && old[i] == nil {
			added = append(added, c.Images[i-len(c.LLMs)])
		}
		g.runLocked(e.Name()).eng = e
	}
	return added
}

// owedEngines returns the engines that are owed something (a free, a
// wake), whether or not the current config still has them.
func (g *GPU) owedEngines() []Engine {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Engine
	for _, r := range g.runs {
		if r.owed && r.eng != nil {
			out = append(out, r.eng)
		}
	}
	return out
}

// owed reports whether anything must be done before LLM use resumes: an
// image engine to free, an LLM engine to wake.
func (g *GPU) owed() bool { return len(g.owedEngines()) > 0 }

// resumeLLM marks the LLM engines of c that were emptied as serving
// again; it runs when the GPU goes to LLM use, with g.mu held.
func (g *GPU) resumeLLM(c *Config) {
	if c == nil {
		return
	}
	for _, e := range c.LLMs {
		if r := g.runLocked(e.Name()); r.state == stateEmptied {
			r.state = stateReady
		}
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
	if e := c.engineAt(hostport); e != nil {
		return e
	}
	all := c.all()
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
