package gpu

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/vram"
)

// memState is what memory-aware admission knows of the card, under g.mu
// with the rest of the GPU's state.
type memState struct {
	watch *memWatch // the running reader; nil while admission is off

	reading vram.Reading // the last good reading
	readErr error        // the last reading's error, cleared by a good one

	// fps are the learned footprints, by model (footprints.go); loadedFps
	// is set once the store's have been read.
	fps       map[string]footprint
	loadedFps bool

	// resident are the models the LLM engines had loaded at the last
	// listing, by model.
	resident map[string]residentModel
	// emptied counts the confirmed emptyings of LLM engines, which drop
	// their models from resident at once: a listing begun before one is
	// not applied.
	emptied uint64

	// inflight counts the admitted requests in flight, by model: an
	// idle model of an engine that evicts is memory that engine can use.
	inflight map[string]int
	// pending are the admissions of models that were not loaded, until
	// a reading shows their memory (footprints admitted but not yet
	// seen loaded).
	pending map[uint64]*pendingLoad
	lastID  uint64
	// job is the image job holding the GPU, once sent (beside.go).
	job *jobMemory
	// staling fires when the last reading goes stale, so that the
	// change is signalled as it happens (the status, the events, and
	// the requests that wait on it).
	staling *time.Timer
}

// residentModel is a model loaded on an LLM engine.
type residentModel struct {
	engine string
	vram   int64 // its bytes on the GPU; 0 where the engine does not say
	evicts bool  // its engine unloads it to make room (Ollama)
}

// pendingLoad is an admission of a model that was not loaded.
type pendingLoad struct {
	model string
	bytes int64 // its footprint; unknown (-1) reserves all that is free
	ended time.Time
	// base is the engines' processes' memory when it was admitted, and
	// peak the most seen since, for learning a footprint from nvidia-smi;
	// measured is set once base was read.
	base, peak int64
	measured   bool
}

// memWatch is the reader of one card's memory.
type memWatch struct {
	key  string // what the reader was started with
	stop context.CancelFunc
}

// unknownBytes marks a pending load whose footprint is unknown.
const unknownBytes = -1

// staleAfter is how many poll intervals old a reading may be before
// admission falls back to the whole-card rules.
const staleAfter = 3

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
	emptied := g.mem.emptied
	g.mu.Unlock()
	res, failed, sized := g.listResidents(ctx, c)
	procs := g.engineMemory(ctx, c)
	var save []byte
	g.mu.Lock()
	m := &g.mem
	// A new figure is a change (at most one a poll interval); so is the
	// end of a failure, and any reading while a request waits for memory.
	changed := m.readErr != nil || g.act.waitingFor(waitingForVRAM) || m.reading.Free != r.Free || m.reading.Total != r.Total ||
		m.stale(c.Memory, r.At)
	m.readErr = nil
	m.reading = r
	g.staleAtLocked(staleAfter*c.Memory.Poll + time.Millisecond)
	m.observeJobLocked(r.Total, r.Free)
	if m.emptied == emptied { // else the next listing tells what is loaded
		for model, rm := range m.resident {
			if failed[rm.engine] {
				res[model] = rm // not listed this time: what was known stays
			}
		}
		changed = changed || !sameResidents(m.resident, res)
		m.resident = res
	}
	learned, dropped := g.learnLocked(c.Memory, sized, procs, r.At)
	if learned {
		save = encodeFootprints(m.fps)
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
	g.update(func() {
		m := &g.mem
		m.emptied++
		for model, r := range m.resident {
			if r.engine == engine && !slices.ContainsFunc(kept, func(k string) bool { return modelKey(k) == model }) {
				delete(m.resident, model)
			}
		}
	})
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
func (g *GPU) listResidents(ctx context.Context, c *Config) (res map[string]residentModel, failed map[string]bool, sized []sizedModel) {
	res, failed = map[string]residentModel{}, map[string]bool{}
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
				r.Model = modelKey(r.Model)
				res[r.Model] = residentModel{engine: e.Name(), vram: r.VRAM, evicts: s.EvictsIdle()}
				sized = append(sized, sizedModel{e.Name(), r})
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
			res[modelKey(n)] = residentModel{engine: e.Name()}
		}
	}
	return res, failed, sized
}

// sizedModel is a resident model as an engine that sizes it reports it.
type sizedModel struct {
	engine string
	engine.Resident
}

func sameResidents(a, b map[string]residentModel) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
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
	g.update(func() {
		if p := g.mem.pending[id]; p != nil {
			p.base, p.peak, p.measured = base, base, true
		}
	})
}

// engineMemory is what the LLM engines' processes hold on the card now,
// read only while a footprint is being learned (a model admitted whose
// footprint is unknown); -1 when it is not read or cannot be.
func (g *GPU) engineMemory(ctx context.Context, c *Config) int64 {
	g.mu.Lock()
	learning := false
	for _, p := range g.mem.pending {
		learning = learning || p.measured
	}
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

// learnLocked learns from a reading taken at: the sizes an engine
// reports of a model wholly on the GPU, and, for a model being learned,
// the engines' processes' peak over what they held when it was admitted;
// where both are known the larger counts (an engine's own estimate may
// be short of what the driver shows). It drops the pending loads this
// reading accounts for. It reports whether a footprint changed, and
// whether a pending load was dropped; g.mu is held.
func (g *GPU) learnLocked(c *MemoryConfig, sized []sizedModel, procs int64, at time.Time) (changed, dropped bool) {
	m := &g.mem
	reported := map[string]int64{}
	for _, s := range sized {
		if s.VRAM > 0 && s.VRAM == s.Size {
			reported[s.Model] = s.VRAM
			if m.learn(c, s.engine, s.Model, s.VRAM, at) {
				changed = true
			}
		}
	}
	for id, p := range m.pending {
		if p.measured && procs >= 0 {
			p.peak = max(p.peak, procs)
		}
		if p.ended.IsZero() || !at.After(p.ended) {
			continue
		}
		// Its request ended before this reading, which shows its memory
		// if it loaded, and none if it did not.
		r, loaded := m.resident[p.model]
		if loaded && p.bytes == unknownBytes && p.measured && m.learningAlone(id) {
			if b := max(p.peak-p.base, reported[p.model]); b > 0 && m.learn(c, r.engine, p.model, b, at) {
				changed = true
			}
		}
		delete(m.pending, id)
		dropped = true
	}
	return changed, dropped
}

// learningAlone reports whether the pending load id is the only one
// being learned: the engines' memory then grew for it alone.
func (m *memState) learningAlone(id uint64) bool {
	for other, p := range m.pending {
		if other != id && p.bytes == unknownBytes {
			return false
		}
	}
	return true
}

// loadFootprints reads the card's footprints from the store, once.
func (g *GPU) loadFootprints(ctx context.Context, c *MemoryConfig, card string) {
	g.mu.Lock()
	done := g.mem.loadedFps
	g.mem.loadedFps = true
	g.mu.Unlock()
	if done || c.Store == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	data, err := c.Store.LoadFootprints(sctx, g.cardKey(card))
	if err != nil || len(data) == 0 {
		if err != nil {
			g.log().Warn("footprints not read from storage", zap.Error(err))
		}
		return
	}
	fps, err := decodeFootprints(data)
	if err != nil {
		g.log().Warn("footprints in storage are unreadable; they are learned again", zap.Error(err))
		return
	}
	g.update(func() {
		for k, fp := range g.mem.fps { // learned meanwhile: newer
			fps[k] = fp
		}
		g.mem.fps = fps
	})
	g.log().Info("footprints read from storage", zap.Int("models", len(fps)))
}

// saveFootprints writes the learned footprints to the store.
func (g *GPU) saveFootprints(ctx context.Context, c *MemoryConfig, card string, data []byte) {
	if c.Store == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	if err := c.Store.SaveFootprints(sctx, g.cardKey(card), data); err != nil {
		g.log().Warn("footprints not saved to storage", zap.Error(err))
	}
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
