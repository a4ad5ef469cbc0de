package turnstile

import (
	"encoding/json"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
)

func init() {
	httpcaddyfile.RegisterDirective("gpu_turnstile_proxy", parseProxyDirective)
	// Where reverse_proxy is, like php_fastcgi: the directive is ordered
	// as a whole, and ends the route (its reverse_proxy answers), so it
	// comes after handle and route: `handle /healthz { ... }` and the
	// site's other routes go first. Its own gpu_turnstile guards its own
	// reverse_proxy, so it need not come as early as gpu_turnstile.
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile_proxy", httpcaddyfile.After, "reverse_proxy")
}

// parseProxyDirective parses
//
//	gpu_turnstile_proxy [<matcher>] ENGINE {
//		turnstile   NAME
//		wait_notice [INTERVAL|off]
//		<reverse_proxy subdirectives, but to and dynamic>
//	}
//
// into one route: gpu_turnstile guarding only ENGINE's routes, then
// Caddy's reverse_proxy to ENGINE's URL from the turnstile's global
// options (flush_interval -1 for an LLM engine unless the block sets it).
func parseProxyDirective(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	if !h.Next() {
		return nil, h.ArgErr()
	}
	matcher, err := h.ExtractMatcherSet() // takes the matcher out, and rewinds
	if err != nil {
		return nil, err
	}
	h.Next() // the directive's name again
	p, err := tcfg.ParseProxyArgs(h.NewFromNextSegment())
	if err != nil {
		return nil, err
	}
	at := p.Engine
	if p.Turnstile != "" {
		at = p.TurnstileTok
	}
	s, err := tcfg.OptionTurnstile(h.WithDispenser(tcfg.DispenserAt(at)), p.Turnstile)
	if err != nil {
		return nil, err
	}
	rp, err := p.ReverseProxy(h, s)
	if err != nil {
		return nil, err
	}
	guard := &Handler{Turnstile: p.Turnstile, Engine: p.Engine.Text, EngineRoutes: true, WaitNotice: p.WaitNotice}
	r := caddyhttp.Route{HandlersRaw: []json.RawMessage{
		caddyconfig.JSONModuleObject(guard, "handler", "gpu_turnstile", nil),
		caddyconfig.JSONModuleObject(rp, "handler", "reverse_proxy", nil),
	}}
	if matcher != nil {
		r.MatcherSetsRaw = []caddy.ModuleMap{matcher}
	}
	return []httpcaddyfile.ConfigValue{{Class: "route", Value: r}}, nil
}
