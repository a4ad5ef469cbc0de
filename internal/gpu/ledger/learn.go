package ledger

import "time"

// LearnFrom learns from a reading taken at: the sizes an engine
// reports of a model wholly on the GPU, and, for a model being learned,
// the engines' processes' peak (procs, -1 when not read) over what they
// held when it was admitted; where both are known the larger counts (an
// engine's own estimate may be short of what the driver shows). It drops
// the pending loads whose requests ended before the reading, which shows
// their memory. It reports whether a footprint changed, and whether a
// pending load was dropped.
func (l *Ledger) LearnFrom(c Config, sized []Sized, procs int64, at time.Time) (changed, dropped bool) {
	reported := map[string]int64{}
	for _, s := range sized {
		if s.VRAM > 0 && s.VRAM == s.Size {
			reported[s.Model] = s.VRAM
			if l.Learn(c, s.Engine, s.Model, s.VRAM, at) {
				changed = true
			}
		}
	}
	for id, p := range l.pending {
		if p.measured && procs >= 0 {
			p.peak = max(p.peak, procs)
		}
		if p.ended.IsZero() || !at.After(p.ended) {
			continue
		}
		r, loaded := l.resident[p.model]
		if loaded && p.bytes == unknownBytes && p.measured && l.learningAlone(id) {
			if b := max(p.peak-p.base, reported[p.model]); b > 0 && l.Learn(c, r.Engine, p.model, b, at) {
				changed = true
			}
		}
		delete(l.pending, id)
		dropped = true
	}
	return changed, dropped
}

// learningAlone reports whether the pending load id is the only one
// being learned: the engines' memory then grew for it alone.
func (l *Ledger) learningAlone(id uint64) bool {
	for other, p := range l.pending {
		if other != id && p.bytes == unknownBytes {
			return false
		}
	}
	return true
}

// Learning reports whether a footprint is being learned from the
// engines' processes: the GPU reads their memory only then.
func (l *Ledger) Learning() bool {
	for _, p := range l.pending {
		if p.measured {
			return true
		}
	}
	return false
}

// Measured records what the engines' processes held (base) as the model
// of the pending load id was sent to its engine: what they hold beyond it
// once it is loaded is its footprint.
func (l *Ledger) Measured(id uint64, base int64) {
	if p := l.pending[id]; p != nil {
		p.base, p.peak, p.measured = base, base, true
	}
}
