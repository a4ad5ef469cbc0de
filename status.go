package turnstile

import (
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

func init() {
	caddy.RegisterModule(StatusHandler{})
}

// Status is a turnstile's status JSON: what its GPU is doing, and what
// the requests waiting for it hold.
type Status = httpapi.Status

// WaitBufferStatus is the status JSON's "wait_buffer".
type WaitBufferStatus = httpapi.WaitBufferStatus

func (ts *turnstile) status() Status { return ts.statusOf(ts.gpu.Status()) }

// statusOf is the status JSON of the GPU's status g.
func (ts *turnstile) statusOf(g gpu.Status) Status { return httpapi.StatusOf(g, ts.Facts()) }

// api is ts as its routes see it.
func (ts *turnstile) api() httpapi.Turnstile { return httpapi.Turnstile{GPU: ts.gpu, Config: ts} }

// Facts implements httpapi.Config.
func (ts *turnstile) Facts() httpapi.Facts {
	c := ts.cfg()
	f := httpapi.Facts{WaitBuffer: WaitBufferStatus{Bytes: ts.budget.Bytes(), Peak: ts.budget.Peak()}}
	if c != nil {
		f.WaitBuffer.Limit = c.WaitBuffer
		f.WaitingLimit, f.Warnings, f.PublicWarnings = c.MaxWaiting, c.Routes.Warnings(), c.Routes.PublicWarnings()
	}
	return f
}

// HoldWait implements httpapi.Config.
func (ts *turnstile) HoldWait() (time.Duration, bool) {
	if c := ts.cfg(); c != nil {
		return c.ImageWait, true
	}
	return 0, false
}

// RetryAfter implements httpapi.Config.
func (ts *turnstile) RetryAfter() int { return httpapi.Seconds(ts.retryAfter(ts.cfg())) }

// StatusHandler answers with a turnstile's status, in its public view
// (httpapi.PublicStatus: no hold owners, process names, PIDs, URLs or
// addresses) unless Detail is "full": JSON by default, the
// live status page for browsers (Accept: text/html, or ?view=html), the
// live events as Server-Sent Events (Accept: text/event-stream, or
// ?view=events), the recent history with ?view=history. With ?ready=llm
// or ?ready=image it answers the JSON with 503 unless a request of that
// class would be let through at once to a reachable engine (gpu.Ready),
// for health checks that route traffic to another GPU host. With
// controls, DELETE ?view=job cancels the running image job.
type StatusHandler struct {
	// The turnstile to report. Default "default".
	Turnstile string `json:"turnstile,omitempty"`
	// Detail is how much of the status this handler gives: "public"
	// (the default: what anyone who may use the engines may see) or
	// "full" (the whole status, as the admin endpoint gives it: hold
	// owners, what presence saw, engine URLs, processes; for a route
	// that only the operator reaches, behind basic_auth or the like).
	Detail string `json:"detail,omitempty"`
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

	routes httpapi.StatusRoutes
}

// CaddyModule returns the Caddy module information.
func (StatusHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.gpu_turnstile_status",
		New: func() caddy.Module { return new(StatusHandler) },
	}
}

// Provision finds the turnstile and sets up the cross-origin check of
// the controls. An event stream ends with the config that serves it, or
// when its server begins to shut down, whichever comes first: the server
// waits for open connections.
func (h *StatusHandler) Provision(ctx caddy.Context) error {
	full, err := tcfg.StatusDetailFull(h.Detail)
	if err != nil {
		return fmt.Errorf("gpu_turnstile_status: %w", err)
	}
	origin, err := httpapi.HandlerCrossOrigin("gpu_turnstile_status", h.TrustedOrigins)
	if err != nil {
		return err
	}
	ts, _, err := lookupTurnstile(ctx, h.Turnstile)
	if err != nil {
		return err
	}
	h.routes = httpapi.StatusRoutes{Turnstile: ts.api(), Full: full, Controls: h.Controls, Origin: origin,
		Done: ctx.Done(), Shutdown: httpapi.OnShutdown(ctx)}
	return nil
}

// ServeHTTP implements caddyhttp.MiddlewareHandler. It answers every
// request itself.
func (h *StatusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	return h.routes.ServeHTTP(w, r)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*StatusHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*StatusHandler)(nil)
	_ httpapi.Config              = (*turnstile)(nil)
)
