package turnstile

import (
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
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

	routes httpapi.SiteHolds
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
	origin, err := httpapi.HandlerCrossOrigin("gpu_turnstile_holds", h.TrustedOrigins)
	if err != nil {
		return err
	}
	ts, _, err := lookupTurnstile(ctx, h.Turnstile)
	if err != nil {
		return err
	}
	h.routes = httpapi.SiteHolds{Turnstile: ts.api(), Origin: origin}
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
	return h.routes.ServeHTTP(w, r)
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

// Interface guards
var (
	_ caddy.Provisioner           = (*HoldsHandler)(nil)
	_ caddy.Validator             = (*HoldsHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*HoldsHandler)(nil)
	_ caddyfile.Unmarshaler       = (*HoldsHandler)(nil)
)
