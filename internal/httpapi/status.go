package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

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
	// engines, at most 16. A config that loads starts with none.
	Warnings []string `json:"warnings,omitempty"`
	// PublicWarnings are Warnings without the upstreams' addresses, for
	// the public view (Public).
	PublicWarnings []string `json:"-"`
}

// WaitBufferStatus is the status JSON's "wait_buffer".
type WaitBufferStatus struct {
	Bytes int64 `json:"bytes"` // request body bytes held for waiting requests now
	Limit int64 `json:"limit"` // wait_buffer_limit
	Peak  int64 `json:"peak"`  // the most held at once since Caddy started
}

// StatusOf is the status JSON of the GPU's status g, with the facts f of
// its turnstile's config.
func StatusOf(g gpu.Status, f Facts) Status {
	return Status{Status: g, WaitBuffer: f.WaitBuffer, WaitingLimit: f.WaitingLimit, Warnings: f.Warnings,
		PublicWarnings: f.PublicWarnings}
}

// status is t's status JSON now.
func (t Turnstile) status() Status { return StatusOf(t.Status(), t.Config.Facts()) }

// StatusRoutes answer a status handler's requests, each in the public
// view (PublicStatus, PublicHistory) unless Full: the status JSON by
// default, the live page for browsers (Accept: text/html, or ?view=html),
// the live events as Server-Sent Events (Accept: text/event-stream, or
// ?view=events), the recent history with ?view=history, a readiness check
// with ?ready=llm|image, and with Controls, DELETE ?view=job.
type StatusRoutes struct {
	Turnstile Turnstile
	// Full gives the whole status (detail full), for a route that only
	// the operator reaches; without it, the public view.
	Full bool
	// Controls lets the clients cancel the running image job.
	Controls bool
	// Origin checks the requests that change state.
	Origin *CrossOrigin
	// Done is closed when the config that serves the routes ends;
	// Shutdown when its server begins to shut down (OnShutdown). Either
	// ends an event stream.
	Done, Shutdown <-chan struct{}
}

// ServeHTTP answers one request.
func (s *StatusRoutes) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	if r.Method == http.MethodDelete {
		return s.serveCancel(w, r)
	}
	q := r.URL.Query()
	view := q.Get("view")
	if msg := badStatusQuery(q); msg != "" {
		return writeJSON(w, http.StatusBadRequest, map[string]string{"error": msg})
	}
	t := s.Turnstile
	switch {
	case q.Has("ready"):
		ready, gst := t.Ready(r.Context(), strings.ToLower(q.Get("ready")))
		code := http.StatusOK
		if !ready {
			code = http.StatusServiceUnavailable
		}
		return writeJSON(w, code, s.view(StatusOf(gst, t.Config.Facts())))
	case view == "json":
	case view == "history":
		var since time.Time
		if s := q.Get("since"); s != "" {
			since, _ = time.Parse(time.RFC3339Nano, s)
		}
		h := t.History(since)
		if !s.Full {
			return writeJSON(w, http.StatusOK, PublicHistoryOf(h))
		}
		return writeJSON(w, http.StatusOK, h)
	case view == "events" || (view == "" && wantsEvents(r)):
		return s.serveEvents(w, r)
	case view == "html" || (view == "" && wantsHTML(r)):
		return servePage(w, s.Controls)
	}
	return writeJSON(w, http.StatusOK, s.view(t.status()))
}

// view is st as these routes show it: whole with Full, its public view
// otherwise.
func (s *StatusRoutes) view(st Status) any {
	if s.Full {
		return st
	}
	return Public(st)
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

// writeJSON answers v as JSON, never cached.
func writeJSON(w http.ResponseWriter, code int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	return json.NewEncoder(w).Encode(v)
}
