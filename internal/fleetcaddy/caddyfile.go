package fleetcaddy

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/fleet"
)

func init() {
	httpcaddyfile.RegisterDirective("gpu_turnstile_fleet", parseFleetDirective)
	// Where reverse_proxy is, like php_fastcgi and gpu_turnstile_proxy:
	// it ends the route, after handle and route.
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile_fleet", httpcaddyfile.After, "reverse_proxy")
}

// fleetRetryMatch retries a request on another host when one answers it
// busy (429) or unavailable (503): the host did not take it.
const fleetRetryMatch = `"{http.reverse_proxy.status_code} in [429, 503]"`

// fleetRetryBroken retries an LLM request whose connection broke before
// any answer (a host that stops drops the connections still waiting to be
// accepted): at worst the host began to generate an answer nobody reads.
// An image job is not retried so, for it would then run twice.
const fleetRetryBroken = `"{http.reverse_proxy.is_transport_error} == true && {http.vars.gpu_turnstile.class} == 'llm'"`

// fleetRetries is how many other hosts a request refused by one is
// tried on.
const fleetRetries = 2

// parseFleetDirective parses
//
//	gpu_turnstile_fleet [<matcher>] HOST... {
//		status_path PATH
//		fallback    POLICY
//		stale       DURATION
//		keep_for_chats DURATION
//		<reverse_proxy subdirectives>
//	}
//
// into one route: gpu_turnstile_classify, then Caddy's reverse_proxy to
// the hosts with lb_policy gpu_turnstile, lb_retries 2, lb_retry_match on
// 429 and 503 answers, request_buffers as large as the bodies classified
// (4 MiB; the block's request_buffers sets both) and flush_interval -1,
// each unless the block sets it.
func parseFleetDirective(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	if !h.Next() {
		return nil, h.ArgErr()
	}
	matcher, err := h.ExtractMatcherSet()
	if err != nil {
		return nil, err
	}
	h.Next() // the directive's name again
	d := h.NewFromNextSegment()
	d.Next()
	name := d.Token()
	hosts := d.RemainingArgs()
	if len(hosts) == 0 {
		return nil, d.Err("gpu_turnstile_fleet: want `gpu_turnstile_fleet HOST... [{ ... }]`, at least one host")
	}
	policy := new(FleetSelection)
	proxy := []caddyfile.Token{name}
	for _, host := range hosts {
		proxy = append(proxy, caddyfile.Token{File: name.File, Line: name.Line, Text: host})
	}
	block, given, err := splitFleetBlock(d, policy)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(given, "transport") {
		block = append(block, noKeepAlive(name, block)...)
	}
	if len(block) > 0 {
		open := caddyfile.Token{File: name.File, Line: name.Line, Text: "{"}
		close := caddyfile.Token{File: name.File, Line: block[len(block)-1].Line + 1, Text: "}"}
		proxy = append(append(append(proxy, open), block...), close)
	}
	rp := new(reverseproxy.Handler)
	if err := rp.UnmarshalCaddyfile(caddyfile.NewDispenser(proxy)); err != nil {
		return nil, err
	}
	if err := rp.FinalizeUnmarshalCaddyfile(h); err != nil {
		return nil, err
	}
	classify := fleetDefaults(rp, policy, given)
	r := caddyhttp.Route{HandlersRaw: []json.RawMessage{
		caddyconfig.JSONModuleObject(classify, "handler", "gpu_turnstile_classify", nil),
		caddyconfig.JSONModuleObject(rp, "handler", "reverse_proxy", nil),
	}}
	if matcher != nil {
		r.MatcherSetsRaw = []caddy.ModuleMap{matcher}
	}
	return []httpcaddyfile.ConfigValue{{Class: "route", Value: r}}, nil
}

// splitFleetBlock reads the directive's block: the policy's own options
// into policy, the rest (given, by subdirective) as reverse_proxy's.
func splitFleetBlock(d *caddyfile.Dispenser, policy *FleetSelection) (block []caddyfile.Token, given []string, err error) {
	for d.NextBlock(0) {
		seg := d.NextSegment()
		switch dir := seg.Directive(); dir {
		case "status_path", "stale", "fallback", "keep_for_chats":
			sd := caddyfile.NewDispenser(seg)
			sd.Next()
			if err := policy.unmarshalOption(sd); err != nil {
				return nil, nil, err
			}
		case "lb_policy", "to", "dynamic":
			return nil, nil, d.Errf("gpu_turnstile_fleet: %s is not allowed: the hosts are the directive's, and they are chosen by lb_policy gpu_turnstile", dir)
		default:
			given = append(given, dir)
			block = append(block, seg...)
		}
	}
	return block, given, nil
}

// fleetDefaults completes the fleet's reverse_proxy rp (given: the
// subdirectives its block set) with the policy and what a front tier
// needs, and returns the classify handler that goes before it.
func fleetDefaults(rp *reverseproxy.Handler, policy *FleetSelection, given []string) *ClassifyHandler {
	if rp.LoadBalancing == nil {
		rp.LoadBalancing = new(reverseproxy.LoadBalancing)
	}
	lb := rp.LoadBalancing
	if !slices.Contains(given, "lb_retries") {
		lb.Retries = fleetRetries
	}
	if !slices.Contains(given, "lb_retry_match") {
		// The transport errors' set first: the status's errors out where
		// there is no status, which would end the matching.
		lb.RetryMatchRaw = caddyhttp.RawMatcherSets{
			{"expression": json.RawMessage(fleetRetryBroken)},
			{"expression": json.RawMessage(fleetRetryMatch)},
		}
	}
	classify := new(ClassifyHandler)
	if rp.RequestBuffers > 0 {
		classify.BodyLimit = rp.RequestBuffers
	} else if rp.RequestBuffers == 0 {
		rp.RequestBuffers = fleet.DefaultBodyLimit
	}
	if !slices.Contains(given, "flush_interval") {
		rp.FlushInterval = -1 // LLM answers stream token by token
	}
	policy.StatusTLS = transportTLS(rp.TransportRaw)
	policy.StatusHeaders = statusHeaders(rp)
	lb.SelectionPolicyRaw = caddyconfig.JSONModuleObject(policy, "policy", "gpu_turnstile", nil)
	return classify
}

// statusHeaders are the headers of the hosts' status streams: the
// block's header_up fields whose values name nothing of a request (a
// credential the hosts ask for, say), then its active health check's
// health_headers, which win; nil if none.
func statusHeaders(rp *reverseproxy.Handler) http.Header {
	h := http.Header{}
	if rp.Headers != nil && rp.Headers.Request != nil {
		ops := rp.Headers.Request
		for _, set := range []bool{false, true} {
			fields := ops.Add
			if set {
				fields = ops.Set
			}
			for k, vs := range fields {
				k = http.CanonicalHeaderKey(k)
				if k == "Host" || slices.ContainsFunc(vs, func(v string) bool { return strings.Contains(v, "{http.") }) {
					continue
				}
				if set {
					h[k] = nil
				}
				h[k] = append(h[k], vs...)
			}
		}
	}
	if hc := rp.HealthChecks; hc != nil && hc.Active != nil {
		for k, vs := range hc.Active.Headers {
			h[http.CanonicalHeaderKey(k)] = vs
		}
	}
	if len(h) == 0 {
		return nil
	}
	return h
}

// noKeepAlive are the tokens of `transport http { keepalive off }`, on
// the lines after the block's: each request to a host opens its own
// connection, so that a host that stops refuses the connection (which
// reverse_proxy retries on another host, as the host took nothing)
// rather than closing an idle one as a POST is written to it (which it
// may not retry).
func noKeepAlive(name caddyfile.Token, block []caddyfile.Token) []caddyfile.Token {
	line := name.Line
	if len(block) > 0 {
		line = block[len(block)-1].Line
	}
	tok := func(n int, text string) caddyfile.Token {
		return caddyfile.Token{File: name.File, Line: line + n, Text: text}
	}
	return []caddyfile.Token{tok(1, "transport"), tok(1, "http"), tok(1, "{"), tok(2, "keepalive"), tok(2, "off"), tok(3, "}")}
}

// transportTLS reports whether the reverse_proxy's transport (raw JSON)
// speaks TLS to the hosts: their status streams then do too.
func transportTLS(raw json.RawMessage) bool {
	var t struct {
		TLS json.RawMessage `json:"tls"`
	}
	return raw != nil && json.Unmarshal(raw, &t) == nil && t.TLS != nil
}
