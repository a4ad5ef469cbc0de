package gpu

import (
	"net/url"
	"slices"
	"sort"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// Status is what the GPU is doing, as the status JSON shows it. The first
// three fields are the original program's /healthz, unchanged.
type Status struct {
	State        string `json:"state"` // idle, llm, image or hold
	LLMInflight  int    `json:"llm_inflight"`
	ImagePending bool   `json:"image_pending"` // an image job holds or waits for the GPU

	Turnstile    string `json:"turnstile"`
	LLMWaiting   int    `json:"llm_waiting"`
	ImageWaiting int    `json:"image_waiting"`
	HoldWaiting  int    `json:"hold_waiting"`
	// OldestWaitSeconds is how long the longest-waiting request (of any
	// kind) has waited.
	OldestWaitSeconds float64 `json:"oldest_wait_seconds"`
	// Warming is true while warm_model loads (it counts as an LLM user).
	Warming bool `json:"warming"`
	// Freeing is true while ComfyUI frees its memory after a job.
	Freeing bool `json:"freeing"`
	// FreeOwed is true while ComfyUI may hold a finished job's models
	// (between consecutive image jobs).
	FreeOwed   bool                      `json:"free_owed"`
	Since      time.Time                 `json:"since"`
	LastSwitch *time.Time                `json:"last_switch,omitempty"`
	Job        *JobStatus                `json:"job,omitempty"`
	Holds      []HoldStatus              `json:"holds"`
	Upstreams  map[string]UpstreamStatus `json:"upstreams"`
}

// JobStatus is the image work holding the GPU, with its age.
type JobStatus struct {
	Job
	AgeSeconds float64 `json:"age_seconds"`
}

// UpstreamStatus is what is known of one upstream.
type UpstreamStatus struct {
	URL       string `json:"url"`
	Reachable *bool  `json:"reachable"`           // null until first contact
	Websocket *bool  `json:"websocket,omitempty"` // comfy only
	// GPUReading is false when ComfyUI reports no GPU memory (it runs on
	// a CPU, MPS or DirectML device): its frees and min_free_vram cannot
	// be confirmed through it. Comfy only; absent until known.
	GPUReading *bool `json:"gpu_reading,omitempty"`
}

// Status returns what the GPU is doing now.
func (g *GPU) Status() Status {
	snap := g.lock.Snapshot()
	now := time.Now()
	st := Status{
		State:        snap.State.String(),
		LLMInflight:  snap.Shared,
		Turnstile:    g.name,
		LLMWaiting:   snap.SharedWaiting,
		ImageWaiting: snap.ImageWaiting,
		HoldWaiting:  snap.HoldWaiting,
		Freeing:      snap.Freeing,
		FreeOwed:     snap.OwesFree,
		Holds:        []HoldStatus{},
		Upstreams:    map[string]UpstreamStatus{},
	}
	g.trMu.Lock()
	st.Since = g.since
	if !g.lastSwitch.IsZero() {
		ls := g.lastSwitch
		st.LastSwitch = &ls
	}
	g.trMu.Unlock()
	g.mu.Lock()
	a := &g.act
	st.Warming = a.warming
	if oldest := a.oldestWait(); !oldest.IsZero() {
		st.OldestWaitSeconds = now.Sub(oldest).Seconds()
	}
	if a.job != nil && snap.State == lock.Image {
		st.Job = &JobStatus{Job: *a.job, AgeSeconds: now.Sub(a.job.Started).Seconds()}
	}
	for _, h := range a.holds {
		st.Holds = append(st.Holds, h.Status())
	}
	g.mu.Unlock()
	if st.Warming && st.LLMInflight > 0 {
		st.LLMInflight--
	}
	sort.Slice(st.Holds, func(i, j int) bool { return st.Holds[i].Since.Before(st.Holds[j].Since) })
	st.ImagePending = snap.ImageWaiting > 0 || (snap.State == lock.Image)
	if c := g.cfg(); c != nil {
		g.upstreams(c, st.Upstreams)
	}
	return st
}

func (g *GPU) upstreams(c *Config, into map[string]UpstreamStatus) {
	if e := c.LLM; e != nil {
		into[e.Kind()] = UpstreamStatus{URL: RedactURL(e.URL()), Reachable: g.llmUp.get()}
	}
	if e := c.Image; e != nil {
		ws := g.wsUp.Load()
		reach := g.imageUp.get()
		if ws {
			t := true
			reach = &t
		}
		us := UpstreamStatus{URL: RedactURL(e.URL()), Reachable: reach, Websocket: &ws}
		if g.noGPUReading.Load() {
			us.GPUReading = new(bool)
		}
		into[e.Kind()] = us
	}
}

// History returns the recorded entries newer than since (all if zero),
// oldest first.
func (g *GPU) History(since time.Time) HistoryView { return g.history.view(since) }

// State returns the lock's state.
func (g *GPU) State() lock.State { return g.lock.State() }

// EstimateWait estimates how long until the GPU is free for LLM use: the
// running job's expected rest (from recent job durations, def before any
// has finished), the holds' remaining leases, and a typical job for each
// image job or hold queued.
func (g *GPU) EstimateWait(def time.Duration) time.Duration {
	snap := g.lock.Snapshot()
	typical := g.typicalJob(def)
	var wait time.Duration
	now := time.Now()
	g.mu.Lock()
	if g.act.job != nil {
		wait += max(typical-now.Sub(g.act.job.Started), time.Second)
	}
	holds := make([]*Hold, 0, len(g.act.holds))
	for _, h := range g.act.holds {
		holds = append(holds, h)
	}
	g.mu.Unlock()
	for _, h := range holds {
		h.mu.Lock()
		wait += max(h.expires.Sub(now), 0)
		h.mu.Unlock()
	}
	wait += time.Duration(snap.ImageWaiting) * typical
	wait += time.Duration(snap.HoldWaiting) * typical
	return wait
}

// typicalJob is the median of recent successful job durations, or def
// before any job has finished.
func (g *GPU) typicalJob(def time.Duration) time.Duration {
	secs := g.history.recentJobSeconds(15)
	if len(secs) == 0 {
		return def
	}
	slices.Sort(secs)
	return time.Duration(secs[len(secs)/2] * float64(time.Second))
}

// RedactURL hides a password in an upstream URL before it is logged or
// shown in the status.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
