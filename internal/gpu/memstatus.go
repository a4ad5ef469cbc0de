package gpu

import "time"

// VRAMStatus is the card's memory as memory-aware admission sees it.
type VRAMStatus struct {
	TotalBytes   int64      `json:"total_bytes"`
	FreeBytes    int64      `json:"free_bytes"`
	ReserveBytes int64      `json:"reserve_bytes"`
	ReadAt       *time.Time `json:"read_at"` // null until the first reading
	// Stale is true when the last reading is older than three
	// vram_poll_intervals (or there is none): admission then follows
	// the whole-card rules.
	Stale bool   `json:"stale"`
	Error string `json:"error,omitempty"` // why the last reading failed
	// Footprints are what each model takes, configured (model_vram) or
	// learned.
	Footprints []FootprintStatus `json:"footprints"`
	// Loaded are the models the LLM engines hold, as last listed, with
	// their bytes on the card where the engine says.
	Loaded []LoadedStatus `json:"loaded"`
	// PendingBytes are the footprints of models admitted but not yet
	// seen loaded.
	PendingBytes int64 `json:"pending_bytes"`
	// Job is the image job holding the GPU, as co_resident sees it.
	Job *JobMemoryStatus `json:"job,omitempty"`
}

// JobMemoryStatus is what is known of the running image job's memory.
type JobMemoryStatus struct {
	Engine   string `json:"engine"`
	Workflow string `json:"workflow,omitempty"` // its signature
	// PeakBytes is the workflow's learned peak; 0 when never measured:
	// then nothing runs beside it.
	PeakBytes int64 `json:"peak_bytes"`
	// BesideBytes is what the models admitted beside it were counted to
	// take.
	BesideBytes int64 `json:"beside_bytes"`
}

// LoadedStatus is a model an LLM engine holds.
type LoadedStatus struct {
	Engine string `json:"engine"`
	Model  string `json:"model"`
	Bytes  int64  `json:"bytes,omitempty"`
	// Inflight counts the admitted requests for it now.
	Inflight int `json:"inflight"`
}

// statusLocked is the card's memory as the status shows it; g.mu is
// held.
func (m *memState) statusLocked(c *MemoryConfig, now time.Time) *VRAMStatus {
	snap := m.ledger.Snapshot(c.rules(), now)
	st := &VRAMStatus{
		TotalBytes:   snap.Reading.Total,
		FreeBytes:    snap.Reading.Free,
		ReserveBytes: c.Reserve,
		Stale:        snap.Stale,
		Footprints:   make([]FootprintStatus, len(snap.Footprints)),
		Loaded:       make([]LoadedStatus, len(snap.Loaded)),
		PendingBytes: snap.PendingBytes,
	}
	if at := snap.Reading.At; !at.IsZero() {
		st.ReadAt = &at
	}
	if m.readErr != nil {
		st.Error = m.readErr.Error()
	}
	for i, fp := range snap.Footprints {
		st.Footprints[i] = FootprintStatus(fp)
	}
	for i, l := range snap.Loaded {
		st.Loaded[i] = LoadedStatus(l)
	}
	if j := snap.Job; j != nil {
		st.Job = &JobMemoryStatus{Engine: j.Engine, Workflow: j.Workflow, PeakBytes: j.PeakBytes, BesideBytes: j.BesideBytes}
	}
	return st
}
