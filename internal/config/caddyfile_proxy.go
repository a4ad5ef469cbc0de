package config

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// ProxyArgs are what gpu_turnstile_proxy says for itself; the rest of its
// block is reverse_proxy's.
type ProxyArgs struct {
	Engine       caddyfile.Token // ENGINE
	Turnstile    string
	TurnstileTok caddyfile.Token // the turnstile option, if given
	WaitNotice   string          // wait_notice, as the handler's field takes it
	noticeTok    caddyfile.Token // the wait_notice option, if given
	flush        bool            // the block sets flush_interval
	// proxy are the tokens of a reverse_proxy directive: the directive's
	// name, ENGINE (where the upstream goes), and the block without the
	// turnstile option.
	proxy []caddyfile.Token
}

// ParseProxyArgs reads the directive's own parts from its segment (the
// matcher taken out) and keeps the rest for reverse_proxy.
func ParseProxyArgs(d *caddyfile.Dispenser) (ProxyArgs, error) {
	var p ProxyArgs
	d.Next() // the directive's name
	name := d.Token()
	if !d.NextArg() {
		return p, d.Err("gpu_turnstile_proxy: want `gpu_turnstile_proxy [<matcher>] ENGINE [{ ... }]`, ENGINE an engine's name in the global gpu_turnstile options")
	}
	p.Engine = d.Token()
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
			if p.TurnstileTok.Text != "" {
				return p, ErrAt(seg[0], "turnstile: given twice, on lines %d and %d", p.TurnstileTok.Line, seg[0].Line)
			}
			if len(seg) != 2 {
				return p, ErrAt(seg[0], "turnstile: want `turnstile NAME`")
			}
			p.TurnstileTok, p.Turnstile = seg[0], seg[1].Text
		case "wait_notice":
			if p.noticeTok.Text != "" {
				return p, ErrAt(seg[0], "wait_notice: given twice, on lines %d and %d", p.noticeTok.Line, seg[0].Line)
			}
			sd := caddyfile.NewDispenser(seg)
			sd.Next()
			if err := parseWaitNotice(sd, &p.WaitNotice); err != nil {
				return p, err
			}
			p.noticeTok = seg[0]
		case "to", "dynamic":
			return p, ErrAt(seg[0], "gpu_turnstile_proxy: %s is not allowed: the upstream is the engine's URL from the global gpu_turnstile options (for another upstream, use gpu_turnstile and reverse_proxy)", seg.Directive())
		case "flush_interval":
			p.flush = true
			kept = append(kept, seg...)
		default:
			kept = append(kept, seg...)
		}
	}
	p.proxy = []caddyfile.Token{name, p.Engine}
	if len(kept) > 0 {
		close := d.Token() // the block's closing brace, where NextBlock ends
		p.proxy = append(append(append(p.proxy, open), kept...), close)
	}
	return p, nil
}

// ReverseProxy is the reverse_proxy to the engine, from the turnstile's
// settings s: the engine's URL as the upstream (an https URL turns the
// transport's TLS on, as reverse_proxy does for one), then the block's
// subdirectives, read by reverse_proxy itself. The engine's `header`s
// (its API key) are the turnstile's own and are not added: the block's
// header_up gives them to the proxied requests where needed.
func (p ProxyArgs) ReverseProxy(h httpcaddyfile.Helper, s *Settings) (*reverseproxy.Handler, error) {
	name := p.Turnstile
	if name == "" {
		name = DefaultName
	}
	es, opt, class, ok := s.EngineNamed(p.Engine.Text)
	if !ok {
		return nil, ErrAt(p.Engine, "gpu_turnstile_proxy: turnstile %q has no engine named %q (engines: %s)", name, p.Engine.Text, s.EngineNameList())
	}
	upstream, err := route.Upstream(es.URL)
	if err != nil {
		return nil, ErrAt(p.Engine, "gpu_turnstile_proxy %s: the engine's URL (%s %s) %v: give it as scheme://host:port, or use gpu_turnstile and reverse_proxy", p.Engine.Text, opt, gpu.RedactURL(es.URL), err)
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
	if class == LLM && !p.flush {
		rp.FlushInterval = -1 // LLM answers stream token by token
	}
	return rp, nil
}

// DispenserAt is a dispenser on tok, for errors that name its line.
func DispenserAt(tok caddyfile.Token) *caddyfile.Dispenser {
	d := caddyfile.NewDispenser([]caddyfile.Token{tok})
	d.Next()
	return d
}

// ErrAt is an error at tok's line.
func ErrAt(tok caddyfile.Token, format string, args ...any) error {
	return DispenserAt(tok).Errf(format, args...)
}
