package turnstile

import (
	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/cli"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

func init() {
	caddy.RegisterModule(new(Admin))
	// `caddy gpu-turnstile status|hold|...`, through these routes.
	caddycmd.RegisterCommand(cli.Command())
}

// Admin serves the turnstiles' admin routes below /gpu_turnstile/ on
// Caddy's admin endpoint, never on the proxied listeners: status,
// history, events, holds and cancel (httpapi.Admin lists them).
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
