package turnstile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

func init() {
	caddy.RegisterModule(HoldsHandler{})
}

// HoldsHandler serves one turnstile's hold routes on a site, relative to
// where it is mounted (with handle_path, so that the prefix is stripped):
//
//	GET    /holds             this turnstile's holds
//	POST   /holds             {"owner","ttl","wait","wait_timeout"} -> 201 once held
//	POST   /holds/{id}/renew  [{"ttl"}]
//	DELETE /holds/{id}
//
// They are the admin endpoint's hold routes (see Admin) for a launcher
// that cannot reach the admin endpoint: put basic_auth or forward_auth in
// front of it. A body's "turnstile", if given, must name this handler's.
// Errors are JSON: {"error":"..."}. Requests from a page of another site
// are refused (403), and so is a body that is not JSON (415): see
// internal/httpapi.
type HoldsHandler struct {
	// The turnstile whose holds these are. Default "default".
	Turnstile string `json:"turnstile,omitempty"`
	// TrustedOrigins are the origins (scheme://host[:port]) of other
	// sites whose pages may take, renew and release holds here, such as
	// a launcher's web UI. Requests from any other site are refused.
	TrustedOrigins []string `json:"trusted_origins,omitempty"`

	ts     *turnstile
	origin *httpapi.CrossOrigin
}

// CaddyModule returns the Caddy module information.
func (HoldsHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.gpu_turnstile_holds",
		New: func() caddy.Module { return new(HoldsHandler) },
	}
}

// Provision finds the turnstile and sets up the cross-origin check.
func (h *HoldsHandler) Provision(ctx caddy.Context) error {
	origin, err := newCrossOrigin("gpu_turnstile_holds", h.TrustedOrigins)
	if err != nil {
		return err
	}
	ts, err := lookupTurnstile(ctx, h.Turnstile)
	if err != nil {
		return err
	}
	h.ts, h.origin = ts, origin
	return nil
}

// Validate checks the turnstile's name.
func (h *HoldsHandler) Validate() error {
	if h.Turnstile != "" && !tcfg.ValidName(h.Turnstile) {
		return fmt.Errorf("gpu_turnstile_holds: invalid turnstile name %q", h.Turnstile)
	}
	return nil
}

// ServeHTTP implements caddyhttp.MiddlewareHandler. It answers every
// request itself.
func (h *HoldsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	err := refused(h.origin.Guard(r))
	switch {
	case err != nil:
	case parts[0] == "holds":
		err = holdRoutes{ts: h.ts}.serve(w, r, parts[1:])
	default:
		err = apiError(http.StatusNotFound, "no such route: %s (the hold routes are /holds...)", r.URL.Path)
	}
	return writeAPIError(w, err) // the admin endpoint's error shape
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler:
//
//	gpu_turnstile_holds [NAME] {
//		turnstile       NAME
//		trusted_origins URL...
//	}
func (h *HoldsHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return tcfg.UnmarshalSiteRoute(d, &h.Turnstile, &h.TrustedOrigins, nil)
}

func (h *HoldsHandler) turnstileName() string { return h.Turnstile }

// holdRoutes serve the hold routes, below the path where they are mounted:
//
//	GET    /holds             active holds
//	POST   /holds             {"turnstile","owner","ttl","wait","wait_timeout"} -> 201 once held
//	POST   /holds/{id}/renew  [{"ttl"}]
//	DELETE /holds/{id}
//
// With ts nil (the admin endpoint) they reach every turnstile, and a new
// hold names its own; otherwise only ts, and a new hold may name no other.
// Errors are caddy.APIError values.
type holdRoutes struct{ ts *turnstile }

// serve answers one request; parts is its path below /holds, split at
// slashes.
func (hr holdRoutes) serve(w http.ResponseWriter, r *http.Request, parts []string) error {
	switch {
	case len(parts) == 0:
		switch r.Method {
		case http.MethodGet:
			return writeJSON(w, http.StatusOK, hr.list())
		case http.MethodPost:
			return hr.create(w, r)
		}
		return allow(r, http.MethodGet, http.MethodPost)
	case len(parts) == 1:
		if err := allow(r, http.MethodDelete); err != nil {
			return err
		}
		h := hr.find(parts[0])
		if h != nil && h.Presence() {
			return errPresenceHold(h)
		}
		if h == nil || !h.End("released") {
			return apiError(http.StatusNotFound, "no hold %q (it may have expired)", parts[0])
		}
		return writeJSON(w, http.StatusOK, map[string]any{"id": h.ID, "released": true})
	case len(parts) == 2 && parts[1] == "renew":
		if err := allow(r, http.MethodPost); err != nil {
			return err
		}
		var req struct {
			TTL json.RawMessage `json:"ttl"`
		}
		if err := decodeBody(r, &req, true); err != nil {
			return err
		}
		h := hr.find(parts[0])
		if h == nil {
			return apiError(http.StatusNotFound, "no hold %q (it may have expired)", parts[0])
		}
		if h.Presence() {
			return errPresenceHold(h)
		}
		ttl, err := parseTTL(req.TTL, h.TTL)
		if err != nil {
			return err
		}
		if !h.Renew(ttl) {
			return apiError(http.StatusNotFound, "hold %q has ended", parts[0])
		}
		return writeJSON(w, http.StatusOK, h.Status())
	}
	return apiError(http.StatusNotFound, "no such route: %s", r.URL.Path)
}

// errPresenceHold refuses to end or renew a presence hold through the hold
// routes: it has no lease, and it ends when its hold_while condition
// clears (ended here, its watch would not take it again while the
// condition holds).
func errPresenceHold(h *gpu.Hold) error {
	return apiError(http.StatusConflict, "hold %q is a presence hold (%s): it ends when its hold_while condition clears", h.ID, h.Owner)
}

// each calls f for every turnstile these routes reach, until it returns
// false.
func (hr holdRoutes) each(f func(*turnstile) bool) {
	if hr.ts != nil {
		f(hr.ts)
		return
	}
	turnstiles.Range(func(_, v any) bool { return f(v.(*turnstile)) })
}

// find returns the hold with this id, or nil.
func (hr holdRoutes) find(id string) *gpu.Hold {
	var found *gpu.Hold
	hr.each(func(ts *turnstile) bool {
		found = ts.FindHold(id)
		return found == nil
	})
	return found
}

func (hr holdRoutes) list() map[string]any {
	holds := []gpu.HoldStatus{}
	hr.each(func(ts *turnstile) bool {
		holds = append(holds, ts.status().Holds...)
		return true
	})
	return map[string]any{"holds": holds}
}

// holdRequest is a POST /holds body, checked.
type holdRequest struct {
	ts    *turnstile
	owner string
	ttl   time.Duration
	wait  time.Duration // the longest wait, from the request's arrival
	now   bool          // "wait": false: 409 at once if the GPU cannot be held now
}

func (hr holdRoutes) create(w http.ResponseWriter, r *http.Request) error {
	req, err := hr.parseCreate(r)
	if err != nil {
		return err
	}
	ts := req.ts
	ctx, cancel := context.WithDeadline(r.Context(), admit.Arrival(r).Add(req.wait))
	defer cancel()
	var h *gpu.Hold
	if req.now {
		h, err = ts.TryHold(r.Context(), req.owner, req.ttl)
	} else {
		h, err = ts.TakeHold(gpu.WithWaiter(ctx, gpu.Waiter{Path: r.URL.Path}), req.owner, req.ttl)
	}
	switch {
	case err == nil:
		return writeJSON(w, http.StatusCreated, h.Status())
	case errors.Is(err, gpu.ErrHoldBusy):
		return writeJSON(w, http.StatusConflict, map[string]any{
			"error":      "gpu_turnstile: " + err.Error(),
			"blocked_by": blockedBy(ts.status()),
		})
	case r.Context().Err() != nil:
		return nil // the client went away; nothing is held
	case ctx.Err() != nil:
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(ts.retryAfter(ts.cfg()))))
		return apiError(http.StatusServiceUnavailable, "waited %v (wait_timeout) for the GPU, busy (%s); no hold was taken", req.wait, ts.lock.State())
	case errors.Is(err, gpu.ErrHoldPrepare):
		return apiError(http.StatusServiceUnavailable, "%v", err)
	}
	return err
}

// parseCreate reads and checks a POST /holds body. It is read to its end
// before the request waits: only then does the server notice a client
// that goes away (and cancel the wait).
func (hr holdRoutes) parseCreate(r *http.Request) (holdRequest, error) {
	var body struct {
		Turnstile   string          `json:"turnstile"`
		Owner       string          `json:"owner"`
		TTL         json.RawMessage `json:"ttl"`
		Wait        *bool           `json:"wait"`
		WaitTimeout json.RawMessage `json:"wait_timeout"` // default image_wait_timeout
	}
	if err := decodeBody(r, &body, false); err != nil {
		return holdRequest{}, err
	}
	req := holdRequest{ts: hr.ts, now: body.Wait != nil && !*body.Wait}
	switch {
	case req.ts == nil:
		var err error
		if req.ts, err = adminTurnstile(body.Turnstile); err != nil {
			return holdRequest{}, err
		}
	case body.Turnstile != "" && body.Turnstile != req.ts.name:
		return holdRequest{}, apiError(http.StatusBadRequest, "turnstile: %q, but this route holds turnstile %q", body.Turnstile, req.ts.name)
	}
	var err error
	if req.ttl, err = parseTTL(body.TTL, defaultHoldTTL); err != nil {
		return holdRequest{}, err
	}
	if req.owner = strings.TrimSpace(body.Owner); req.owner == "" {
		req.owner = "unnamed"
	}
	if len(req.owner) > 200 {
		return holdRequest{}, apiError(http.StatusBadRequest, "owner: longer than 200 bytes")
	}
	c := req.ts.cfg()
	if c == nil { // a turnstile whose config has not started yet
		return holdRequest{}, apiError(http.StatusServiceUnavailable, "turnstile %q is starting; try again in a moment", req.ts.name)
	}
	req.wait, err = parseSpan("wait_timeout", body.WaitTimeout, c.ImageWait)
	return req, err
}

// holdBlocker is what keeps a hold from being granted at once.
type holdBlocker struct {
	State string           `json:"state"`
	Job   *gpu.JobStatus   `json:"job"` // null when no image job runs
	Holds []gpu.HoldStatus `json:"holds"`
	// The counts behind a state that alone does not explain the refusal
	// (a queue, a free in progress).
	LLMInflight  int  `json:"llm_inflight"`
	ImageWaiting int  `json:"image_waiting"`
	HoldWaiting  int  `json:"hold_waiting"`
	Freeing      bool `json:"freeing"`
}

func blockedBy(st Status) holdBlocker {
	holds := st.Holds
	if holds == nil {
		holds = []gpu.HoldStatus{}
	}
	return holdBlocker{State: st.State, Job: st.Job, Holds: holds, LLMInflight: st.LLMInflight,
		ImageWaiting: st.ImageWaiting, HoldWaiting: st.HoldWaiting, Freeing: st.Freeing}
}

// Interface guards
var (
	_ caddy.Provisioner           = (*HoldsHandler)(nil)
	_ caddy.Validator             = (*HoldsHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*HoldsHandler)(nil)
	_ caddyfile.Unmarshaler       = (*HoldsHandler)(nil)
)
