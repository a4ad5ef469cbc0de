package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// DefaultTurnstile is the turnstile that a route naming none reaches.
const DefaultTurnstile = "default"

// Admin serves the admin endpoint's routes below /gpu_turnstile/ for
// every turnstile of Turnstiles; errors are caddy.APIError values:
//
//	GET    /gpu_turnstile/status            every turnstile's status
//	GET    /gpu_turnstile/history[?turnstile=NAME]
//	GET    /gpu_turnstile/events[?turnstile=NAME]  the live events (Server-Sent Events)
//	GET    /gpu_turnstile/holds             active holds
//	POST   /gpu_turnstile/holds             {"turnstile","owner","ttl","wait","wait_timeout","force"} -> 201 once held
//	POST   /gpu_turnstile/holds/{id}/renew  [{"ttl"}]
//	DELETE /gpu_turnstile/holds/{id}
//	DELETE /gpu_turnstile/job[?turnstile=NAME]  cancel the running image job -> 200 once stopped
//	DELETE /gpu_turnstile/job?force=1[&turnstile=NAME]  abandon it: the GPU is handed on
//
// The hold routes are those of the gpu_turnstile_holds handler, for every
// turnstile.
type Admin struct {
	Turnstiles Turnstiles
	// Done is closed when the config whose admin endpoint serves the
	// routes ends (a reload replaces the endpoint): it ends the event
	// streams, which would otherwise hold up the old endpoint's shutdown.
	Done <-chan struct{}
}

// ServeHTTP answers one request to the admin endpoint.
func (a Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	// Caddy's own origin check guards the endpoint; a form's body (not
	// JSON) never reaches a route.
	if err := refused(RequireJSON(r)); err != nil {
		return err
	}
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, "/gpu_turnstile/"), "/")
	parts := strings.Split(rest, "/")
	switch {
	case rest == "status":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, allStatus(a.Turnstiles))
	case rest == "history":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		t, err := findTurnstile(a.Turnstiles, r.URL.Query().Get("turnstile"))
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, t.History(time.Time{}))
	case rest == "events":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		t, err := findTurnstile(a.Turnstiles, r.URL.Query().Get("turnstile"))
		if err != nil {
			return err
		}
		return streamEvents(w, r, t, false, a.Done, nil)
	case rest == "job":
		if err := allow(r, http.MethodDelete); err != nil {
			return err
		}
		t, err := findTurnstile(a.Turnstiles, r.URL.Query().Get("turnstile"))
		if err != nil {
			return err
		}
		return cancelJob(w, r, t)
	case parts[0] == "holds":
		return holdRoutes{all: a.Turnstiles}.serve(w, r, parts[1:])
	}
	return apiError(http.StatusNotFound, "no such route: %s", r.URL.Path)
}

// allStatus is every turnstile's status, by name.
func allStatus(ts Turnstiles) map[string]any {
	all := map[string]Status{}
	ts.Range(func(t Turnstile) bool {
		all[t.Name()] = t.status()
		return true
	})
	// The default turnstile's fields at the top level keep this answer a
	// superset of the handler's, for tools written against either.
	out := map[string]any{"turnstiles": all}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	top, ok := all[DefaultTurnstile]
	if !ok && len(names) > 0 {
		top, ok = all[names[0]]
	}
	if ok {
		out["state"], out["llm_inflight"], out["image_pending"] = top.State, top.LLMInflight, top.ImagePending
	}
	return out
}

// findTurnstile returns the named turnstile ("": the default one), or a
// 404.
func findTurnstile(ts Turnstiles, name string) (Turnstile, error) {
	if name == "" {
		name = DefaultTurnstile
	}
	t, ok := ts.Find(name)
	if !ok {
		return Turnstile{}, apiError(http.StatusNotFound, "no turnstile named %q", name)
	}
	return t, nil
}

// parseTTL reads a ttl given as a duration string ("2m") or a number of
// seconds.
func parseTTL(raw json.RawMessage, def time.Duration) (time.Duration, error) {
	return parseSpan("ttl", raw, def)
}

// parseSpan reads the body field named field, a duration string ("2m") or
// a number of seconds, within (0, gpu.MaxHoldTTL]; def if absent.
func parseSpan(field string, raw json.RawMessage, def time.Duration) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	var ttl time.Duration
	var secs float64
	var s string
	switch {
	case json.Unmarshal(raw, &secs) == nil:
		ttl = time.Duration(secs * float64(time.Second))
	case json.Unmarshal(raw, &s) == nil:
		d, err := caddy.ParseDuration(s)
		if err != nil {
			return 0, apiError(http.StatusBadRequest, "%s: %v", field, err)
		}
		ttl = d
	default:
		return 0, apiError(http.StatusBadRequest, "%s: want a duration such as \"2m\" or seconds, got %s", field, raw)
	}
	if ttl <= 0 || ttl > gpu.MaxHoldTTL {
		return 0, apiError(http.StatusBadRequest, "%s: %v is outside (0, %v]", field, ttl, gpu.MaxHoldTTL)
	}
	return ttl, nil
}

// decodeBody reads a small JSON body strictly: unknown fields and trailing
// data are errors. An empty body is allowed only if optional.
func decodeBody(r *http.Request, v any, optional bool) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, 64<<10+1))
	if err != nil {
		return apiError(http.StatusBadRequest, "reading body: %v", err)
	}
	if len(data) > 64<<10 {
		return apiError(http.StatusRequestEntityTooLarge, "body larger than 64 KiB")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if optional {
			return nil
		}
		return apiError(http.StatusBadRequest, "empty body: want JSON like {\"turnstile\":\"default\",\"owner\":\"steam\",\"ttl\":\"2m\"}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return apiError(http.StatusBadRequest, "invalid JSON body: %v", err)
	}
	if dec.More() {
		return apiError(http.StatusBadRequest, "invalid JSON body: data after the object")
	}
	return nil
}

// allow returns a 405 unless r's method is one of methods.
func allow(r *http.Request, methods ...string) error {
	for _, m := range methods {
		if r.Method == m {
			return nil
		}
	}
	return apiError(http.StatusMethodNotAllowed, "method %s not allowed; use %s", r.Method, strings.Join(methods, " or "))
}

// apiError is a route's error, as the admin endpoint answers it.
func apiError(status int, format string, args ...any) error {
	return caddy.APIError{HTTPStatus: status, Err: fmt.Errorf("gpu_turnstile: "+format, args...)}
}

// refused turns a refusal of the checks (CrossOrigin, RequireJSON) into
// the routes' error; nil stays nil.
func refused(err error) error {
	var ref *Refusal
	if errors.As(err, &ref) {
		return apiError(ref.Status, "%s", ref.Message)
	}
	return err
}
