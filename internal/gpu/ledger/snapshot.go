package ledger

import (
	"slices"
	"strings"
	"time"
)

// Snapshot is what the ledger shows in the GPU's status.
type Snapshot struct {
	Reading Reading
	Stale   bool
	// Footprints are the configured ones first, then the learned, each
	// group by model.
	Footprints []FootprintView
	Loaded     []LoadedView // by model
	// PendingBytes are the footprints of models admitted but not yet
	// seen loaded.
	PendingBytes int64
	Job          *JobView // the image job holding the GPU; nil if none
}

// FootprintView is one footprint as the status shows it.
type FootprintView struct {
	Engine string
	Model  string
	Bytes  int64  // for a model that runs alone, the card less the reserve
	Source string // learned or configured
	Alone  bool
}

// LoadedView is a model an LLM engine holds.
type LoadedView struct {
	Engine   string
	Model    string
	Bytes    int64
	Inflight int // the admitted requests for it now
}

// JobView is what is known of the running image job's memory.
type JobView struct {
	Engine      string
	Workflow    string
	PeakBytes   int64 // 0 when never measured
	BesideBytes int64 // what the models admitted beside it were counted to take
}

// Snapshot returns what the status shows at now.
func (l *Ledger) Snapshot(c Config, now time.Time) Snapshot {
	s := Snapshot{
		Reading:    l.reading,
		Stale:      l.Stale(c, now),
		Footprints: l.footprintList(c),
		Loaded:     make([]LoadedView, 0, len(l.resident)),
	}
	for model, r := range l.resident {
		s.Loaded = append(s.Loaded, LoadedView{Engine: r.Engine, Model: model, Bytes: r.VRAM, Inflight: l.inflight[model]})
	}
	slices.SortFunc(s.Loaded, func(a, b LoadedView) int { return strings.Compare(a.Model, b.Model) })
	for _, p := range l.pending {
		s.PendingBytes += max(p.bytes, 0)
	}
	if j := l.job; j != nil {
		s.Job = &JobView{Engine: j.engine, Workflow: j.workflow, PeakBytes: j.peak, BesideBytes: j.beside}
	}
	return s
}

// footprintList is the footprints as the status shows them, configured
// first, each group by model.
func (l *Ledger) footprintList(c Config) []FootprintView {
	out := make([]FootprintView, 0, len(c.Models)+len(l.fps))
	for model, b := range c.Models {
		out = append(out, FootprintView{Model: model, Bytes: b, Source: "configured"})
	}
	slices.SortFunc(out, func(a, b FootprintView) int { return strings.Compare(a.Model, b.Model) })
	n := len(out)
	usable := max(l.reading.Total-c.Reserve, 0)
	for _, fp := range l.fps {
		if _, ok := c.configured(fp.Model); ok {
			continue
		}
		b := fp.Bytes
		if fp.Alone {
			b = usable
		}
		out = append(out, FootprintView{Engine: fp.Engine, Model: fp.Model, Bytes: b, Source: "learned", Alone: fp.Alone})
	}
	slices.SortFunc(out[n:], func(a, b FootprintView) int { return strings.Compare(a.Model, b.Model) })
	return out
}
