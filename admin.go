package turnstile

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

func init() {
	caddy.RegisterModule(Admin{})
}

// Admin serves the turnstiles' admin routes on Caddy's admin endpoint
// (never on the proxied listeners):
//
//	GET    /gpu_turnstile/status            every turnstile's status
//	GET    /gpu_turnstile/history[?turnstile=NAME]
//	GET    /gpu_turnstile/holds             active holds
//	POST   /gpu_turnstile/holds             {"turnstile","owner","ttl","wait","wait_timeout"} -> 201 once held
//	POST   /gpu_turnstile/holds/{id}/renew  [{"ttl"}]
//	DELETE /gpu_turnstile/holds/{id}
//	DELETE /gpu_turnstile/job[?turnstile=NAME]  cancel the running image job -> 200 once stopped
//	DELETE /gpu_turnstile/job?force=1[&turnstile=NAME]  abandon it: the GPU is handed on
//
// The hold routes are those of the gpu_turnstile_holds handler (holds.go),
// for every turnstile.
type Admin struct{}

// maxHoldTTL bounds one hold's lease; a holder renews to keep it longer.
const maxHoldTTL = 24 * time.Hour

// defaultHoldTTL applies when a hold request names no ttl.
const defaultHoldTTL = 5 * time.Minute

// CaddyModule returns the Caddy module information.
func (Admin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.gpu_turnstile",
		New: func() caddy.Module { return new(Admin) },
	}
}

// Routes returns the admin routes.
func (a Admin) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/gpu_turnstile/", Handler: caddy.AdminHandlerFunc(a.serve)}}
}

func (a Admin) serve(w http.ResponseWriter, r *http.Request) error {
	// Caddy's own origin check guards the endpoint; a form's body (not
	// JSON) never reaches a route.
	if err := refused(httpapi.RequireJSON(r)); err != nil {
		return err
	}
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, "/gpu_turnstile/"), "/")
	parts := strings.Split(rest, "/")
	switch {
	case rest == "status":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, allStatus())
	case rest == "history":
		if err := allow(r, http.MethodGet); err != nil {
			return err
		}
		ts, err := adminTurnstile(r.URL.Query().Get("turnstile"))
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, ts.History(time.Time{}))
	case rest == "job":
		if err := allow(r, http.MethodDelete); err != nil {
			return err
		}
		ts, err := adminTurnstile(r.URL.Query().Get("turnstile"))
		if err != nil {
			return err
		}
		return cancelJob(w, r, ts)
	case parts[0] == "holds":
		return holdRoutes{}.serve(w, r, parts[1:])
	}
	return apiError(http.StatusNotFound, "no such route: %s", r.URL.Path)
}

func allStatus() map[string]any {
	all := map[string]Status{}
	turnstiles.Range(func(k, v any) bool {
		all[k.(string)] = v.(*turnstile).status()
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
	top, ok := all["default"]
	if !ok && len(names) > 0 {
		top, ok = all[names[0]]
	}
	if ok {
		out["state"], out["llm_inflight"], out["image_pending"] = top.State, top.LLMInflight, top.ImagePending
	}
	return out
}

func adminTurnstile(name string) (*turnstile, error) {
	if name == "" {
		name = defaultName
	}
	var ts *turnstile
	turnstiles.Range(func(k, v any) bool {
		if k.(string) == name {
			ts = v.(*turnstile)
		}
		return ts == nil
	})
	if ts == nil {
		return nil, apiError(http.StatusNotFound, "no turnstile named %q", name)
	}
	return ts, nil
}

// parseTTL reads a ttl given as a duration string ("2m") or a number of
// seconds.
func parseTTL(raw json.RawMessage, def time.Duration) (time.Duration, error) {
	return parseSpan("ttl", raw, def)
}

// parseSpan reads the body field named field, a duration string ("2m") or
// a number of seconds, within (0, 24h]; def if absent.
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
	if ttl <= 0 || ttl > maxHoldTTL {
		return 0, apiError(http.StatusBadRequest, "%s: %v is outside (0, %v]", field, ttl, maxHoldTTL)
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

func allow(r *http.Request, methods ...string) error {
	for _, m := range methods {
		if r.Method == m {
			return nil
		}
	}
	return apiError(http.StatusMethodNotAllowed, "method %s not allowed; use %s", r.Method, strings.Join(methods, " or "))
}

func apiError(status int, format string, args ...any) error {
	return caddy.APIError{HTTPStatus: status, Err: fmt.Errorf("gpu_turnstile: "+format, args...)}
}

// Interface guards
var _ caddy.AdminRouter = Admin{}
