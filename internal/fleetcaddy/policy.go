package fleetcaddy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/fleet"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

func init() {
	caddy.RegisterModule(new(FleetSelection))
}

// Defaults of the gpu_turnstile selection policy.
const (
	defaultStatusPath = "/healthz"
	defaultStale      = 30 * time.Second // three of the stream's keep-alives
	defaultAffinity   = time.Hour
	defaultKeep       = 30 * time.Second
	// keepAlive is how often a host's status stream says something
	// when nothing changes.
	keepAlive = 10 * time.Second
)

// fleetPool holds what the policies of every config share, so that a
// reload neither reconnects the hosts' streams nor forgets the clients'
// hosts: the followers (keyed by their status URL) and the affinity.
var fleetPool = caddy.NewUsagePool()

// affinityKey is the Affinity's key in fleetPool.
const affinityKey = "affinity"

// FleetSelection is the gpu_turnstile selection policy: it sends each
// request to the GPU host best placed for it now, from what
// gpu_turnstile_classify found in the request and what each upstream's
// status event stream last said (internal/fleet.Pick). Select reads only
// snapshots and the request variables.
type FleetSelection struct {
	// StatusPath is the path of each upstream's gpu_turnstile_status
	// (default /healthz).
	StatusPath string `json:"status_path,omitempty"`
	// StatusTLS asks for the status streams over HTTPS.
	StatusTLS bool `json:"status_tls,omitempty"`
	// StatusHeaders are added to the status streams' requests
	// (placeholders of the environment, such as {env.TOKEN}, are
	// replaced). gpu_turnstile_fleet sets them from the block's
	// header_up fields that name nothing of a request, and its
	// health_headers.
	StatusHeaders http.Header `json:"status_headers,omitempty"`
	// Stale is how long an upstream's state counts once its stream has
	// gone silent (default 30s).
	Stale caddy.Duration `json:"stale,omitempty"`
	// Affinity is how long an image client stays on its host after its
	// last placement (default 1h).
	Affinity caddy.Duration `json:"affinity,omitempty"`
	// KeepForChats is how much later an image job would rather start
	// behind another host's render than take a host that the chats
	// need: one free for chats whose models would not fit on the others
	// (default 30s).
	KeepForChats caddy.Duration `json:"keep_for_chats,omitempty"`
	// FallbackRaw chooses when no upstream's state is known (default
	// random).
	FallbackRaw json.RawMessage `json:"fallback,omitempty" caddy:"namespace=http.reverse_proxy.selection_policies inline_key=policy"`

	fallback  reverseproxy.Selector
	affinity  *fleet.Affinity
	client    *http.Client
	followers sync.Map // *reverseproxy.Upstream → *fleet.Follower
	picks     sync.Map // *reverseproxy.Upstream → *upstreamPicks

	mu     sync.Mutex
	keys   []string // fleetPool keys held
	closed bool
}

// CaddyModule returns the Caddy module information.
func (*FleetSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.gpu_turnstile",
		New: func() caddy.Module { return new(FleetSelection) },
	}
}

// Provision sets the defaults and loads the fallback policy.
func (s *FleetSelection) Provision(ctx caddy.Context) error {
	if s.StatusPath == "" {
		s.StatusPath = defaultStatusPath
	}
	if !strings.HasPrefix(s.StatusPath, "/") {
		return fmt.Errorf("status_path %q: want a path starting with /", s.StatusPath)
	}
	for _, d := range []struct {
		name string
		v    *caddy.Duration
		def  time.Duration
	}{{"stale", &s.Stale, defaultStale}, {"affinity", &s.Affinity, defaultAffinity}, {"keep_for_chats", &s.KeepForChats, defaultKeep}} {
		if *d.v < 0 {
			return fmt.Errorf("%s %v: want a positive duration (or none, for %v)", d.name, time.Duration(*d.v), d.def)
		}
		if *d.v == 0 {
			*d.v = caddy.Duration(d.def)
		}
	}
	// The status streams' headers may name the environment ({env.*}),
	// never a request.
	repl := caddy.NewReplacer()
	for _, vs := range s.StatusHeaders {
		for i, v := range vs {
			vs[i] = repl.ReplaceKnown(v, "")
		}
	}
	if time.Duration(s.Stale) <= 2*keepAlive {
		ctx.Logger().Warn("stale is not longer than two of the hosts' status keep-alives: a host with nothing new to say may count as unknown between them",
			zap.Duration("stale", time.Duration(s.Stale)), zap.Duration("keep_alive", keepAlive))
	}
	if s.FallbackRaw == nil {
		s.FallbackRaw = caddyconfig.JSONModuleObject(reverseproxy.RandomSelection{}, "policy", "random", nil)
	}
	mod, err := ctx.LoadModule(s, "FallbackRaw")
	if err != nil {
		return fmt.Errorf("loading fallback selection policy: %v", err)
	}
	s.fallback = mod.(reverseproxy.Selector)
	if err := registerPicks(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("registering gpu_turnstile_fleet_picks_total: %v", err)
	}
	// A stream lives as long as its follower; only its connection is
	// bounded.
	s.client = &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		ResponseHeaderTimeout: 10 * time.Second,
		IdleConnTimeout:       time.Minute,
	}}
	a, _, err := fleetPool.LoadOrNew(affinityKey, func() (caddy.Destructor, error) { return fleet.NewAffinity(), nil })
	if err != nil {
		return err
	}
	s.affinity = a.(*fleet.Affinity)
	s.keys = append(s.keys, affinityKey)
	return nil
}

// Cleanup lets go of the followers and the affinity: the pool stops them
// once no config uses them.
func (s *FleetSelection) Cleanup() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, k := range s.keys {
		fleetPool.Delete(k)
	}
	s.keys = nil
	return nil
}

// Select picks the upstream for r: see internal/fleet.Pick. It records
// the pick among the request's tries, and for an image client its host
// (a cookie on the answer; its client_id kept in the affinity).
func (s *FleetSelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, w http.ResponseWriter) *reverseproxy.Upstream {
	q, _ := caddyhttp.GetVar(r.Context(), varRequest).(*fleet.Request)
	if q == nil {
		return s.fallback.Select(pool, r, w)
	}
	now := time.Now()
	var buf [64]fleet.Candidate
	cs := buf[:min(len(pool), len(buf))]
	stale := time.Duration(s.Stale)
	for i := range cs {
		u := pool[i]
		f := s.follower(u)
		cs[i] = fleet.Candidate{Up: u.Available(), Requests: u.NumRequests()}
		if f != nil {
			cs[i].Host, cs[i].Pin, cs[i].Capacity = f.Snapshot(now, stale), f.Pin(), f.Capacity()
			// What the status lists needs no look at what was sent.
			if h := cs[i].Host; h != nil && q.Class == route.LLM && q.Model != "" && !h.Loaded(q.Model) {
				cs[i].Sent = f.Sending(q.Model, now)
			}
		}
	}
	pin := s.affinity.Lookup(q.Client, now)
	if pin == "" {
		pin = q.Pin
	}
	i, why := fleet.Policy{Now: now, KeepForChats: time.Duration(s.KeepForChats)}.PickWhy(q, cs, pin)
	var u *reverseproxy.Upstream
	if i != fleet.None {
		u = pool[i]
	} else if u = s.fallback.Select(pool, r, w); u != nil {
		i = indexOf(pool, u)
		if j := untried(pool, q); i >= 0 && i < 64 && q.Tried&(1<<uint(i)) != 0 && j >= 0 {
			i, u = j, pool[j] // a retry goes elsewhere, whatever the fallback says
		}
	}
	if u == nil {
		return nil
	}
	s.picksOf(u).inc(q.Class, why)
	if i >= 0 && i < 64 {
		q.Tried |= 1 << uint(i)
	}
	if i >= 0 && i < len(cs) {
		q.SentTo(s.follower(u), now) // followed since the candidates were read
	}
	if q.Class != route.LLM && i >= 0 && i < len(cs) && cs[i].Pin != "" {
		s.keep(q, cs[i].Pin, pin, now, w)
	}
	return u
}

// keep keeps an image client on the host of pin: its client_id in the
// affinity (once per half of its life), and a browser's cookie.
func (s *FleetSelection) keep(q *fleet.Request, pin, had string, now time.Time, w http.ResponseWriter) {
	ttl := time.Duration(s.Affinity)
	if q.Client != "" && (pin != had || s.affinity.Expires(q.Client).Sub(now) < ttl/2) {
		s.affinity.Keep(q.Client, pin, now, ttl)
	}
	if q.Pin == pin {
		return
	}
	h := w.Header()
	kept := h["Set-Cookie"][:0]
	for _, c := range h["Set-Cookie"] {
		if !strings.HasPrefix(c, fleet.PinCookie+"=") {
			kept = append(kept, c)
		}
	}
	h["Set-Cookie"] = kept
	http.SetCookie(w, &http.Cookie{Name: fleet.PinCookie, Value: pin, Path: "/", MaxAge: int(ttl.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteLaxMode})
}

// picksOf is u's pick counters.
func (s *FleetSelection) picksOf(u *reverseproxy.Upstream) *upstreamPicks {
	if p, ok := s.picks.Load(u); ok {
		return p.(*upstreamPicks)
	}
	p, _ := s.picks.LoadOrStore(u, &upstreamPicks{dial: u.Dial})
	return p.(*upstreamPicks)
}

// follower is the follower of u's status stream, started on the first
// call for u; nil once the policy is cleaned up.
func (s *FleetSelection) follower(u *reverseproxy.Upstream) *fleet.Follower {
	if f, ok := s.followers.Load(u); ok {
		return f.(*fleet.Follower)
	}
	return s.startFollower(u)
}

// startFollower takes u's follower from fleetPool (starting it if no
// config has), for as long as this policy lives.
func (s *FleetSelection) startFollower(u *reverseproxy.Upstream) *fleet.Follower {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.followers.Load(u); ok {
		return f.(*fleet.Follower)
	}
	if s.closed {
		return nil
	}
	scheme := "http://"
	if s.StatusTLS {
		scheme = "https://"
	}
	url := scheme + u.Dial + s.StatusPath
	key := "follow " + url
	v, _, err := fleetPool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return fleet.NewFollower(url, s.client, s.StatusHeaders, u.Dial), nil
	})
	if err != nil {
		return nil
	}
	s.keys = append(s.keys, key)
	f := v.(*fleet.Follower)
	s.followers.Store(u, f)
	return f
}

// untried is the index of the first available upstream of pool not yet
// tried for q, -1 if none.
func untried(pool reverseproxy.UpstreamPool, q *fleet.Request) int {
	for i, u := range pool[:min(len(pool), 64)] {
		if q.Tried&(1<<uint(i)) == 0 && u.Available() {
			return i
		}
	}
	return -1
}

// indexOf is u's index in pool, -1 if not there.
func indexOf(pool reverseproxy.UpstreamPool, u *reverseproxy.Upstream) int {
	for i, p := range pool {
		if p == u {
			return i
		}
	}
	return -1
}

// UnmarshalCaddyfile reads
//
//	lb_policy gpu_turnstile {
//		status_path PATH
//		fallback    POLICY
//		stale       DURATION
//		keep_for_chats DURATION
//	}
func (s *FleetSelection) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the policy's name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		if err := s.unmarshalOption(d); err != nil {
			return err
		}
	}
	return nil
}

// unmarshalOption reads one of the policy's options at d.
func (s *FleetSelection) unmarshalOption(d *caddyfile.Dispenser) error {
	opt := d.Val()
	if !d.NextArg() {
		return d.ArgErr()
	}
	switch opt {
	case "status_path":
		s.StatusPath = d.Val()
	case "stale", "keep_for_chats":
		dur, err := caddy.ParseDuration(d.Val())
		if err != nil || dur <= 0 {
			return d.Errf("%s %q: want a duration such as 30s", opt, d.Val())
		}
		if opt == "stale" {
			s.Stale = caddy.Duration(dur)
		} else {
			s.KeepForChats = caddy.Duration(dur)
		}
	case "fallback":
		if s.FallbackRaw != nil {
			return d.Err("fallback selection policy already specified")
		}
		name := d.Val()
		unm, err := caddyfile.UnmarshalModule(d, "http.reverse_proxy.selection_policies."+name)
		if err != nil {
			return err
		}
		sel, ok := unm.(reverseproxy.Selector)
		if !ok {
			return d.Errf("fallback %s is not a selection policy", name)
		}
		s.FallbackRaw = caddyconfig.JSONModuleObject(sel, "policy", name, nil)
		return nil
	default:
		return d.Errf("lb_policy gpu_turnstile: unknown option %q (want status_path, fallback, stale or keep_for_chats)", opt)
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

var (
	_ reverseproxy.Selector = (*FleetSelection)(nil)
	_ caddy.Provisioner     = (*FleetSelection)(nil)
	_ caddy.CleanerUpper    = (*FleetSelection)(nil)
	_ caddyfile.Unmarshaler = (*FleetSelection)(nil)
)

// Knows reports whether a front in this process follows the host whose
// status stream is at statusURL ("http://HOST:PORT/healthz") and knows
// its state now: what a front's first picks wait for in tests.
func Knows(statusURL string) bool {
	known := false
	fleetPool.Range(func(k, v any) bool {
		if k == "follow "+statusURL {
			known = v.(*fleet.Follower).Snapshot(time.Now(), 30*time.Second) != nil
			return false
		}
		return true
	})
	return known
}
