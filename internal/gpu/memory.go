package gpu

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu/ledger"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/vram"
)

// memState is memory-aware admission's part of the GPU's state, under
// g.mu: the ledger of the card's memory (internal/gpu/ledger), and the
// reader that feeds it.
type memState struct {
	watch *memWatch // the running reader; nil while admission is off

	readErr error // the last reading's error, cleared by a good one

	// ledger is the last reading, the models loaded, the footprints, the
	// pending loads and the image job, and the rules over them.
	ledger ledger.Ledger
	// loadedFps is set once the store's footprints have been read.
	loadedFps bool

	// staling fires when the last reading goes stale, so that the
	// change is signalled as it happens (the status, the events, and
	// the requests that wait on it).
	staling *time.Timer
}

// memWatch is the reader of one card's memory.
type memWatch struct {
	key  string // what the reader was started with
	stop context.CancelFunc
}

// watchMemory starts, restarts or stops the reader of the card's memory
// as c asks; g.mu is held.
func (g *GPU) watchMemory(c *Config) {
	m := &g.mem
	mc := c.Memory
	key := ""
	if mc != nil {
		key = fmt.Sprintf("%s %d %v", mc.SMIPath, mc.Index, mc.Poll)
	}
	if m.watch != nil && m.watch.key == key {
		return
	}
	if m.watch != nil {
		m.watch.stop()
		m.watch = nil
	}
	if m.staling != nil {
		m.staling.Stop()
		m.staling = nil
	}
	if mc == nil {
		return
	}
	ctx, cancel := context.WithCancel(g.ctx)
	m.watch = &memWatch{key: key, stop: cancel}
	g.spawnLocked(func() {
		vram.Stream(ctx, mc.SMIPath, mc.Index, mc.Poll, func(r vram.Reading, err error) {
			g.onReading(ctx, r, err)
		})
	})
}

// onReading takes in one reading of the card: it lists what the LLM
// engines hold, learns footprints, and lets waiters look again.
func (g *GPU) onReading(ctx context.Context, r vram.Reading, err error) {
	c := g.cfg()
	if c == nil || c.Memory == nil {
		return
	}
	if err != nil {
		first := false
		g.update(func() {
			first = g.mem.readErr == nil
			g.mem.readErr = err
		})
		if first {
			g.log().Warn("video memory unreadable: admission falls back to the whole-card rules", zap.Error(err))
		}
		return
	}
	g.loadFootprints(ctx, c.Memory, r.UUID)
	g.mu.Lock()
	since := g.mem.ledger.Emptyings()
	g.mu.Unlock()
	res, failed, sized := g.listResidents(ctx, c)
	procs := g.engineMemory(ctx, c)
	var save []byte
	g.mu.Lock()
	m := &g.mem
	rules := c.Memory.rules()
	// A new figure is a change (at most one a poll interval); so is the
	// end of a failure, and any reading while a request waits for memory.
	changed := m.ledger.Take(rules, ledger.Reading(r)) || m.readErr != nil || g.act.waitingFor(waitingForVRAM) || g.act.waitingFor(waitingForReading)
	m.readErr = nil
	g.staleAtLocked(ledger.StaleAfter*c.Memory.Poll + time.Millisecond)
	changed = m.ledger.List(res, failed, since) || changed
	learned, dropped := m.ledger.LearnFrom(rules, sized, procs, r.At)
	if learned {
		save = m.ledger.Encode()
	}
	if changed || learned || dropped {
		g.touch()
	}
	g.mu.Unlock()
	if save != nil {
		g.saveFootprints(ctx, c.Memory, r.UUID, save)
	}
}

// forgetResidents drops an LLM engine's models from the listing once it
// is confirmed emptied, but those it kept (as it names them): the next
// listing may be a poll interval away, and a model unloaded for an image
// job must not count as loaded beside it.
func (g *GPU) forgetResidents(engine string, kept []string) {
	keys := make([]string, len(kept))
	for i, k := range kept {
		keys[i] = modelKey(k)
	}
	g.update(func() { g.mem.ledger.Emptied(engine, keys) })
}

// staleAtLocked has the GPU signal a change in d, when the reading just
// taken goes stale unless another comes first; g.mu is held.
func (g *GPU) staleAtLocked(d time.Duration) {
	m := &g.mem
	if m.staling != nil {
		m.staling.Reset(d)
		return
	}
	m.staling = time.AfterFunc(d, func() {
		if g.ctx.Err() == nil {
			g.update(func() {})
		}
	})
}

// listResidents lists the models each LLM engine has loaded, with their
// sizes where the engine says (sized); failed are the engines that could
// not be listed.
func (g *GPU) listResidents(ctx context.Context, c *Config) (res map[string]ledger.Resident, failed map[string]bool, sized []ledger.Sized) {
	res, failed = map[string]ledger.Resident{}, map[string]bool{}
	for _, e := range c.LLMs {
		lctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
		if s, ok := e.(engine.Sizer); ok {
			list, err := s.Residents(lctx)
			cancel()
			if err != nil {
				failed[e.Name()] = true
				continue
			}
			for _, r := range list {
				model := modelKey(r.Model)
				res[model] = ledger.Resident{Engine: e.Name(), VRAM: r.VRAM, Evicts: s.EvictsIdle()}
				sized = append(sized, ledger.Sized{Engine: e.Name(), Model: model, Size: r.Size, VRAM: r.VRAM})
			}
			continue
		}
		names, err := e.Loaded(lctx)
		cancel()
		if err != nil {
			failed[e.Name()] = true
			continue
		}
		for _, n := range names {
			res[modelKey(n)] = ledger.Resident{Engine: e.Name()}
		}
	}
	return res, failed, sized
}

// measureBase reads what the LLM engines' processes hold before the
// model of the pending load id is sent to its engine: what they hold
// beyond it at the end is its footprint. It runs only for a model whose
// footprint is unknown, once per model until learned, on the request's
// path but before the load it measures.
func (g *GPU) measureBase(ctx context.Context, id uint64) {
	c := g.cfg()
	if c == nil || c.Memory == nil {
		return
	}
	base := g.readEngineMemory(ctx, c)
	if base < 0 {
		return
	}
	g.update(func() { g.mem.ledger.Measured(id, base) })
}

// engineMemory is what the LLM engines' processes hold on the card now,
// read only while a footprint is being learned (a model admitted whose
// footprint is unknown); -1 when it is not read or cannot be.
func (g *GPU) engineMemory(ctx context.Context, c *Config) int64 {
	g.mu.Lock()
	learning := g.mem.ledger.Learning()
	g.mu.Unlock()
	if !learning {
		return -1
	}
	return g.readEngineMemory(ctx, c)
}

// readEngineMemory sums the memory nvidia-smi shows for the LLM engines'
// processes; -1 when it cannot be read.
func (g *GPU) readEngineMemory(ctx context.Context, c *Config) int64 {
	if c.Memory.EnginePIDs == nil {
		return -1
	}
	pctx, cancel := context.WithTimeout(ctx, c.ProbeTimeout)
	defer cancel()
	pids, err := c.Memory.EnginePIDs(pctx)
	if err != nil {
		return -1
	}
	procs, err := vram.Processes(pctx, c.Memory.SMIPath, c.Memory.Index)
	if err != nil {
		return -1
	}
	var sum int64
	for pid, b := range procs {
		if pids[pid] {
			sum += b
		}
	}
	return sum
}

// cardKey is what a card's footprints are kept under: its UUID, or the
// turnstile's name where the UUID is unknown.
func (g *GPU) cardKey(uuid string) string {
	if uuid != "" {
		return uuid
	}
	return g.name
}

// modelKey is the name memory-aware admission keys a model by: the same
// model as each engine kind names it (engine.ModelKey).
func modelKey(name string) string {
	return engine.ModelKey(name)
}
