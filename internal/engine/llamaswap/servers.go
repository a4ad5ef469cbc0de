package llamaswap

import (
	"context"
	"net"
	"net/url"
	"strconv"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
)

// servers finds a llama-swap's model servers: each process /running lists
// forwards to a proxy URL, whose port on this host is the server's
// listener. They run in their own process groups, and a llama-swap that
// dies leaves them running, so they are followed by themselves, not only
// as its descendants.
func servers(ctx context.Context, e engine.LLM, _ bool) (engine.ModelServers, error) {
	procs, err := e.(*Engine).c.Running(ctx)
	if err != nil {
		return engine.ModelServers{}, err
	}
	out := engine.ModelServers{Listed: true, Models: make([]string, 0, len(procs))}
	for _, p := range procs {
		out.Models = append(out.Models, p.Model)
		if port, ok := localPort(p.Proxy); ok {
			out.Ports = append(out.Ports, port)
		}
	}
	return out, nil
}

// localPort is the port of a proxy URL on this host.
func localPort(proxy string) (int, bool) {
	u, err := url.Parse(proxy)
	if err != nil {
		return 0, false
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, false
	}
	port, err := strconv.Atoi(u.Port())
	return port, err == nil && port > 0
}
