package gpu

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/vram"
)

// jobMemory is what memory-aware admission knows of the image job that
// holds the GPU: its workflow's learned peak, which decides whether a
// co_resident model fits beside it, and what the card held when it began,
// from which its peak is learned.
type jobMemory struct {
	job      *ImageJob
	engine   string
	workflow string // its signature (internal/workflow); "" if unreadable
	// peak is the workflow's learned peak beyond what the card held when
	// it began; 0 if never measured: then it runs alone.
	peak int64
	// base is what the card held when the job was sent (the LLM engines
	// emptied), and top the most it held since; readBase is set once a
	// fresh reading gave base.
	base, top int64
	readBase  bool
	// beside is what the models admitted beside the job were counted
	// to take: the card's growth beyond it is the job's.
	beside int64
	// learn is set when the job's peak may be learned from it: it began
	// with the image engine freed (no previous job's models cached),
	// nothing was kept loaded beside it (a kept model may unload during
	// the job) and nothing ran beside it.
	learn bool
}

// jobBegins records the job as it is sent: its workflow, and what the
// card holds before it. debt says whether the image engine may still hold
// a previous job's models, which a peak measured now would leave out. A
// job that kept co_resident models runs with the peak they were kept for.
func (g *GPU) jobBegins(j *ImageJob, workflow string, debt bool) {
	c := g.cfg()
	if c == nil || c.Memory == nil {
		return
	}
	base, readBase := g.baseReading(c, workflow, j.prepared)
	g.update(func() {
		m := &g.mem
		jm := &jobMemory{job: j, engine: j.e.Name(), workflow: workflow, learn: workflow != "" && !debt && j.kept == nil}
		if fp, ok := m.footprintOf(c.Memory, workflow); ok && workflow != "" && !fp.Alone {
			jm.peak = fp.Bytes
		}
		if j.kept != nil {
			jm.peak = j.kept.peak
		}
		jm.base, jm.top, jm.readBase = base, base, readBase
		m.job = jm
	})
}

// baseReading is what the card holds as a job of workflow is sent: the
// last reading if it was taken after the GPU was readied for the job
// (since), else one read now, as one taken before may still show the
// models just unloaded, which would hide that much of the job's peak. Not
// ok without a workflow (nothing is learned or admitted beside it) or
// without a reading: the first reading during the job gives it then.
func (g *GPU) baseReading(c *Config, workflow string, since time.Time) (int64, bool) {
	if workflow == "" {
		return 0, false
	}
	g.mu.Lock()
	r := g.mem.reading
	g.mu.Unlock()
	if !r.At.After(since) {
		ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
		defer cancel()
		var err error
		if r, err = vram.Read(ctx, c.Memory.SMIPath, c.Memory.Index); err != nil {
			return 0, false
		}
	}
	return r.Total - r.Free, true
}

// jobEnds learns the ended job's peak, if it ran alone and began freed,
// and forgets the job. It reports the footprints to save, if any.
func (g *GPU) jobEnds(j *ImageJob) {
	c := g.cfg()
	var save []byte
	var card string
	g.update(func() {
		m := &g.mem
		jm := m.job
		if jm == nil || jm.job != j {
			return
		}
		m.job = nil
		if c == nil || c.Memory == nil || !jm.learn || !jm.readBase || jm.top <= jm.base {
			return
		}
		if m.learn(c.Memory, jm.engine, jm.workflow, jm.top-jm.base, time.Now()) {
			save, card = encodeFootprints(m.fps), m.reading.UUID
		}
	})
	if save != nil {
		g.spawn(func() { g.saveFootprints(g.ctx, c.Memory, card, save) })
	}
}

// observeJobLocked takes a reading into the running job's peak; g.mu is
// held.
func (m *memState) observeJobLocked(total, free int64) {
	if jm := m.job; jm != nil {
		used := total - free
		if !jm.readBase {
			jm.base, jm.top, jm.readBase = used, used, true
		}
		jm.top = max(jm.top, used)
	}
}

// coResident reports whether c lets model run beside image jobs.
func coResident(c *MemoryConfig, model string) bool {
	return model != "" && slices.ContainsFunc(c.CoResident, func(m string) bool { return modelKey(m) == model })
}

// tryBeside admits an LLM request for a co_resident model beside the
// image job holding the GPU, if it fits next to the job's workflow: the
// model is loaded, or its footprint is known and the card's free memory,
// less the reserve, the pending loads and what the job may still grow
// by, covers it. A workflow never measured runs alone; so does every job
// while the reading is stale. The decision is made under the lock's
// mutex (lock.TryAcquireBeside), so it judges the job that holds it.
func (g *GPU) tryBeside(model string) *Admission {
	c := g.cfg()
	if c == nil || c.Memory == nil || !coResident(c.Memory, model) {
		return nil
	}
	var a *Admission
	g.lock.TryAcquireBeside(func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		a = g.besideLocked(c.Memory, model, time.Now())
		return a != nil
	})
	if a != nil {
		g.metrics.CoResident()
		g.log().Debug("LLM request admitted beside the image job (co_resident)", zap.String("model", model))
	}
	return a
}

// TryBeside admits an LLM request for model beside the running image job
// without waiting (reject mode), if model is co_resident and fits; nil
// otherwise. The caller then holds a shared place, and calls Done.
func (g *GPU) TryBeside(model string) *Admission { return g.tryBeside(modelKey(model)) }

// besideLocked admits model beside the running job if it fits, and
// records the admission; g.mu is held.
func (g *GPU) besideLocked(c *MemoryConfig, model string, now time.Time) *Admission {
	m := &g.mem
	jm := m.job
	if jm == nil || jm.peak <= 0 || !jm.readBase || m.stale(c, now) {
		return nil
	}
	var need int64
	if _, loaded := m.resident[model]; !loaded {
		fp, known := m.footprintOf(c, model)
		if !known || fp.Alone {
			return nil
		}
		need = fp.Bytes
	}
	// Not available(): an engine evicts its idle models to make room for
	// a model it loads, never for the job's growth.
	avail, ok := m.room(c)
	grown := m.reading.Total - m.reading.Free - jm.base - jm.beside // the job's part of the card's growth
	if !ok || avail-max(jm.peak-grown, 0) < need {
		return nil
	}
	jm.learn = false // its peak, measured now, would include the model
	jm.beside += need
	return g.recordLocked(model, need)
}

// waitLLMFor is WaitLLM for a request naming model: a co_resident model
// is also admitted beside a running image job when it fits (the returned
// Admission is then not nil, and the shared place is held). Without
// co_resident it is WaitLLM.
func (g *GPU) waitLLMFor(ctx context.Context, model string, deadline time.Time, waited func()) (*Admission, time.Duration, error) {
	c := g.cfg()
	model = modelKey(model)
	if c == nil || c.Memory == nil || !coResident(c.Memory, model) {
		took, err := g.WaitLLM(ctx, deadline, waited)
		return nil, took, err
	}
	start := time.Now()
	defer func() {
		if waited != nil {
			waited()
		}
	}()
	for {
		if a := g.tryBeside(model); a != nil {
			return a, time.Since(start), nil
		}
		// Wait for a shared place, but only until the GPU changes: the
		// job may make room beside it meanwhile.
		ch := g.Changed()
		wctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-ch:
				cancel()
			case <-wctx.Done():
			}
		}()
		_, err := g.WaitLLM(wctx, deadline, nil)
		cancel()
		switch {
		case err == nil:
			return nil, time.Since(start), nil
		case ctx.Err() != nil, !time.Now().Before(deadline):
			return nil, time.Since(start), err
		}
	}
}
