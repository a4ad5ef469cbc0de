package fleet

import (
	"encoding/json"
	"slices"
	"time"
)

// Host is what one GPU host's status said at one time: the parts of its
// status JSON that the choice of a host reads. A Host is never changed
// once made; a Follower swaps in a new one per status event.
type Host struct {
	State        string // idle, llm, image or hold
	ImagePending bool   // an image job holds or waits for the GPU
	LLMInflight  int
	LLMWaiting   int
	ImageWaiting int
	HoldWaiting  int
	// Models are the models loaded on its LLM engines that are not
	// asleep; LLMUp is false when every LLM engine is known unreachable
	// (or there is none).
	Models []string
	LLMUp  bool
	// Workflows are the last_workflow of its image engines; ImageUp is
	// false when every image engine is known unreachable (or there is
	// none).
	Workflows []string
	ImageUp   bool
	// LLMStart is the earliest expected start of its waiting LLM
	// requests, ImageStart the latest of its waiting image jobs and
	// holds (where a new job would queue); zero when not predicted.
	LLMStart, ImageStart time.Time
	// Room is the card's free memory less its reserve and the loads
	// pending (Memory false: no reading), Footprints what each model
	// takes there.
	Memory     bool
	Room       int64
	Footprints map[string]int64
}

// status is the part of the status JSON that a Host is read from.
type status struct {
	State        string `json:"state"`
	ImagePending bool   `json:"image_pending"`
	LLMInflight  int    `json:"llm_inflight"`
	LLMWaiting   int    `json:"llm_waiting"`
	ImageWaiting int    `json:"image_waiting"`
	HoldWaiting  int    `json:"hold_waiting"`
	Waiters      []struct {
		Kind          string     `json:"kind"`
		ExpectedStart *time.Time `json:"expected_start"`
	} `json:"waiters"`
	Engines []struct {
		Class        string   `json:"class"`
		State        string   `json:"state"`
		Reachable    *bool    `json:"reachable"`
		Models       []string `json:"models"`
		LastWorkflow string   `json:"last_workflow"`
	} `json:"engines"`
	VRAM *struct {
		FreeBytes    int64 `json:"free_bytes"`
		ReserveBytes int64 `json:"reserve_bytes"`
		PendingBytes int64 `json:"pending_bytes"`
		Stale        bool  `json:"stale"`
		Footprints   []struct {
			Model string `json:"model"`
			Bytes int64  `json:"bytes"`
		} `json:"footprints"`
	} `json:"vram"`
}

// ParseHost reads a Host from a status JSON.
func ParseHost(data []byte) (*Host, error) {
	var s status
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	h := &Host{State: s.State, ImagePending: s.ImagePending, LLMInflight: s.LLMInflight,
		LLMWaiting: s.LLMWaiting, ImageWaiting: s.ImageWaiting, HoldWaiting: s.HoldWaiting}
	for _, w := range s.Waiters {
		if w.ExpectedStart == nil {
			continue
		}
		at := *w.ExpectedStart
		switch w.Kind {
		case "llm":
			if h.LLMStart.IsZero() || at.Before(h.LLMStart) {
				h.LLMStart = at
			}
		default:
			if at.After(h.ImageStart) {
				h.ImageStart = at
			}
		}
	}
	for _, e := range s.Engines {
		up := e.Reachable == nil || *e.Reachable
		switch e.Class {
		case "llm":
			h.LLMUp = h.LLMUp || up
			if e.State != "asleep" && e.State != "emptied" && e.State != "emptying" {
				for _, m := range e.Models {
					if !slices.Contains(h.Models, m) {
						h.Models = append(h.Models, m)
					}
				}
			}
		case "image":
			h.ImageUp = h.ImageUp || up
			if e.LastWorkflow != "" {
				h.Workflows = append(h.Workflows, e.LastWorkflow)
			}
		}
	}
	if v := s.VRAM; v != nil && !v.Stale {
		h.Memory = true
		h.Room = v.FreeBytes - v.ReserveBytes - v.PendingBytes
		if len(v.Footprints) > 0 {
			h.Footprints = make(map[string]int64, len(v.Footprints))
			for _, f := range v.Footprints {
				h.Footprints[f.Model] = max(h.Footprints[f.Model], f.Bytes)
			}
		}
	}
	return h, nil
}

// Loaded reports whether model is loaded on one of the host's LLM
// engines that is awake.
func (h *Host) Loaded(model string) bool {
	if model == "" {
		return false
	}
	for _, m := range h.Models {
		if m == model || isLatest(m, model) {
			return true
		}
	}
	return false
}

// isLatest reports whether loaded is model's default tag (Ollama lists
// "llama3.2" as "llama3.2:latest").
func isLatest(loaded, model string) bool {
	const latest = ":latest"
	return len(loaded) == len(model)+len(latest) && loaded[len(model):] == latest && loaded[:len(model)] == model
}

// Ran reports whether one of the host's image engines last ran workflow.
func (h *Host) Ran(workflow string) bool {
	if workflow == "" {
		return false
	}
	for _, w := range h.Workflows {
		if w == workflow {
			return true
		}
	}
	return false
}

// Fits reports whether model has room on the card by the host's memory
// figures; true when it has none, or does not know the model's
// footprint.
func (h *Host) Fits(model string) bool {
	if !h.Memory {
		return true
	}
	need, ok := h.Footprints[model]
	return !ok || need <= h.Room
}

// blocked reports whether LLM requests would wait here now: an image job
// runs or waits, a hold holds or waits.
func (h *Host) blocked() bool {
	return h.State == "image" || h.State == "hold" || h.ImagePending || h.ImageWaiting > 0 || h.HoldWaiting > 0
}
