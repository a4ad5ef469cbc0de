package turnstile

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("gpu_turnstile", tcfg.ParseGlobalApp)
	httpcaddyfile.RegisterHandlerDirective("gpu_turnstile", parseDirective(func() *Handler { return new(Handler) }))
	httpcaddyfile.RegisterHandlerDirective("gpu_turnstile_status", parseDirective(func() *StatusHandler { return new(StatusHandler) }))
	httpcaddyfile.RegisterHandlerDirective("gpu_turnstile_holds", parseDirective(func() *HoldsHandler { return new(HoldsHandler) }))
	// After the auth directives (a request that will be refused never
	// queues for the GPU) and after encode (the prompt_id capture reads
	// uncompressed bytes); before handle and route, so it also guards a
	// reverse_proxy inside them.
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile", httpcaddyfile.After, "encode")
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile_status", httpcaddyfile.Before, "respond")
	// Like the status: a responder, after the auth directives that guard it.
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile_holds", httpcaddyfile.Before, "respond")
}

// turnstileHandler is a handler module that names a turnstile.
type turnstileHandler interface {
	caddyhttp.MiddlewareHandler
	caddyfile.Unmarshaler
	turnstileName() string
}

// parseDirective returns the parser of a handler's directive: a new
// handler from newHandler, filled by its UnmarshalCaddyfile, whose
// turnstile must be defined.
func parseDirective[H turnstileHandler](newHandler func() H) httpcaddyfile.UnmarshalHandlerFunc {
	return func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		m := newHandler()
		if err := m.UnmarshalCaddyfile(h.Dispenser); err != nil {
			return nil, err
		}
		s, err := tcfg.OptionTurnstile(h, m.turnstileName())
		if err != nil {
			return nil, err
		}
		if e, ok := any(m).(interface{ engineName() string }); ok && e.engineName() != "" && !s.HasImageEngine(e.engineName()) {
			return nil, h.Errf("engine %q: turnstile %q has no image engine of that name", e.engineName(), tcfg.OrDefault(m.turnstileName()))
		}
		return m, nil
	}
}

func (hd *Handler) turnstileName() string       { return hd.Turnstile }
func (hd *Handler) engineName() string          { return hd.Engine }
func (sh *StatusHandler) turnstileName() string { return sh.Turnstile }

// UnmarshalCaddyfile implements caddyfile.Unmarshaler (internal/config
// reads the directive).
func (hd *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return tcfg.UnmarshalHandler(d, tcfg.HandlerFields{Class: &hd.Class, Turnstile: &hd.Turnstile, Engine: &hd.Engine, DuringJob: &hd.DuringJob, WaitNotice: &hd.WaitNotice})
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler:
//
//	gpu_turnstile_status [NAME] {
//		turnstile       NAME
//		detail          full|public
//		controls
//		trusted_origins URL...
//	}
func (sh *StatusHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return tcfg.UnmarshalStatusRoute(d, &sh.Turnstile, &sh.TrustedOrigins, &sh.Controls, &sh.Detail)
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*Handler)(nil)
	_ caddyfile.Unmarshaler = (*StatusHandler)(nil)
)
