package ledger

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// MaxFootprints caps the footprints kept for one card: the least
// recently learned go first.
const MaxFootprints = 512

// Footprint is what one model (or an image workflow, by its signature)
// takes on the card, as learned; it is also the stored form.
type Footprint struct {
	Engine  string    `json:"engine"`
	Model   string    `json:"model"`
	Bytes   int64     `json:"bytes"`
	Learned time.Time `json:"learned"`
	// Alone is set once the engine ran out of memory for the model: what
	// was learned is forgotten, and the model is admitted only when the
	// whole card (less the reserve) is free for it.
	Alone bool `json:"alone,omitempty"`
}

// FootprintOf returns the model's footprint, configured (model_vram)
// over learned, and whether one is known.
func (l *Ledger) FootprintOf(c Config, model string) (Footprint, bool) {
	if b, ok := c.configured(model); ok {
		return Footprint{Model: model, Bytes: b}, true
	}
	fp, ok := l.fps[model]
	return fp, ok
}

// need is what model's footprint asks of the card: the whole card less
// the reserve for a model that runs alone.
func (l *Ledger) need(c Config, fp Footprint) int64 {
	if fp.Alone {
		return l.reading.Total - c.Reserve
	}
	return fp.Bytes
}

// Learn records what model was seen to take at at, unless a footprint is
// configured for it; it reports whether the table changed. An Alone
// footprint is replaced only by a reading taken after it was set.
func (l *Ledger) Learn(c Config, engine, model string, bytes int64, at time.Time) bool {
	if _, ok := c.configured(model); ok || bytes <= 0 {
		return false
	}
	old, ok := l.fps[model]
	if ok && old.Bytes == bytes && old.Engine == engine && !old.Alone {
		return false
	}
	if ok && old.Alone && !at.After(old.Learned) {
		return false
	}
	l.setFootprint(Footprint{Engine: engine, Model: model, Bytes: bytes, Learned: at})
	return true
}

// Forget drops what was learned of model after its engine ran out of
// memory for it at at: from then on it runs alone.
func (l *Ledger) Forget(engine, model string, at time.Time) {
	l.setFootprint(Footprint{Engine: engine, Model: model, Learned: at, Alone: true})
}

func (l *Ledger) setFootprint(fp Footprint) {
	if l.fps == nil {
		l.fps = map[string]Footprint{}
	}
	l.fps[fp.Model] = fp
	l.capFootprints()
}

// capFootprints drops the oldest learned footprints past MaxFootprints.
func (l *Ledger) capFootprints() {
	for len(l.fps) > MaxFootprints {
		var oldest string
		for k, fp := range l.fps {
			if oldest == "" || fp.Learned.Before(l.fps[oldest].Learned) {
				oldest = k
			}
		}
		delete(l.fps, oldest)
	}
}

// Restore takes in footprints read from storage; what was learned
// meanwhile is newer and stays.
func (l *Ledger) Restore(fps map[string]Footprint) {
	for k, fp := range l.fps {
		fps[k] = fp
	}
	l.fps = fps
	l.capFootprints()
}

// Encode is the learned table as storage keeps it.
func (l *Ledger) Encode() []byte {
	list := make([]Footprint, 0, len(l.fps))
	for _, fp := range l.fps {
		list = append(list, fp)
	}
	slices.SortFunc(list, func(a, b Footprint) int { return strings.Compare(a.Model, b.Model) })
	b, _ := json.Marshal(struct {
		Footprints []Footprint `json:"footprints"`
	}{list})
	return b
}

// Decode reads what Encode wrote; entries that make no sense are
// dropped.
func Decode(data []byte) (map[string]Footprint, error) {
	var v struct {
		Footprints []Footprint `json:"footprints"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	fps := map[string]Footprint{}
	for _, fp := range v.Footprints {
		if fp.Model != "" && (fp.Bytes > 0 || fp.Alone) {
			fps[fp.Model] = fp
		}
	}
	return fps, nil
}
