package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// SiteHolds serve one turnstile's hold routes on a site, below where they
// are mounted (see holdRoutes). Requests from a page of another site are
// refused (403), and so is a body that is not JSON (415). Errors are
// JSON: {"error":"..."}, the admin endpoint's shape.
type SiteHolds struct {
	Turnstile Turnstile
	Origin    *CrossOrigin
}

// ServeHTTP answers every request itself; an error it returns is Caddy's.
func (s *SiteHolds) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	err := refused(s.Origin.Guard(r))
	switch {
	case err != nil:
	case parts[0] == "holds":
		err = holdRoutes{one: &s.Turnstile}.serve(w, r, parts[1:])
	default:
		err = apiError(http.StatusNotFound, "no such route: %s (the hold routes are /holds...)", r.URL.Path)
	}
	return WriteAPIError(w, err)
}

// holdRoutes serve the hold routes, below the path where they are mounted:
//
//	GET    /holds             active holds
//	POST   /holds             {"turnstile","owner","ttl","wait","wait_timeout","force"} -> 201 once held
//	POST   /holds/{id}/renew  [{"ttl"}]
//	DELETE /holds/{id}
//
// With one nil (the admin endpoint) they reach every turnstile of all,
// and a new hold names its own; otherwise only one, and a new hold may
// name no other. Errors are caddy.APIError values.
type holdRoutes struct {
	one *Turnstile
	all Turnstiles
}

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
		return hr.release(w, parts[0])
	case len(parts) == 2 && parts[1] == "renew":
		if err := allow(r, http.MethodPost); err != nil {
			return err
		}
		return hr.renew(w, r, parts[0])
	}
	return apiError(http.StatusNotFound, "no such route: %s", r.URL.Path)
}

// release answers DELETE /holds/{id}.
func (hr holdRoutes) release(w http.ResponseWriter, id string) error {
	h := hr.find(id)
	if h == nil {
		return apiError(http.StatusNotFound, "no hold %q (it may have expired)", id)
	}
	switch err := h.Release(); {
	case errors.Is(err, gpu.ErrPresenceHold):
		return errPresenceHold(h, err)
	case err != nil:
		return apiError(http.StatusNotFound, "no hold %q (it may have expired)", id)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"id": h.ID, "released": true})
}

// renew answers POST /holds/{id}/renew.
func (hr holdRoutes) renew(w http.ResponseWriter, r *http.Request, id string) error {
	var req struct {
		TTL json.RawMessage `json:"ttl"`
	}
	if err := decodeBody(r, &req, true); err != nil {
		return err
	}
	h := hr.find(id)
	if h == nil {
		return apiError(http.StatusNotFound, "no hold %q (it may have expired)", id)
	}
	if err := h.Leased(); err != nil {
		return errPresenceHold(h, err)
	}
	ttl, err := parseTTL(req.TTL, h.TTL)
	if err != nil {
		return err
	}
	if !h.Renew(ttl) {
		return apiError(http.StatusNotFound, "hold %q has ended", id)
	}
	return writeJSON(w, http.StatusOK, h.Status())
}

// errPresenceHold refuses to end or renew a presence hold through the
// hold routes (gpu.ErrPresenceHold).
func errPresenceHold(h *gpu.Hold, err error) error {
	return apiError(http.StatusConflict, "hold %q is a presence hold (%s): %v", h.ID, h.Owner, err)
}

// each calls f for every turnstile these routes reach, until it returns
// false.
func (hr holdRoutes) each(f func(Turnstile) bool) {
	if hr.one != nil {
		f(*hr.one)
		return
	}
	hr.all.Range(f)
}

// find returns the hold with this id, or nil.
func (hr holdRoutes) find(id string) *gpu.Hold {
	var found *gpu.Hold
	hr.each(func(t Turnstile) bool {
		found = t.FindHold(id)
		return found == nil
	})
	return found
}

func (hr holdRoutes) list() map[string]any {
	holds := []gpu.HoldStatus{}
	hr.each(func(t Turnstile) bool {
		holds = append(holds, t.Status().Holds...)
		return true
	})
	return map[string]any{"holds": holds}
}

// holdRequest is a POST /holds body, checked.
type holdRequest struct {
	t     Turnstile
	owner string
	ttl   time.Duration
	wait  time.Duration // the longest wait, from the request's arrival
	now   bool          // "wait": false: 409 at once if the GPU cannot be held now
	force bool          // "force": engines' processes left do not keep the GPU from it
}

func (hr holdRoutes) create(w http.ResponseWriter, r *http.Request) error {
	req, err := hr.parseCreate(r)
	if err != nil {
		return err
	}
	t := req.t
	ctx, cancel := context.WithDeadline(r.Context(), admit.Arrival(r).Add(req.wait))
	defer cancel()
	var h *gpu.Hold
	if req.now {
		h, err = t.TryHold(gpu.WithWaiter(r.Context(), gpu.Waiter{Path: r.URL.Path, Force: req.force}), req.owner, req.ttl)
	} else {
		h, err = t.TakeHold(gpu.WithWaiter(ctx, gpu.Waiter{Path: r.URL.Path, Force: req.force}), req.owner, req.ttl)
	}
	switch {
	case err == nil:
		return writeJSON(w, http.StatusCreated, h.Status())
	case errors.Is(err, gpu.ErrHoldBusy):
		return writeJSON(w, http.StatusConflict, map[string]any{
			"error":      "gpu_turnstile: " + err.Error(),
			"blocked_by": blockedBy(t.Status()),
		})
	case r.Context().Err() != nil:
		return nil // the client went away; nothing is held
	case ctx.Err() != nil:
		w.Header().Set("Retry-After", strconv.Itoa(t.Config.RetryAfter()))
		return apiError(http.StatusServiceUnavailable, "waited %v (wait_timeout) for the GPU, busy (%s); no hold was taken", req.wait, t.Status().State)
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
		// Force: LLM engines' processes left alive or unseen do not keep
		// the GPU from the hold (the operator says they hold nothing).
		Force bool `json:"force"`
	}
	if err := decodeBody(r, &body, false); err != nil {
		return holdRequest{}, err
	}
	req := holdRequest{now: body.Wait != nil && !*body.Wait, force: body.Force}
	var err error
	switch {
	case hr.one == nil:
		if req.t, err = findTurnstile(hr.all, body.Turnstile); err != nil {
			return holdRequest{}, err
		}
	case body.Turnstile != "" && body.Turnstile != hr.one.Name():
		return holdRequest{}, apiError(http.StatusBadRequest, "turnstile: %q, but this route holds turnstile %q", body.Turnstile, hr.one.Name())
	default:
		req.t = *hr.one
	}
	if req.ttl, err = parseTTL(body.TTL, gpu.DefaultHoldTTL); err != nil {
		return holdRequest{}, err
	}
	if req.owner = strings.TrimSpace(body.Owner); req.owner == "" {
		req.owner = "unnamed"
	}
	if len(req.owner) > 200 {
		return holdRequest{}, apiError(http.StatusBadRequest, "owner: longer than 200 bytes")
	}
	wait, started := req.t.Config.HoldWait()
	if !started {
		return holdRequest{}, apiError(http.StatusServiceUnavailable, "turnstile %q is starting; try again in a moment", req.t.Name())
	}
	req.wait, err = parseSpan("wait_timeout", body.WaitTimeout, wait)
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

func blockedBy(st gpu.Status) holdBlocker {
	holds := st.Holds
	if holds == nil {
		holds = []gpu.HoldStatus{}
	}
	return holdBlocker{State: st.State, Job: st.Job, Holds: holds, LLMInflight: st.LLMInflight,
		ImageWaiting: st.ImageWaiting, HoldWaiting: st.HoldWaiting, Freeing: st.Freeing}
}
