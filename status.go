package turnstile

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

func init() {
	caddy.RegisterModule(StatusHandler{})
}

// Status is a turnstile's status JSON: what its GPU is doing, and what
// the requests waiting for it hold.
type Status struct {
	gpu.Status
	// WaitBuffer is what the request bodies of waiting requests hold
	// against wait_buffer_limit.
	WaitBuffer WaitBufferStatus `json:"wait_buffer"`
	// WaitingLimit is max_waiting, if set.
	WaitingLimit int `json:"waiting_limit,omitempty"`
	// Warnings are what the running config got wrong, seen at run time:
	// guarded requests proxied to an upstream that is none of the
	// engines (misroute.go), at most 16. A config that loads starts
	// with none.
	Warnings []string `json:"warnings,omitempty"`
}

func (ts *turnstile) status() Status { return ts.statusOf(ts.GPU.Status()) }

// statusOf is the status JSON of the GPU's status g.
func (ts *turnstile) statusOf(g gpu.Status) Status {
	st := Status{Status: g}
	c := ts.cfg()
	st.WaitBuffer = ts.budget.status(c)
	if c != nil {
		st.WaitingLimit = c.MaxWaiting
		st.Warnings = c.Routes.Warnings()
	}
	return st
}

// StatusHandler answers with a turnstile's status: JSON by default, the
// live status page for browsers (Accept: text/html, or ?view=html), the
// live events as Server-Sent Events (Accept: text/event-stream, or
// ?view=events), the recent history with ?view=history. With ?ready=llm
// or ?ready=image it answers the JSON with 503 unless a request of that
// class would be let through at once to a reachable engine (gpu.Ready),
// for health checks that route traffic to another GPU host. With
// controls, DELETE ?view=job cancels the running image job (cancel.go).
type StatusHandler struct {
	// The turnstile to report. Default "default".
	Turnstile string `json:"turnstile,omitempty"`
	// Controls lets this handler's clients cancel the running image job
	// (DELETE ?view=job, and a "Cancel job" button on the page). Off by
	// default: without it, DELETE gets 405. Turn it on only where the
	// handler is reached by those allowed to stop others' jobs (behind
	// basic_auth, forward_auth or a remote_ip matcher).
	Controls bool `json:"controls,omitempty"`
	// TrustedOrigins are the origins (scheme://host[:port]) of other
	// sites whose pages may use the controls. Requests from any other
	// site are refused.
	TrustedOrigins []string `json:"trusted_origins,omitempty"`

	ts     *turnstile
	origin *httpapi.CrossOrigin
	// done is closed when the config that serves this ends; shutdown
	// when its server begins to shut down (a reload or Caddy's exit),
	// which comes first: the server waits for open connections, so an
	// event stream must end at once (events.go).
	done     <-chan struct{}
	shutdown *shutdownSignal
}

// CaddyModule returns the Caddy module information.
func (StatusHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.gpu_turnstile_status",
		New: func() caddy.Module { return new(StatusHandler) },
	}
}

// Provision finds the turnstile and sets up the cross-origin check of
// the controls.
func (h *StatusHandler) Provision(ctx caddy.Context) error {
	origin, err := newCrossOrigin("gpu_turnstile_status", h.TrustedOrigins)
	if err != nil {
		return err
	}
	ts, err := lookupTurnstile(ctx, h.Turnstile)
	if err != nil {
		return err
	}
	h.ts, h.origin = ts, origin
	h.done = ctx.Done()
	h.shutdown = onShutdown(ctx)
	return nil
}

func (h *StatusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if r.Method == http.MethodDelete {
		return h.serveCancel(w, r)
	}
	q := r.URL.Query()
	view := q.Get("view")
	if msg := badStatusQuery(q); msg != "" {
		return writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
	}
	switch {
	case q.Has("ready"):
		ready, gst := h.ts.Ready(r.Context(), strings.ToLower(q.Get("ready")))
		code := http.StatusOK
		if !ready {
			code = http.StatusServiceUnavailable
		}
		return writeJSON(w, code, h.ts.statusOf(gst))
	case view == "json":
	case view == "history":
		var since time.Time
		if s := q.Get("since"); s != "" {
			since, _ = time.Parse(time.RFC3339Nano, s)
		}
		return writeJSON(w, http.StatusOK, h.ts.History(since))
	case view == "events" || (view == "" && wantsEvents(r)):
		return h.serveEvents(w, r)
	case view == "html" || (view == "" && wantsHTML(r)):
		return servePage(w, h.Controls)
	}
	return writeJSON(w, http.StatusOK, h.ts.status())
}

// badStatusQuery says what is wrong with a status query, or "": a view
// or ready value the handler does not know, or ready with a view other
// than json (a readiness check always answers the JSON).
func badStatusQuery(q url.Values) string {
	view := q.Get("view")
	switch view {
	case "", "json", "html", "events", "history":
	default:
		return fmt.Sprintf("gpu_turnstile_status: view %q: want json, html, events or history", view)
	}
	if !q.Has("ready") {
		return ""
	}
	if r := strings.ToLower(q.Get("ready")); r != "llm" && r != "image" {
		return fmt.Sprintf("gpu_turnstile_status: ready %q: want llm or image", q.Get("ready"))
	}
	if view != "" && view != "json" {
		return fmt.Sprintf("gpu_turnstile_status: ready with view %q: a readiness check answers the JSON; drop view or use view=json", view)
	}
	return ""
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
