package httpapi

import (
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// PublicStatus is the status a site's gpu_turnstile_status gives without
// "detail full": what anyone who may use the engines needs to see the
// GPU's state and their place in line, and nothing about the people and
// the network behind it (no hold owners, process names, PIDs, app ids,
// URLs, addresses, errors, request paths or workflow signatures).
//
// It is a projection of Status (Public), field by field, so that a field
// added to the full status stays private until it is copied here.
type PublicStatus struct {
	State             string     `json:"state"` // idle, llm, image or hold
	LLMInflight       int        `json:"llm_inflight"`
	ImagePending      bool       `json:"image_pending"`
	Turnstile         string     `json:"turnstile"`
	LLMWaiting        int        `json:"llm_waiting"`
	ImageWaiting      int        `json:"image_waiting"`
	HoldWaiting       int        `json:"hold_waiting"`
	OldestWaitSeconds float64    `json:"oldest_wait_seconds"`
	Warming           bool       `json:"warming"`
	Freeing           bool       `json:"freeing"`
	FreeOwed          bool       `json:"free_owed"`
	Since             time.Time  `json:"since"`
	LastSwitch        *time.Time `json:"last_switch,omitempty"`
	Job               *PublicJob `json:"job,omitempty"`
	// Waiters, Holds and Engines are never null, as in the full status.
	Waiters   []PublicWaiter            `json:"waiters"`
	Holds     []PublicHold              `json:"holds"`
	Presence  []PublicPresence          `json:"presence,omitempty"`
	Engines   []PublicEngine            `json:"engines"`
	Upstreams map[string]PublicUpstream `json:"upstreams"`
	VRAM      *PublicVRAM               `json:"vram,omitempty"`

	WaitBuffer   WaitBufferStatus `json:"wait_buffer"`
	WaitingLimit int              `json:"waiting_limit,omitempty"`
	// Warnings are Status.Warnings worded without addresses.
	Warnings []string `json:"warnings,omitempty"`
}

// PublicJob is the image job holding the GPU: its phase and age. Its
// prompt_id, the key to its outputs on ComfyUI, is left out.
type PublicJob struct {
	Engine           string  `json:"engine,omitempty"`
	Source           string  `json:"source"`
	Phase            string  `json:"phase"`
	InterruptOverdue bool    `json:"interrupt_overdue,omitempty"`
	AgeSeconds       float64 `json:"age_seconds"`
}

// PublicWaiter is a waiting request without its path (which may carry a
// token) or a hold's owner.
type PublicWaiter struct {
	Kind          string     `json:"kind"` // llm, image or hold
	Since         time.Time  `json:"since"`
	Model         string     `json:"model,omitempty"`
	WaitingFor    string     `json:"waiting_for,omitempty"`
	Position      int        `json:"position"`
	ExpectedStart *time.Time `json:"expected_start"`
	Client        string     `json:"client,omitempty"` // a hash of an image job's client_id
}

// PublicHold is a hold without its owner or id: where it comes from and,
// for an admin hold, when its lease ends.
type PublicHold struct {
	Source string `json:"source"` // admin or presence
	// Expires is when it ends unless renewed (the contract's name);
	// ExpiresAt the same, under the full status's name.
	Expires   time.Time `json:"expires,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// PublicPresence is a hold_while condition: its kind and whether it is
// engaged. The rest of the condition (the games' names, a Steam home) and
// what the watcher saw (process, PID, app id) or failed on stay private.
type PublicPresence struct {
	Condition string `json:"condition"` // process, steam, gpu_process, gpu_busy...
	Engaged   bool   `json:"engaged"`
}

// PublicEngine is an engine without its URL or its processes.
type PublicEngine struct {
	Name      string   `json:"name"`
	Kind      string   `json:"kind"`
	Class     string   `json:"class"` // llm or image
	State     string   `json:"state"`
	Reachable *bool    `json:"reachable"` // null until first contact
	Models    []string `json:"models,omitempty"`
	// LastWorkflow is an image engine's last job's workflow signature,
	// which a fleet's front tier sends the same workflow after.
	LastWorkflow string `json:"last_workflow,omitempty"`
}

// PublicUpstream is an entry of the older upstreams map, without its URL.
type PublicUpstream struct {
	Reachable  *bool `json:"reachable"`
	Websocket  *bool `json:"websocket,omitempty"`
	GPUReading *bool `json:"gpu_reading,omitempty"`
}

// PublicVRAM is the card's memory figures, without the reading's error
// and without the image workflows' signatures (which name the models and
// sizes of what people render).
type PublicVRAM struct {
	TotalBytes   int64      `json:"total_bytes"`
	FreeBytes    int64      `json:"free_bytes"`
	ReserveBytes int64      `json:"reserve_bytes"`
	ReadAt       *time.Time `json:"read_at"`
	Stale        bool       `json:"stale"`
	// Footprints are those of the LLM models; a learned image workflow's
	// peak, stored under its signature, is left out.
	Footprints   []PublicFootprint `json:"footprints"`
	Loaded       []PublicLoaded    `json:"loaded"`
	PendingBytes int64             `json:"pending_bytes"`
	Job          *PublicJobMemory  `json:"job,omitempty"`
}

// PublicFootprint is what an LLM model takes on the card.
type PublicFootprint struct {
	Engine string `json:"engine"`
	Model  string `json:"model"`
	Bytes  int64  `json:"bytes"`
	Source string `json:"source"` // learned or configured
	Alone  bool   `json:"alone,omitempty"`
}

// PublicLoaded is a model an LLM engine holds.
type PublicLoaded struct {
	Engine   string `json:"engine"`
	Model    string `json:"model"`
	Bytes    int64  `json:"bytes,omitempty"`
	Inflight int    `json:"inflight"`
}

// PublicJobMemory is the running image job's memory without its
// workflow's signature.
type PublicJobMemory struct {
	Engine      string `json:"engine"`
	PeakBytes   int64  `json:"peak_bytes"`
	BesideBytes int64  `json:"beside_bytes"`
}

// Public is the public view of st.
func Public(st Status) PublicStatus {
	p := PublicStatus{
		State: st.State, LLMInflight: st.LLMInflight, ImagePending: st.ImagePending, Turnstile: st.Turnstile,
		LLMWaiting: st.LLMWaiting, ImageWaiting: st.ImageWaiting, HoldWaiting: st.HoldWaiting,
		OldestWaitSeconds: st.OldestWaitSeconds, Warming: st.Warming, Freeing: st.Freeing, FreeOwed: st.FreeOwed,
		Since: st.Since, LastSwitch: st.LastSwitch,
		Job:        publicJob(st.Job),
		Waiters:    mapSlice(st.Waiters, publicWaiter),
		Holds:      mapSlice(st.Holds, publicHold),
		Presence:   mapSlice(st.Presence, publicPresence),
		Engines:    mapSlice(st.Engines, publicEngine),
		Upstreams:  make(map[string]PublicUpstream, len(st.Upstreams)),
		VRAM:       publicVRAM(st.VRAM, st.Engines),
		WaitBuffer: st.WaitBuffer, WaitingLimit: st.WaitingLimit, Warnings: st.PublicWarnings,
	}
	if st.Presence == nil {
		p.Presence = nil
	}
	for k, u := range st.Upstreams {
		p.Upstreams[k] = PublicUpstream{Reachable: u.Reachable, Websocket: u.Websocket, GPUReading: u.GPUReading}
	}
	return p
}

func publicJob(j *gpu.JobStatus) *PublicJob {
	if j == nil {
		return nil
	}
	return &PublicJob{Engine: j.Engine, Source: j.Source, Phase: j.Phase, InterruptOverdue: j.InterruptOverdue, AgeSeconds: j.AgeSeconds}
}

func publicWaiter(w gpu.WaiterStatus) PublicWaiter {
	return PublicWaiter{Kind: w.Kind, Since: w.Since, Model: w.Model, WaitingFor: w.WaitingFor,
		Position: w.Position, ExpectedStart: w.ExpectedStart, Client: w.Client}
}

func publicHold(h gpu.HoldStatus) PublicHold {
	return PublicHold{Source: h.Source, Expires: h.ExpiresAt, ExpiresAt: h.ExpiresAt}
}

// publicPresence keeps a condition's first word, its kind: the rest is
// what the operator listed (games, paths), which says what is played.
func publicPresence(p gpu.PresenceStatus) PublicPresence {
	kind, _, _ := strings.Cut(p.Condition, " ")
	return PublicPresence{Condition: kind, Engaged: p.Engaged}
}

func publicEngine(e gpu.EngineStatus) PublicEngine {
	return PublicEngine{Name: e.Name, Kind: e.Kind, Class: e.Class, State: e.State, Reachable: e.Reachable, Models: e.Models,
		LastWorkflow: e.LastWorkflow}
}

// publicVRAM is v without its error, the image engines' footprints
// (workflow signatures) and the running job's signature; engines tell
// which engines are image engines.
func publicVRAM(v *gpu.VRAMStatus, engines []gpu.EngineStatus) *PublicVRAM {
	if v == nil {
		return nil
	}
	image := map[string]bool{}
	for _, e := range engines {
		if e.Class == "image" {
			image[e.Name] = true
		}
	}
	p := &PublicVRAM{TotalBytes: v.TotalBytes, FreeBytes: v.FreeBytes, ReserveBytes: v.ReserveBytes, ReadAt: v.ReadAt,
		Stale: v.Stale, Footprints: make([]PublicFootprint, 0, len(v.Footprints)), Loaded: mapSlice(v.Loaded, publicLoaded),
		PendingBytes: v.PendingBytes}
	for _, fp := range v.Footprints {
		if !image[fp.Engine] {
			p.Footprints = append(p.Footprints, PublicFootprint{Engine: fp.Engine, Model: fp.Model, Bytes: fp.Bytes, Source: fp.Source, Alone: fp.Alone})
		}
	}
	if j := v.Job; j != nil {
		p.Job = &PublicJobMemory{Engine: j.Engine, PeakBytes: j.PeakBytes, BesideBytes: j.BesideBytes}
	}
	return p
}

func publicLoaded(l gpu.LoadedStatus) PublicLoaded {
	return PublicLoaded{Engine: l.Engine, Model: l.Model, Bytes: l.Bytes, Inflight: l.Inflight}
}

// mapSlice is f of each of in, in order: empty (not nil) for an empty in.
func mapSlice[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}
