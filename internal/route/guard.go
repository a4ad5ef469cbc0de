package route

import (
	"fmt"
	"sync"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/netaddr"
)

// MaxWarnings bounds how many misrouted upstreams a Guard names.
const MaxWarnings = 16

// maxSeen bounds how many distinct misrouted upstreams a Guard remembers,
// so that each is logged once: dynamic upstreams could make any number.
const maxSeen = 1024

// Guard knows one turnstile's engines, as one config defines them, and
// remembers the upstreams seen that are none of them. A config that loads
// gets a new Guard: what an old config got wrong is not carried over.
type Guard struct {
	engines []netaddr.Addr
	// exact are the engines' addresses as reverse_proxy spells them when
	// given the engine's URL: the common case needs no parsing.
	exact map[string]bool

	mu        sync.Mutex
	seen      map[string]bool
	misrouted []string // the first MaxWarnings misrouted upstreams, as seen
}

// NewGuard makes the Guard of engines given by their URLs.
func NewGuard(engineURLs []string) (*Guard, error) {
	g := &Guard{exact: map[string]bool{}, seen: map[string]bool{}}
	for _, u := range engineURLs {
		a, err := netaddr.EngineAddr(u)
		if err != nil {
			return nil, err
		}
		g.engines = append(g.engines, a)
		hp, _ := netaddr.HostPort(u) // parsed above
		g.exact[hp] = true
	}
	return g, nil
}

// Check reports whether hostport, where reverse_proxy sent a request, is
// none of the engines; and if so, whether it is the first time this Guard
// sees it (to be logged then, and only then).
func (g *Guard) Check(hostport string) (misrouted, first bool) {
	if g.exact[hostport] || g.isEngine(netaddr.UpstreamAddr(hostport)) {
		return false, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.seen[hostport] || len(g.seen) >= maxSeen {
		return true, false
	}
	g.seen[hostport] = true
	if len(g.misrouted) < MaxWarnings {
		g.misrouted = append(g.misrouted, hostport)
	}
	return true, true
}

func (g *Guard) isEngine(a netaddr.Addr) bool {
	for _, e := range g.engines {
		if e == a {
			return true
		}
	}
	return false
}

// Warnings name the misrouted upstreams seen, at most MaxWarnings, in the
// order they were first seen; nil if none (or g is nil).
func (g *Guard) Warnings() []string {
	return g.warnings(func(hostport string) string { return hostport })
}

// PublicWarnings are Warnings without the upstreams' addresses, for a
// status that strangers read: an address inside the network is the
// operator's to know.
func (g *Guard) PublicWarnings() []string {
	return g.warnings(func(string) string { return "an upstream" })
}

// warnings words one warning per misrouted upstream, naming it as name
// says; nil if none (or g is nil).
func (g *Guard) warnings(name func(hostport string) string) []string {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.misrouted) == 0 {
		return nil
	}
	out := make([]string, len(g.misrouted))
	for i, hp := range g.misrouted {
		out[i] = fmt.Sprintf("guarded requests were proxied to %s, which is none of this turnstile's engines: "+
			"the GPU may be shared unseen; send them to an engine's URL (gpu_turnstile_proxy does)", name(hp))
	}
	return out
}
