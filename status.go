package turnstile

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

func init() {
	caddy.RegisterModule(StatusHandler{})
}

// Status is a turnstile's status JSON. The first three fields are the
// original program's /healthz, unchanged.
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
	Job        *jobStatus                `json:"job,omitempty"`
	Holds      []holdStatus              `json:"holds"`
	Upstreams  map[string]upstreamStatus `json:"upstreams"`
	// WaitBuffer is what the request bodies of waiting requests hold
	// against wait_buffer_limit.
	WaitBuffer waitBufferStatus `json:"wait_buffer"`
	// WaitingLimit is max_waiting, if set.
	WaitingLimit int `json:"waiting_limit,omitempty"`
}

type jobStatus struct {
	jobInfo
	AgeSeconds float64 `json:"age_seconds"`
}

type upstreamStatus struct {
	URL       string `json:"url"`
	Reachable *bool  `json:"reachable"`           // null until first contact
	Websocket *bool  `json:"websocket,omitempty"` // comfy only
	// GPUReading is false when ComfyUI reports no GPU memory (it runs on
	// a CPU, MPS or DirectML device): its frees and min_free_vram cannot
	// be confirmed through it. Comfy only; absent until known.
	GPUReading *bool `json:"gpu_reading,omitempty"`
}

func (ts *turnstile) status() Status {
	snap := ts.lock.Snapshot()
	now := time.Now()
	st := Status{
		State:        snap.State.String(),
		LLMInflight:  snap.Shared,
		Turnstile:    ts.name,
		LLMWaiting:   snap.SharedWaiting,
		ImageWaiting: snap.ImageWaiting,
		HoldWaiting:  snap.HoldWaiting,
		Warming:      ts.warming.Load(),
		Freeing:      snap.Freeing,
		FreeOwed:     snap.OwesFree,
		Holds:        []holdStatus{},
		Upstreams:    map[string]upstreamStatus{},
	}
	if oldest := ts.waiting.oldest(); !oldest.IsZero() {
		st.OldestWaitSeconds = now.Sub(oldest).Seconds()
	}
	if st.Warming && st.LLMInflight > 0 {
		st.LLMInflight--
	}
	ts.trMu.Lock()
	st.Since = ts.since
	if !ts.lastSwitch.IsZero() {
		ls := ts.lastSwitch
		st.LastSwitch = &ls
	}
	ts.trMu.Unlock()
	ts.mu.Lock()
	if ts.job != nil && snap.State == lock.Image {
		st.Job = &jobStatus{jobInfo: *ts.job, AgeSeconds: now.Sub(ts.job.Started).Seconds()}
	}
	for _, h := range ts.holds {
		st.Holds = append(st.Holds, h.status())
	}
	ts.mu.Unlock()
	sort.Slice(st.Holds, func(i, j int) bool { return st.Holds[i].Since.Before(st.Holds[j].Since) })
	st.ImagePending = snap.ImageWaiting > 0 || (snap.State == lock.Image)
	c := ts.cfg()
	st.WaitBuffer = ts.budget.status(c)
	if c != nil {
		st.WaitingLimit = c.MaxWaiting
		if c.Ollama != "" {
			st.Upstreams["ollama"] = upstreamStatus{URL: redactURL(c.Ollama), Reachable: ts.ollamaUp.get()}
		}
		if c.Comfy != "" {
			ws := ts.wsUp.Load()
			reach := ts.comfyUp.get()
			if ws {
				t := true
				reach = &t
			}
			us := upstreamStatus{URL: redactURL(c.Comfy), Reachable: reach, Websocket: &ws}
			if ts.noGPUReading.Load() {
				us.GPUReading = new(bool)
			}
			st.Upstreams["comfy"] = us
		}
	}
	return st
}

// llmReady reports whether an LLM request would be served at once.
func (st Status) llmReady() bool {
	return (st.State == "idle" || st.State == "llm") && st.ImageWaiting == 0 && st.HoldWaiting == 0
}

// StatusHandler answers with a turnstile's status: JSON by default, the
// live status page for browsers (Accept: text/html, or ?view=html), the
// recent history with ?view=history. With ?ready=llm it answers 503 while
// an LLM request would have to wait, for health checks that route LLM
// traffic to another GPU host.
type StatusHandler struct {
	// The turnstile to report. Default "default".
	Turnstile string `json:"turnstile,omitempty"`

	ts *turnstile
}

// CaddyModule returns the Caddy module information.
func (StatusHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.gpu_turnstile_status",
		New: func() caddy.Module { return new(StatusHandler) },
	}
}

// Provision finds the turnstile.
func (h *StatusHandler) Provision(ctx caddy.Context) error {
	ts, err := lookupTurnstile(ctx, h.Turnstile)
	if err != nil {
		return err
	}
	h.ts = ts
	return nil
}

func (h *StatusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	q := r.URL.Query()
	switch view := q.Get("view"); {
	case view == "json":
	case view == "history":
		var since time.Time
		if s := q.Get("since"); s != "" {
			since, _ = time.Parse(time.RFC3339Nano, s)
		}
		return writeJSON(w, http.StatusOK, h.ts.history.view(since))
	case view == "html" || (view == "" && wantsHTML(r)):
		return servePage(w)
	}
	st := h.ts.status()
	code := http.StatusOK
	if q.Get("ready") == "llm" && !st.llmReady() {
		code = http.StatusServiceUnavailable
	}
	return writeJSON(w, code, st)
}

func writeJSON(w http.ResponseWriter, code int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	return json.NewEncoder(w).Encode(v)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*StatusHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*StatusHandler)(nil)
)
