package turnstile

import (
	"encoding/json"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
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

// proxyArgs are what gpu_turnstile_proxy says for itself; the rest of its
// block is reverse_proxy's.
type proxyArgs struct {
	engine       caddyfile.Token // ENGINE
	turnstile    string
	turnstileTok caddyfile.Token // the turnstile option, if given
	flush        bool            // the block sets flush_interval
	// proxy are the tokens of a reverse_proxy directive: the directive's
	// name, ENGINE (where the upstream goes), and the block without the
	// turnstile option.
	proxy []caddyfile.Token
}

// parseProxyDirective parses
//
//	gpu_turnstile_proxy [<matcher>] ENGINE {
//		turnstile NAME
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
	p, err := parseProxyArgs(h.NewFromNextSegment())
	if err != nil {
		return nil, err
	}
	at := p.engine
	if p.turnstile != "" {
		at = p.turnstileTok
	}
	s, err := checkTurnstileName(h.WithDispenser(dispenserAt(at)), p.turnstile)
	if err != nil {
		return nil, err
	}
	rp, err := p.reverseProxy(h, s)
	if err != nil {
		return nil, err
	}
	guard := &Handler{Turnstile: p.turnstile, Engine: p.engine.Text, EngineRoutes: true}
	r := caddyhttp.Route{HandlersRaw: []json.RawMessage{
		caddyconfig.JSONModuleObject(guard, "handler", "gpu_turnstile", nil),
		caddyconfig.JSONModuleObject(rp, "handler", "reverse_proxy", nil),
	}}
	if matcher != nil {
		r.MatcherSetsRaw = []caddy.ModuleMap{matcher}
	}
	return []httpcaddyfile.ConfigValue{{Class: "route", Value: r}}, nil
}

// parseProxyArgs reads the directive's own parts from its segment (the
// matcher taken out) and keeps the rest for reverse_proxy.
func parseProxyArgs(d *caddyfile.Dispenser) (proxyArgs, error) {
	var p proxyArgs
	d.Next() // the directive's name
	name := d.Token()
	if !d.NextArg() {
		return p, d.Err("gpu_turnstile_proxy: want `gpu_turnstile_proxy [<matcher>] ENGINE [{ ... }]`, ENGINE an engine's name in the global gpu_turnstile options")
	}
	p.engine = d.Token()
	if d.NextArg() {
		return p, d.Errf("gpu_turnstile_proxy: one engine expected, got %q too", d.Val())
	}
	var open caddyfile.Token
	var kept []caddyfile.Token
	for d.NextBlock(0) {
		if open.Text == "" {
			d.Prev() // the block's opening brace, kept for reverse_proxy
			open = d.Token()
			d.Next()
		}
		seg := d.NextSegment()
		switch seg.Directive() {
		case "turnstile":
			if p.turnstileTok.Text != "" {
				return p, errAt(seg[0], "turnstile: given twice, on lines %d and %d", p.turnstileTok.Line, seg[0].Line)
			}
			if len(seg) != 2 {
				return p, errAt(seg[0], "turnstile: want `turnstile NAME`")
			}
			p.turnstileTok, p.turnstile = seg[0], seg[1].Text
		case "to", "dynamic":
			return p, errAt(seg[0], "gpu_turnstile_proxy: %s is not allowed: the upstream is the engine's URL from the global gpu_turnstile options (for another upstream, use gpu_turnstile and reverse_proxy)", seg.Directive())
		case "flush_interval":
			p.flush = true
			kept = append(kept, seg...)
		default:
			kept = append(kept, seg...)
		}
	}
	p.proxy = []caddyfile.Token{name, p.engine}
	if len(kept) > 0 {
		close := d.Token() // the block's closing brace, where NextBlock ends
		p.proxy = append(append(append(p.proxy, open), kept...), close)
	}
	return p, nil
}

// reverseProxy is the reverse_proxy to the engine, from the turnstile's
// settings s: the engine's URL as the upstream (an https URL turns the
// transport's TLS on, as reverse_proxy does for one), then the block's
// subdirectives, read by reverse_proxy itself.
func (p proxyArgs) reverseProxy(h httpcaddyfile.Helper, s *Settings) (*reverseproxy.Handler, error) {
	name := p.turnstile
	if name == "" {
		name = defaultName
	}
	es, opt, class, ok := s.EngineNamed(p.engine.Text)
	if !ok {
		return nil, errAt(p.engine, "gpu_turnstile_proxy: turnstile %q has no engine named %q (engines: %s)", name, p.engine.Text, s.EngineNameList())
	}
	upstream, err := route.Upstream(es.URL)
	if err != nil {
		return nil, errAt(p.engine, "gpu_turnstile_proxy %s: the engine's URL (%s %s) %v: give it as scheme://host:port, or use gpu_turnstile and reverse_proxy", p.engine.Text, opt, gpu.RedactURL(es.URL), err)
	}
	tokens := append([]caddyfile.Token(nil), p.proxy...)
	tokens[1].Text = upstream
	rp := new(reverseproxy.Handler)
	if err := rp.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens)); err != nil {
		return nil, err
	}
	if err := rp.FinalizeUnmarshalCaddyfile(h); err != nil {
		return nil, err
	}
	if class == "llm" && !p.flush {
		rp.FlushInterval = -1 // LLM answers stream token by token
	}
	return rp, nil
}

// dispenserAt is a dispenser on tok, for errors that name its line.
func dispenserAt(tok caddyfile.Token) *caddyfile.Dispenser {
	d := caddyfile.NewDispenser([]caddyfile.Token{tok})
	d.Next()
	return d
}

// errAt is an error at tok's line.
func errAt(tok caddyfile.Token, format string, args ...any) error {
	return dispenserAt(tok).Errf(format, args...)
}
