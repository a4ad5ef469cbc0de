package ledger

import "time"

// job is what the ledger knows of the image job that holds the GPU: its
// workflow's learned peak, which decides whether a co_resident model fits
// beside it, and what the card held when it began, from which its peak is
// learned.
type job struct {
	owner    any // who the job is, as the GPU knows it
	engine   string
	workflow string // its signature; "" if unreadable
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

// JobStart is an image job as it is sent.
type JobStart struct {
	Owner    any // who the job is: JobEnds names it so
	Engine   string
	Workflow string // its signature; "" if unreadable
	// Debt says whether the image engine may still hold a previous job's
	// models, which a peak measured now would leave out.
	Debt bool
	// KeptPeak is the peak co_resident models were kept loaded for
	// through the job (0: none kept): the job runs with it, and learns
	// none.
	KeptPeak int64
	// Base is what the card held as the job was sent, once the GPU was
	// readied for it; ReadBase says whether it was read (else the first
	// reading during the job gives it).
	Base     int64
	ReadBase bool
}

// JobBegins records the image job s as it is sent: its workflow's peak,
// if known, and what the card holds before it.
func (l *Ledger) JobBegins(c Config, s JobStart) {
	j := &job{owner: s.Owner, engine: s.Engine, workflow: s.Workflow,
		learn: s.Workflow != "" && !s.Debt && s.KeptPeak == 0}
	if fp, ok := l.FootprintOf(c, s.Workflow); ok && s.Workflow != "" && !fp.Alone {
		j.peak = fp.Bytes
	}
	if s.KeptPeak != 0 {
		j.peak = s.KeptPeak
	}
	j.base, j.top, j.readBase = s.Base, s.Base, s.ReadBase
	l.job = j
}

// JobEnds forgets the job of owner, and learns its workflow's peak at
// now if it ran alone and began freed: the most the card held during it
// beyond what it held when the job was sent. It reports whether a
// footprint was learned.
func (l *Ledger) JobEnds(c Config, owner any, now time.Time) (learned bool) {
	j := l.job
	if j == nil || j.owner != owner {
		return false
	}
	l.job = nil
	if !j.learn || !j.readBase || j.top <= j.base {
		return false
	}
	return l.Learn(c, j.engine, j.workflow, j.top-j.base, now)
}

// DropJob forgets the job of owner without learning from it: memory-aware
// admission was turned off while it ran.
func (l *Ledger) DropJob(owner any) {
	if l.job != nil && l.job.owner == owner {
		l.job = nil
	}
}

// observeJob takes a reading into the running job's peak.
func (l *Ledger) observeJob(total, free int64) {
	if j := l.job; j != nil {
		used := total - free
		if !j.readBase {
			j.base, j.top, j.readBase = used, used, true
		}
		j.top = max(j.top, used)
	}
}

// Beside admits a request for model beside the running image job at now
// if it fits next to the job's workflow, and records it: the model is
// loaded, or its footprint is known and the card's free memory, less the
// reserve, the pending loads and what the job may still grow by (its
// peak less what it has grown so far), covers it. A workflow never
// measured runs alone; so does every job while the reading is stale. The
// caller has checked that model may run beside a job (co_resident).
func (l *Ledger) Beside(c Config, model string, now time.Time) (Admitted, bool) {
	j := l.job
	if j == nil || j.peak <= 0 || !j.readBase || l.Stale(c, now) {
		return Admitted{}, false
	}
	var need int64
	if !l.Loaded(model) {
		fp, known := l.FootprintOf(c, model)
		if !known || fp.Alone {
			return Admitted{}, false
		}
		need = fp.Bytes
	}
	// Not available(): an engine evicts its idle models to make room for
	// a model it loads, never for the job's growth.
	room, ok := l.room(c)
	grown := l.reading.Total - l.reading.Free - j.base - j.beside // the job's part of the card's growth
	if !ok || room-max(j.peak-grown, 0) < need {
		return Admitted{}, false
	}
	j.learn = false // its peak, measured now, would include the model
	j.beside += need
	return l.Admit(model, need), true
}

// KeepPeak is the peak of workflow for which co_resident models may stay
// loaded through a job of it: its footprint, when known and not alone; 0
// when nothing may stay (a workflow never measured runs alone).
func (l *Ledger) KeepPeak(c Config, workflow string) int64 {
	if workflow == "" {
		return 0
	}
	fp, known := l.FootprintOf(c, workflow)
	if !known || fp.Alone || fp.Bytes <= 0 {
		return 0
	}
	return fp.Bytes
}

// KeepFits reports whether models kept loaded, with free bytes left on
// the card once the rest was emptied, leave a job's peak free beside
// them, less the reserve, and at least MinFree: what a model admitted
// beside the job must leave too.
func KeepFits(c Config, free, peak int64) bool {
	return free-c.Reserve >= peak && free >= c.MinFree
}
