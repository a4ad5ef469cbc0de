package ledger

import (
	"fmt"
	"time"
)

// Admitted is a request the ledger admitted.
type Admitted struct {
	Model string
	// Pending is its pending load, 0 if the model was loaded or not
	// checked.
	Pending uint64
	// Learning is set when the model's footprint is unknown: it is
	// learned from this load, for which the GPU reads the engines'
	// memory first (Measured).
	Learning bool
}

// Fits reports whether model may go to the card at now, and what its
// admission reserves until a reading shows it loaded: 0 for nothing (the
// model is loaded or loading, no model was named, or the reading is stale
// and StaleAdmits: a stale reading fits no other model otherwise),
// -1 for a model whose footprint is unknown, which reserves all that is
// free. A model fits when what is available covers its footprint: the
// card's free memory, less the reserve and the pending loads, plus what
// the idle models of an engine that evicts them hold.
func (l *Ledger) Fits(c Config, model string, now time.Time) (fit bool, need int64) {
	if model == "" || l.Loaded(model) {
		return true, 0
	}
	for _, p := range l.pending {
		if p.model == model {
			return true, 0 // loading: its memory is reserved once
		}
	}
	// A model not loaded needs a reading to be admitted.
	if l.Stale(c, now) {
		return c.StaleAdmits, 0
	}
	fp, known := l.FootprintOf(c, model)
	if !known {
		return true, unknownBytes
	}
	need = l.need(c, fp)
	avail, ok := l.available(c)
	return ok && avail >= need, need
}

// TryAdmit admits a request for model if it fits at now (Fits), and
// records it (Admit).
func (l *Ledger) TryAdmit(c Config, model string, now time.Time) (Admitted, bool) {
	fit, need := l.Fits(c, model, now)
	if !fit {
		return Admitted{}, false
	}
	return l.Admit(model, need), true
}

// Admit records an admitted request for model: in flight, and as a
// pending load that reserves need (unless 0; -1 for a footprint
// unknown).
func (l *Ledger) Admit(model string, need int64) Admitted {
	a := Admitted{Model: model}
	if model == "" {
		return a
	}
	if l.inflight == nil {
		l.inflight = map[string]int{}
	}
	l.inflight[model]++
	if need != 0 {
		if l.pending == nil {
			l.pending = map[uint64]*pendingLoad{}
		}
		l.lastID++
		a.Pending = l.lastID
		a.Learning = need == unknownBytes
		l.pending[a.Pending] = &pendingLoad{model: model, bytes: need}
	}
	return a
}

// End records the end at now of a request a admitted. oom says its
// engine answered that it ran out of memory: the model's footprint is
// forgotten, and it runs alone from then on. The pending load of a
// request that ended otherwise stays until a reading taken after now
// shows whether it loaded.
func (l *Ledger) End(a Admitted, oom bool, now time.Time) {
	if a.Model == "" {
		return
	}
	if l.inflight[a.Model]--; l.inflight[a.Model] <= 0 {
		delete(l.inflight, a.Model)
	}
	if p := l.pending[a.Pending]; p != nil {
		p.ended = now
		if oom {
			delete(l.pending, a.Pending)
		}
	}
	if oom {
		l.Forget(l.resident[a.Model].Engine, a.Model, now)
	}
}

// available is the memory a model not loaded may take: room, plus what
// idle models of an engine that evicts them hold.
func (l *Ledger) available(c Config) (int64, bool) {
	avail, ok := l.room(c)
	if !ok {
		return 0, false
	}
	for model, r := range l.resident {
		if r.Evicts && l.inflight[model] == 0 {
			avail += r.VRAM
		}
	}
	return avail, true
}

// room is what the card has free, less the reserve and the footprints of
// the pending loads. Not ok while a load of unknown size is pending:
// nothing is known to be free then.
func (l *Ledger) room(c Config) (int64, bool) {
	avail := l.reading.Free - c.Reserve
	for _, p := range l.pending {
		if p.bytes == unknownBytes {
			return 0, false
		}
		avail -= p.bytes
	}
	return avail, true
}

// Cause says why model waits or is refused, for a busy answer: what it
// needs, and what is available beyond the reserve.
func (l *Ledger) Cause(c Config, model string, now time.Time) string {
	if l.Stale(c, now) && !c.StaleAdmits {
		if l.reading.At.IsZero() {
			return "no reading of the card's video memory yet (nvidia-smi has not answered)"
		}
		return fmt.Sprintf("no fresh reading of the card's video memory (nvidia-smi's last is %s old)", now.Sub(l.reading.At).Round(time.Second))
	}
	fp, _ := l.FootprintOf(c, model)
	avail, _ := l.available(c)
	return fmt.Sprintf("too little free video memory for %s (needs %s, %s available beyond vram_reserve)",
		model, mib(l.need(c, fp)), mib(max(avail, 0)))
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }
