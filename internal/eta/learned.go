package eta

import (
	"encoding/json"
	"maps"
	"time"
)

// Step is a timed step of one engine between two users of the GPU.
type Step string

// The steps an engine's figures are kept for.
const (
	Unload  Step = "unload"  // an LLM engine emptied before exclusive use
	Free    Step = "free"    // an image engine freed before LLM use
	Wake    Step = "wake"    // an LLM engine put to sleep woken before LLM use
	Prepare Step = "prepare" // an image engine readied for its job (A1111's checkpoint)
)

// maxKeys bounds the workflows and the models a Learned keeps figures
// for, so that a stream of one-off workflows cannot grow it (and the
// stored file) without end: the least recently measured goes.
const maxKeys = 64

// Learned is what a turnstile has measured: the zero value has nothing
// yet. It is not safe for concurrent use.
type Learned struct {
	// Jobs are image jobs' run times (from the GPU readied for the job
	// to its end, successful jobs only) by workflow signature.
	Jobs map[string]*Figure `json:"jobs"`
	// AnyJob is the run time of any successful job: the prediction for a
	// workflow not measured yet.
	AnyJob *Figure `json:"any_job,omitempty"`
	// Engines are each engine's step and load times, by engine name.
	Engines map[string]*EngineFigures `json:"engines"`

	// seq orders the keys by their last measure, for maxKeys.
	seq  uint64
	used map[string]uint64
}

// EngineFigures are one engine's measured steps.
type EngineFigures struct {
	Unload  *Figure `json:"unload,omitempty"`
	Free    *Figure `json:"free,omitempty"`
	Wake    *Figure `json:"wake,omitempty"`
	Prepare *Figure `json:"prepare,omitempty"`
	// Loads are the load times of models (warm_model's loads), by model.
	Loads map[string]*Figure `json:"loads,omitempty"`
}

// AddJob records a successful job of workflow ("" for one without a
// signature: it counts in AnyJob only) that ran for d.
func (l *Learned) AddJob(workflow string, d time.Duration) {
	if l.AnyJob == nil {
		l.AnyJob = &Figure{}
	}
	l.AnyJob.Add(d)
	if workflow == "" {
		return
	}
	if l.Jobs == nil {
		l.Jobs = map[string]*Figure{}
	}
	l.Jobs[workflow] = l.added(l.Jobs[workflow], "job\x00"+workflow, d)
	l.bound(l.Jobs, "job\x00")
}

// AddStep records engine's step that took d.
func (l *Learned) AddStep(engine string, s Step, d time.Duration) {
	e := l.engine(engine)
	key := "step\x00" + engine + "\x00" + string(s)
	switch s {
	case Unload:
		e.Unload = l.added(e.Unload, key, d)
	case Free:
		e.Free = l.added(e.Free, key, d)
	case Wake:
		e.Wake = l.added(e.Wake, key, d)
	case Prepare:
		e.Prepare = l.added(e.Prepare, key, d)
	}
}

// AddLoad records a load of model on engine that took d.
func (l *Learned) AddLoad(engine, model string, d time.Duration) {
	e := l.engine(engine)
	if e.Loads == nil {
		e.Loads = map[string]*Figure{}
	}
	prefix := "load\x00" + engine + "\x00"
	e.Loads[model] = l.added(e.Loads[model], prefix+model, d)
	l.bound(e.Loads, prefix)
}

// JobTime is the expected run time of a job of workflow: its
// workflow's median, else any job's; ok is false before any job ended.
func (l *Learned) JobTime(workflow string) (time.Duration, bool) {
	if d, ok := l.Jobs[workflow].Median(); ok {
		return d, true
	}
	return l.AnyJob.Median()
}

// StepTime is the median of engine's step s; ok is false if never
// measured.
func (l *Learned) StepTime(engine string, s Step) (time.Duration, bool) {
	e := l.Engines[engine]
	if e == nil {
		return 0, false
	}
	switch s {
	case Unload:
		return e.Unload.Median()
	case Free:
		return e.Free.Median()
	case Wake:
		return e.Wake.Median()
	case Prepare:
		return e.Prepare.Median()
	}
	return 0, false
}

// LoadTime is the median load time of model on engine; ok is false if
// never measured.
func (l *Learned) LoadTime(engine, model string) (time.Duration, bool) {
	if e := l.Engines[engine]; e != nil {
		return e.Loads[model].Median()
	}
	return 0, false
}

// Empty reports whether nothing was learned.
func (l *Learned) Empty() bool { return l.AnyJob.Len() == 0 && len(l.Engines) == 0 }

// Clone returns a copy that shares nothing with l.
func (l *Learned) Clone() *Learned {
	c := &Learned{AnyJob: l.AnyJob.clone(), seq: l.seq, used: maps.Clone(l.used)}
	if l.Jobs != nil {
		c.Jobs = cloneFigures(l.Jobs)
	}
	if l.Engines != nil {
		c.Engines = make(map[string]*EngineFigures, len(l.Engines))
		for name, e := range l.Engines {
			ce := &EngineFigures{Unload: e.Unload.clone(), Free: e.Free.clone(), Wake: e.Wake.clone(), Prepare: e.Prepare.clone()}
			if e.Loads != nil {
				ce.Loads = cloneFigures(e.Loads)
			}
			c.Engines[name] = ce
		}
	}
	return c
}

// MarshalJSON writes the figures with empty maps as {}, not null.
func (l *Learned) MarshalJSON() ([]byte, error) {
	type plain Learned
	p := (*plain)(l)
	if p.Jobs == nil || p.Engines == nil {
		c := *p
		if c.Jobs == nil {
			c.Jobs = map[string]*Figure{}
		}
		if c.Engines == nil {
			c.Engines = map[string]*EngineFigures{}
		}
		p = &c
	}
	return json.Marshal(p)
}

// Encode is the form the store keeps.
func (l *Learned) Encode() []byte {
	b, _ := json.Marshal(l) // figures and maps of strings always encode
	return b
}

// Decode reads what Encode wrote.
func Decode(data []byte) (*Learned, error) {
	l := &Learned{}
	if err := json.Unmarshal(data, l); err != nil {
		return nil, err
	}
	for k, f := range l.Jobs {
		if f == nil {
			delete(l.Jobs, k)
		}
	}
	for k, e := range l.Engines {
		if e == nil {
			delete(l.Engines, k)
		}
	}
	return l, nil
}

func (l *Learned) engine(name string) *EngineFigures {
	if l.Engines == nil {
		l.Engines = map[string]*EngineFigures{}
	}
	e := l.Engines[name]
	if e == nil {
		e = &EngineFigures{}
		l.Engines[name] = e
	}
	return e
}

// added records d in f (a new figure if nil) and marks key as measured
// last.
func (l *Learned) added(f *Figure, key string, d time.Duration) *Figure {
	if f == nil {
		f = &Figure{}
	}
	f.Add(d)
	if l.used == nil {
		l.used = map[string]uint64{}
	}
	l.seq++
	l.used[key] = l.seq
	return f
}

// bound drops from m, whose keys are used under prefix, the least
// recently measured past maxKeys. Keys read from the store and not
// measured since count as the oldest.
func (l *Learned) bound(m map[string]*Figure, prefix string) {
	for len(m) > maxKeys {
		oldest, at := "", ^uint64(0)
		for k := range m {
			if s := l.used[prefix+k]; s < at || (s == at && k < oldest) {
				oldest, at = k, s
			}
		}
		delete(m, oldest)
		delete(l.used, prefix+oldest)
	}
}

func cloneFigures(m map[string]*Figure) map[string]*Figure {
	c := make(map[string]*Figure, len(m))
	for k, f := range m {
		c[k] = f.clone()
	}
	return c
}
