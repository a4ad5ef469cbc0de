package presence

import (
	"context"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shirou/gopsutil/v4/process"
)

// answerTimeout bounds the connection that asks whether an engine with no
// visible listener answers at all.
const answerTimeout = time.Second

// portProxies are the processes that listen on a host port for a
// container's or a VM's service: an engine behind one runs where its GPU
// processes cannot be related to its port.
var portProxies = []string{"docker-proxy", "rootlessport", "rootlesskit", "slirp4netns", "pasta", "pasta.avx2", "gvproxy", "wslrelay"}

// engineAddr is one engine's URL and the host:port it is reached at.
type engineAddr struct {
	url  string
	host string // host:port, for a connection
	port int
}

func engineAddrs(urls []string) []engineAddr {
	var out []engineAddr
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" {
			continue
		}
		p := u.Port()
		if p == "" {
			p = map[bool]string{true: "443", false: "80"}[u.Scheme == "https"]
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			continue
		}
		out = append(out, engineAddr{url: raw, host: net.JoinHostPort(u.Hostname(), p), port: n})
	}
	return out
}

// enginesHere is what gpu_process and gpu_busy know of the engines'
// processes: like [EngineProcesses], except that an engine whose
// processes cannot be known is an *OffError, not an absence. That is an
// engine that answers at its URL while nothing this machine can see
// listens on its port (it runs in a container without a port proxy, in
// a VM or on another machine), one published by a container's port
// proxy (docker-proxy, rootlessport...), and one whose listener is
// another user's process. Its GPU processes would otherwise look like a
// person's, and every render would hold the GPU.
func enginesHere(urls []string) func(ctx context.Context) (map[int32]bool, error) {
	addrs := engineAddrs(urls)
	ports := enginePorts(urls)
	return func(ctx context.Context) (map[int32]bool, error) {
		listeners, err := listening(ctx, ports)
		if err != nil {
			return nil, err
		}
		own := map[int32]bool{}
		for _, a := range addrs {
			if err := ownListeners(ctx, a, listeners[a.port], own); err != nil {
				return nil, err
			}
		}
		return withDescendants(ctx, own)
	}
}

// ownListeners adds the processes listening for engine a to own, or says
// why the engine's processes cannot be known.
func ownListeners(ctx context.Context, a engineAddr, pids []int32, own map[int32]bool) error {
	if len(pids) == 0 {
		if answers(ctx, a.host) {
			return offf("the engine at %s answers, but no process on this machine listens on port %d: it runs in a container, a VM or on another machine, and its GPU processes cannot be told from a person's", a.url, a.port)
		}
		return nil // down: it owns nothing
	}
	for _, pid := range pids {
		if pid <= 0 {
			return offf("the engine at %s listens through a process this one may not see (another user's, or a container's port proxy): run Caddy as that user or as root to tell its GPU processes from a person's", a.url)
		}
		if name := processName(ctx, pid); isPortProxy(name) {
			return offf("the engine at %s is published by %s (pid %d): it runs in a container, and its GPU processes cannot be told from a person's", a.url, name, pid)
		}
		own[pid] = true
	}
	return nil
}

// answers reports whether a TCP connection to host:port succeeds.
func answers(ctx context.Context, hostport string) bool {
	ctx, cancel := context.WithTimeout(ctx, answerTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", hostport)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func processName(ctx context.Context, pid int32) string {
	p, err := process.NewProcessWithContext(ctx, pid)
	if err != nil {
		return ""
	}
	name, _ := p.NameWithContext(ctx)
	return name
}

func isPortProxy(name string) bool {
	return slices.Contains(portProxies, strings.TrimSuffix(strings.ToLower(name), ".exe"))
}
