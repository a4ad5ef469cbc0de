package gpu

import (
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// maxFootprints caps the footprints kept for one card: the least recently
// learned go first.
const maxFootprints = 512

// footprint is what one model takes on the card.
type footprint struct {
	Engine  string    `json:"engine"`
	Model   string    `json:"model"`
	Bytes   int64     `json:"bytes"`
	Learned time.Time `json:"learned"`
	// Alone is set once the engine ran out of memory for the model: what
	// was learned is forgotten, and the model is admitted only when the
	// whole card (less the reserve) is free for it.
	Alone bool `json:"alone,omitempty"`
}

// FootprintStatus is one footprint as the status shows it.
type FootprintStatus struct {
	Engine string `json:"engine"`
	Model  string `json:"model"`
	Bytes  int64  `json:"bytes"`
	Source string `json:"source"` // learned or configured
	// Alone is true once the engine ran out of memory for the model: it
	// is admitted only when the card is free for it alone.
	Alone bool `json:"alone,omitempty"`
}

// footprintOf returns the model's footprint, configured (model_vram) over
// learned, and whether one is known; g.mu is held.
func (m *memState) footprintOf(c *MemoryConfig, model string) (footprint, bool) {
	if b, ok := configured(c, model); ok {
		return footprint{Model: model, Bytes: b}, true
	}
	fp, ok := m.fps[model]
	return fp, ok
}

// configured returns the model_vram of model (a key of modelKey), which
// the config may spell with or without ":latest".
func configured(c *MemoryConfig, model string) (int64, bool) {
	if b, ok := c.Models[model]; ok {
		return b, true
	}
	b, ok := c.Models[model+":latest"]
	return b, ok
}

// learn records what model was seen to take, unless a footprint is
// configured for it; it reports whether the table changed. An Alone
// footprint is replaced only by a reading taken after it was set.
func (m *memState) learn(c *MemoryConfig, engine, model string, bytes int64, at time.Time) bool {
	if _, ok := configured(c, model); ok || bytes <= 0 {
		return false
	}
	old, ok := m.fps[model]
	if ok && old.Bytes == bytes && old.Engine == engine && !old.Alone {
		return false
	}
	if ok && old.Alone && !at.After(old.Learned) {
		return false
	}
	if m.fps == nil {
		m.fps = map[string]footprint{}
	}
	m.fps[model] = footprint{Engine: engine, Model: model, Bytes: bytes, Learned: at}
	m.capFootprints()
	return true
}

// forget drops what was learned of model after the engine ran out of
// memory for it: from now on it runs alone.
func (m *memState) forget(engine, model string, at time.Time) {
	if m.fps == nil {
		m.fps = map[string]footprint{}
	}
	m.fps[model] = footprint{Engine: engine, Model: model, Learned: at, Alone: true}
	m.capFootprints()
}

// capFootprints drops the oldest learned footprints past maxFootprints.
func (m *memState) capFootprints() {
	for len(m.fps) > maxFootprints {
		var oldest string
		for k, fp := range m.fps {
			if oldest == "" || fp.Learned.Before(m.fps[oldest].Learned) {
				oldest = k
			}
		}
		delete(m.fps, oldest)
	}
}

// footprintList is the footprints as the status shows them, configured
// first, each group by model; g.mu is held.
func (m *memState) footprintList(c *MemoryConfig, usable int64) []FootprintStatus {
	out := make([]FootprintStatus, 0, len(c.Models)+len(m.fps))
	for model, b := range c.Models {
		out = append(out, FootprintStatus{Model: model, Bytes: b, Source: "configured"})
	}
	slices.SortFunc(out, func(a, b FootprintStatus) int { return strings.Compare(a.Model, b.Model) })
	n := len(out)
	for _, fp := range m.fps {
		if _, ok := configured(c, fp.Model); ok {
			continue
		}
		b := fp.Bytes
		if fp.Alone {
			b = usable
		}
		out = append(out, FootprintStatus{Engine: fp.Engine, Model: fp.Model, Bytes: b, Source: "learned", Alone: fp.Alone})
	}
	slices.SortFunc(out[n:], func(a, b FootprintStatus) int { return strings.Compare(a.Model, b.Model) })
	return out
}

// encodeFootprints is the learned table as the store keeps it.
func encodeFootprints(fps map[string]footprint) []byte {
	list := make([]footprint, 0, len(fps))
	for _, fp := range fps {
		list = append(list, fp)
	}
	slices.SortFunc(list, func(a, b footprint) int { return strings.Compare(a.Model, b.Model) })
	b, _ := json.Marshal(struct {
		Footprints []footprint `json:"footprints"`
	}{list})
	return b
}

// decodeFootprints reads what encodeFootprints wrote; entries that make
// no sense are dropped.
func decodeFootprints(data []byte) (map[string]footprint, error) {
	var v struct {
		Footprints []footprint `json:"footprints"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	fps := map[string]footprint{}
	for _, fp := range v.Footprints {
		if fp.Model != "" && (fp.Bytes > 0 || fp.Alone) {
			fps[fp.Model] = fp
		}
	}
	return fps, nil
}
