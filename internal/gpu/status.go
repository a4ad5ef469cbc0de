package gpu

import (
	"net/url"
	"slices"
	"sort"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/eta"
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
	FreeOwed   bool       `json:"free_owed"`
	Since      time.Time  `json:"since"`
	LastSwitch *time.Time `json:"last_switch,omitempty"`
	Job        *JobStatus `json:"job,omitempty"`
	// Waiters are the requests waiting for the GPU, oldest first, at
	// most maxWaitersShown.
	Waiters   []WaiterStatus            `json:"waiters"`
	Holds     []HoldStatus              `json:"holds"`
	Presence  []PresenceStatus          `json:"presence,omitempty"` // the hold_while conditions
	Engines   []EngineStatus            `json:"engines"`
	Upstreams map[string]UpstreamStatus `json:"upstreams"`
	// VRAM is the card's memory, with vram_admission only.
	VRAM *VRAMStatus `json:"vram,omitempty"`
	// Learned is what was measured here, which the waiters' expected
	// starts rest on (internal/eta).
	Learned *eta.Learned `json:"learned"`
}

// EngineStatus is what is known of one engine.
type EngineStatus struct {
	Name      string `json:"name"`
	Kind      string `json:"kind"`  // as the registry names it
	Class     string `json:"class"` // llm or image
	URL       string `json:"url"`
	Reachable *bool  `json:"reachable"` // null until first contact
	// State is what the engine was last seen to do: ready, emptying,
	// emptied, asleep, waking or cannot_empty (LLM); ready, running,
	// freeing or freed (image).
	State string `json:"state"`
	// Models are the models an LLM engine was last seen with (its API's
	// list, read after LLM use and every unload_poll_interval while any
	// is loaded).
	Models []string `json:"models,omitempty"`
	// LastWorkflow is the workflow signature of the last job sent to an
	// image engine (internal/workflow), where it was known.
	LastWorkflow string `json:"last_workflow,omitempty"`
	// Processes is how many processes that serve an LLM engine's models
	// were seen at the last look (its listener aside); ProcessesUnseen
	// is set when they cannot be seen from here (another user's, another
	// container or host).
	Processes       int  `json:"processes,omitempty"`
	ProcessesUnseen bool `json:"processes_unseen,omitempty"`
	// ProcessesLeft are an LLM engine's processes still alive that keep it
	// from counting as emptied, and Waiting says why.
	ProcessesLeft []ProcessLeft `json:"processes_left,omitempty"`
	Waiting       string        `json:"waiting,omitempty"`
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
	Websocket *bool  `json:"websocket,omitempty"` // an engine watched by a live connection only
	// GPUReading is false when ComfyUI reports no GPU memory (it runs on
	// a CPU, MPS or DirectML device): its frees and min_free_vram cannot
	// be confirmed through it. Comfy only; absent until known.
	GPUReading *bool `json:"gpu_reading,omitempty"`
}

// Status returns what the GPU is doing now: the lock and the GPU's state
// at one instant.
func (g *GPU) Status() Status {
	var st Status
	now := time.Now()
	g.lock.View(func(snap lock.Snapshot) {
		g.mu.Lock()
		st = g.statusLocked(snap, now)
		g.mu.Unlock()
	})
	return g.finish(st)
}

// statusAt returns the status with the lock as snap shows it and the
// GPU's state as it is now.
func (g *GPU) statusAt(snap lock.Snapshot) Status {
	g.mu.Lock()
	st := g.statusLocked(snap, time.Now())
	g.mu.Unlock()
	return g.finish(st)
}

// statusLocked copies the status out of snap and the GPU's state; g.mu
// is held.
func (g *GPU) statusLocked(snap lock.Snapshot, now time.Time) Status {
	st := Status{
		State:        snap.State.String(),
		LLMInflight:  snap.Shared,
		Turnstile:    g.name,
		LLMWaiting:   snap.SharedWaiting,
		ImageWaiting: snap.ImageWaiting,
		HoldWaiting:  snap.HoldWaiting,
		Freeing:      snap.Freeing,
		FreeOwed:     snap.OwesFree,
		Since:        g.since,
		Holds:        make([]HoldStatus, 0, len(g.act.holds)),
		Upstreams:    map[string]UpstreamStatus{},
		ImagePending: snap.ImageWaiting > 0 || snap.State == lock.Image,
	}
	if !g.lastSwitch.IsZero() {
		ls := g.lastSwitch
		st.LastSwitch = &ls
	}
	a := &g.act
	st.Warming = a.warming
	if oldest := a.oldestWait(); !oldest.IsZero() {
		st.OldestWaitSeconds = now.Sub(oldest).Seconds()
	}
	if a.job != nil && snap.State == lock.Image {
		st.Job = &JobStatus{Job: *a.job, AgeSeconds: now.Sub(a.job.Started).Seconds()}
	}
	for _, h := range a.holds {
		st.Holds = append(st.Holds, h.statusLocked())
	}
	st.Waiters = a.waiterList()
	c := g.cfg()
	g.foreseeLocked(snap, now, c, st.Waiters)
	st.Learned = g.learned.Clone()
	st.Presence = g.presenceStatus(c)
	st.Engines = g.enginesLocked(c)
	if c != nil {
		g.upstreamsLocked(c, st.Upstreams)
	}
	if c != nil && c.Memory != nil {
		st.VRAM = g.mem.statusLocked(c.Memory, now)
	}
	return st
}

// finish completes a status copied out under g.mu, outside it.
func (g *GPU) finish(st Status) Status {
	if st.Warming && st.LLMInflight > 0 {
		st.LLMInflight--
	}
	sort.Slice(st.Holds, func(i, j int) bool { return st.Holds[i].Since.Before(st.Holds[j].Since) })
	return st
}

// enginesLocked lists c's engines as the status shows them; g.mu is held.
func (g *GPU) enginesLocked(c *Config) []EngineStatus {
	if c == nil {
		return []EngineStatus{}
	}
	out := make([]EngineStatus, 0, len(c.LLMs)+len(c.Images))
	add := func(e Engine, class string, reach *bool) {
		r := g.runLocked(e.Name())
		out = append(out, EngineStatus{Name: e.Name(), Kind: e.Kind(), Class: class, URL: RedactURL(e.URL()),
			Reachable: reach, State: r.state.String(), ProcessesLeft: r.processesLeft(), Waiting: r.waitWhy,
			Models: r.served.Models, Processes: len(r.served.Servers), ProcessesUnseen: r.served.Unseen,
			LastWorkflow: r.lastWorkflow})
	}
	for _, e := range c.LLMs {
		add(e, "llm", g.runLocked(e.Name()).up.get())
	}
	for _, e := range c.Images {
		add(e, "image", g.runLocked(e.Name()).imageReach())
	}
	return out
}

// imageReach is an image engine's reachability: a connected event stream
// says it answers.
func (r *engineRun) imageReach() *bool {
	if r.ws {
		t := true
		return &t
	}
	return r.up.get()
}

// upstreamsLocked fills the status's older per-upstream map, one entry
// per engine, keyed by its kind's label for an engine named after its
// kind, by name otherwise; g.mu is held.
func (g *GPU) upstreamsLocked(c *Config, into map[string]UpstreamStatus) {
	for _, e := range c.LLMs {
		into[upstreamKey(e)] = UpstreamStatus{URL: RedactURL(e.URL()), Reachable: g.runLocked(e.Name()).up.get()}
	}
	for _, e := range c.Images {
		run := g.runLocked(e.Name())
		us := UpstreamStatus{URL: RedactURL(e.URL()), Reachable: run.imageReach()}
		if k := engine.KindOf(e); k != nil && k.Watch == engine.WatchSocket {
			ws := run.ws
			us.Websocket = &ws
		}
		if run.noGPUReading {
			us.GPUReading = new(bool)
		}
		into[upstreamKey(e)] = us
	}
}

// upstreamKey is e's key in the upstreams map: its kind's label for an
// engine named after its kind (the keys before engines had names), its
// name for any other.
func upstreamKey(e Engine) string { return engine.Label(e, true) }

// History returns the recorded entries newer than since (all if zero),
// oldest first.
func (g *GPU) History(since time.Time) HistoryView {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.history.view(since)
}

// State returns the lock's state.
func (g *GPU) State() lock.State { return g.lock.State() }

// EstimateWait estimates how long until the GPU is free for LLM use: the
// running job's expected rest (from recent job durations, def before any
// has finished), the holds' remaining leases, and a typical job for each
// image job or hold queued.
func (g *GPU) EstimateWait(def time.Duration) time.Duration {
	var wait time.Duration
	now := time.Now()
	g.lock.View(func(snap lock.Snapshot) {
		g.mu.Lock()
		defer g.mu.Unlock()
		typical := g.typicalJobLocked(def)
		if g.act.job != nil {
			wait += max(typical-now.Sub(g.act.job.Started), time.Second)
		}
		for _, h := range g.act.holds {
			wait += max(h.expires.Sub(now), 0)
		}
		wait += time.Duration(snap.ImageWaiting) * typical
		wait += time.Duration(snap.HoldWaiting) * typical
	})
	return wait
}

// typicalJobLocked is the median of recent successful job durations, or
// def before any job has finished; g.mu is held.
func (g *GPU) typicalJobLocked(def time.Duration) time.Duration {
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
