// Package ledger is the bookkeeping of memory-aware admission
// (vram_admission) for one card: the last reading of its memory, the
// models the LLM engines hold, the footprints learned per model, the
// loads admitted but not yet seen, and the image job that holds the GPU.
// From them it decides whether a model fits, what is room beside a job,
// and what may stay loaded through one.
//
// It does no I/O, starts no goroutine, reads no clock and has no mutex:
// a Ledger is a value owned by its GPU and used under the GPU's mutex,
// which feeds it readings and listings and hands it the times. Model
// names reach it already canonical (the GPU's modelKey).
package ledger

import (
	"slices"
	"time"
)

// StaleAfter is how many poll intervals old a reading may be before it
// is stale: admission then waits for a fresh one (vram_stale wait), or
// falls back to the whole-card rules (vram_stale admit).
const StaleAfter = 3

// unknownBytes marks a pending load whose footprint is unknown.
const unknownBytes = -1

// Config is what the ledger's rules read of the memory settings.
type Config struct {
	Reserve int64         // vram_reserve: kept free for the desktop, a game
	MinFree int64         // min_free_vram, which a kept model must leave too (0: none)
	Poll    time.Duration // vram_poll_interval: a reading is stale after StaleAfter of them
	// StaleAdmits admits a request while the reading is stale or missing,
	// as if memory-aware admission were off (vram_stale admit); otherwise
	// it waits for a fresh reading.
	StaleAdmits bool
	// Models are the configured footprints (model_vram), as spelled in
	// the config: the status lists them so.
	Models map[string]int64
	// Configured returns the configured footprint of a canonical model
	// name, which the config may spell otherwise; nil looks the name up
	// in Models as it is.
	Configured func(model string) (int64, bool)
}

// configured returns the model_vram of model, if any.
func (c Config) configured(model string) (int64, bool) {
	if c.Configured != nil {
		return c.Configured(model)
	}
	b, ok := c.Models[model]
	return b, ok
}

// Reading is one reading of the card's memory (the fields of
// vram.Reading, which converts to it).
type Reading struct {
	UUID  string    // the card's UUID, the key its footprints are kept under
	Total int64     // bytes
	Free  int64     // bytes, across every process
	At    time.Time // when it was read
}

// Resident is a model loaded on an LLM engine.
type Resident struct {
	Engine string
	VRAM   int64 // its bytes on the GPU; 0 where the engine does not say
	Evicts bool  // its engine unloads it to make room (Ollama)
}

// Sized is a resident model as an engine that sizes it reports it.
type Sized struct {
	Engine string
	Model  string
	Size   int64 // bytes the model takes in all
	VRAM   int64 // of which on the GPU
}

// Ledger is what memory-aware admission knows of one card. The zero
// value is empty: no reading, nothing learned, nothing loaded.
type Ledger struct {
	reading Reading // the last good reading

	// fps are the learned footprints, by model.
	fps map[string]Footprint

	// resident are the models the LLM engines had loaded at the last
	// listing, by model.
	resident map[string]Resident
	// emptied counts the confirmed emptyings of LLM engines, which drop
	// their models from resident at once: a listing begun before one is
	// not applied.
	emptied uint64

	// inflight counts the admitted requests in flight, by model: an
	// idle model of an engine that evicts is memory that engine can use.
	inflight map[string]int
	// pending are the admissions of models that were not loaded, until
	// a reading shows their memory.
	pending map[uint64]*pendingLoad
	lastID  uint64

	// job is the image job holding the GPU, once sent (job.go).
	job *job
}

// pendingLoad is an admission of a model that was not loaded.
type pendingLoad struct {
	model string
	bytes int64 // its footprint; unknownBytes reserves all that is free
	ended time.Time
	// base is the engines' processes' memory when it was admitted, and
	// peak the most seen since, for learning a footprint from them;
	// measured is set once base was read.
	base, peak int64
	measured   bool
}

// Reading returns the last good reading (zero before the first).
func (l *Ledger) Reading() Reading { return l.reading }

// Stale reports whether the last reading is missing or older than
// StaleAfter poll intervals at now: admission then follows the
// whole-card rules.
func (l *Ledger) Stale(c Config, now time.Time) bool {
	return l.reading.At.IsZero() || now.Sub(l.reading.At) > StaleAfter*c.Poll
}

// Take takes in a good reading, and the running job's growth from it.
// It reports whether the card's figures changed, or the last reading had
// gone stale by then.
func (l *Ledger) Take(c Config, r Reading) (changed bool) {
	changed = l.reading.Free != r.Free || l.reading.Total != r.Total || l.Stale(c, r.At)
	l.reading = r
	l.observeJob(r.Total, r.Free)
	return changed
}

// Emptyings counts the LLM engines' confirmed emptyings so far: a
// listing begun then is applied (List) only if none came since.
func (l *Ledger) Emptyings() uint64 { return l.emptied }

// List applies a listing of what the LLM engines hold, begun when
// Emptyings was since; the engines in failed could not be listed, and
// what was known of their models stays. A listing begun before an
// emptying is dropped: the next one tells. It reports whether the models
// listed changed.
func (l *Ledger) List(res map[string]Resident, failed map[string]bool, since uint64) (changed bool) {
	if l.emptied != since {
		return false
	}
	for model, r := range l.resident {
		if failed[r.Engine] {
			res[model] = r
		}
	}
	changed = !sameResidents(l.resident, res)
	l.resident = res
	return changed
}

// Emptied drops an LLM engine's models once it is confirmed emptied, but
// those it kept: the next listing may be a poll interval away, and a
// model unloaded for an image job must not count as loaded beside it.
func (l *Ledger) Emptied(engine string, kept []string) {
	l.emptied++
	for model, r := range l.resident {
		if r.Engine == engine && !slices.Contains(kept, model) {
			delete(l.resident, model)
		}
	}
}

// Loaded reports whether model was listed as loaded.
func (l *Ledger) Loaded(model string) bool {
	_, ok := l.resident[model]
	return ok
}

func sameResidents(a, b map[string]Resident) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
