package gpu

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu/ledger"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/vram"
)

// jobBegins records the job as it is sent: its workflow, and what the
// card holds before it. debt says whether the image engine may still hold
// a previous job's models, which a peak measured now would leave out. A
// job that kept co_resident models runs with the peak they were kept for.
func (g *GPU) jobBegins(j *ImageJob, workflow string, debt bool) {
	c := g.cfg()
	if c == nil || c.Memory == nil {
		return
	}
	s := ledger.JobStart{Owner: j, Engine: j.e.Name(), Workflow: workflow, Debt: debt}
	if j.kept != nil {
		s.KeptPeak = j.kept.peak
	}
	s.Base, s.ReadBase = g.baseReading(c, workflow, j.prepared)
	g.update(func() { g.mem.ledger.JobBegins(c.Memory.rules(), s) })
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
	r := g.mem.ledger.Reading()
	g.mu.Unlock()
	if !r.At.After(since) {
		ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
		defer cancel()
		read, err := vram.Read(ctx, c.Memory.SMIPath, c.Memory.Index)
		if err != nil {
			return 0, false
		}
		r = ledger.Reading(read)
	}
	return r.Total - r.Free, true
}

// jobEnds learns the ended job's peak, if it ran alone and began freed,
// and forgets the job; what was learned is saved.
func (g *GPU) jobEnds(j *ImageJob) {
	c := g.cfg()
	if c == nil || c.Memory == nil {
		g.update(func() { g.mem.ledger.DropJob(j) })
		return
	}
	var save []byte
	var card string
	g.update(func() {
		m := &g.mem
		if m.ledger.JobEnds(c.Memory.rules(), j, time.Now()) {
			save, card = m.ledger.Encode(), m.ledger.Reading().UUID
		}
	})
	if save != nil {
		g.spawn(func() { g.saveFootprints(g.ctx, c.Memory, card, save) })
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
		if led, ok := g.mem.ledger.Beside(c.Memory.rules(), model, time.Now()); ok {
			a = g.admittedLocked(led)
		}
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
