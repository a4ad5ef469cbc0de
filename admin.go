package turnstile

import (
	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

func init() {
	caddy.RegisterModule(new(Admin))
}

// Admin serves the turnstiles' admin routes on Caddy's admin endpoint
// (never on the proxied listeners):
//
//	GET    /gpu_turnstile/status            every turnstile's status
//	GET    /gpu_turnstile/history[?turnstile=NAME]
//	GET    /gpu_turnstile/events[?turnstile=NAME]  the live events (Server-Sent Events)
//	GET    /gpu_turnstile/holds             active holds
//	POST   /gpu_turnstile/holds             {"turnstile","owner","ttl","wait","wait_timeout"} -> 201 once held
//	POST   /gpu_turnstile/holds/{id}/renew  [{"ttl"}]
//	DELETE /gpu_turnstile/holds/{id}
//	DELETE /gpu_turnstile/job[?turnstile=NAME]  cancel the running image job -> 200 once stopped
//	DELETE /gpu_turnstile/job?force=1[&turnstile=NAME]  abandon it: the GPU is handed on
//
// The hold routes are those of the gpu_turnstile_holds handler, for every
// turnstile.
type Admin struct {
	done <-chan struct{}
}

// CaddyModule returns the Caddy module information.
func (*Admin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.gpu_turnstile",
		New: func() caddy.Module { return new(Admin) },
	}
}

// Provision keeps the end of the config that starts this admin
// endpoint: a reload or Caddy's exit ends its event streams.
func (a *Admin) Provision(ctx caddy.Context) error {
	a.done = ctx.Done()
	return nil
}

// Routes returns the admin routes.
func (a *Admin) Routes() []caddy.AdminRoute {
	routes := httpapi.Admin{Turnstiles: pooled{}, Done: a.done}
	return []caddy.AdminRoute{{Pattern: "/gpu_turnstile/", Handler: caddy.AdminHandlerFunc(routes.ServeHTTP)}}
}

// pooled are the turnstiles of the process-wide pool, for the admin
// routes.
type pooled struct{}

// Find implements httpapi.Turnstiles.
func (pooled) Find(name string) (httpapi.Turnstile, bool) {
	var found httpapi.Turnstile
	ok := false
	turnstiles.Range(func(k, v any) bool {
		if k.(string) == name {
			found, ok = v.(*turnstile).api(), true
		}
		return !ok
	})
	return found, ok
}

// Range implements httpapi.Turnstiles.
func (pooled) Range(f func(httpapi.Turnstile) bool) {
	turnstiles.Range(func(_, v any) bool { return f(v.(*turnstile).api()) })
}

// Interface guards
var (
	_ caddy.AdminRouter  = (*Admin)(nil)
	_ caddy.Provisioner  = (*Admin)(nil)
	_ httpapi.Turnstiles = pooled{}
)
