package gpu

import (
	"context"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
)

// listenerRecheck is how long who listens on an engine's ports is taken
// as known while those listeners live.
const listenerRecheck = 5 * time.Second

// listenerCache keeps who listened on an engine's ports at the last look.
// Reading the host's sockets walks every process's descriptors, by far the
// dearest part of a look, so it is read again only when a port's listener
// is no longer alive, a port is new or nobody listened on it, or
// listenerRecheck has passed. Its users hold GPU.lookMu.
type listenerCache struct {
	pids map[int][]int32
	at   time.Time
}

// listeners is procs.Listeners for ports, from the cache when it holds.
func (lc *listenerCache) listeners(ctx context.Context, t *procs.Table, ports []int, now time.Time) (map[int][]int32, error) {
	if lc.holds(t, ports, now) {
		return lc.pids, nil
	}
	ls, err := procs.Listeners(ctx, ports)
	if err != nil {
		return nil, err
	}
	lc.pids, lc.at = ls, now
	return ls, nil
}

// holds reports whether every port had a listener that t shows alive, at
// a reading younger than listenerRecheck.
func (lc *listenerCache) holds(t *procs.Table, ports []int, now time.Time) bool {
	if lc.pids == nil || now.Sub(lc.at) >= listenerRecheck {
		return false
	}
	for _, port := range ports {
		pids := lc.pids[port]
		if len(pids) == 0 {
			return false
		}
		for _, pid := range pids {
			if _, alive := t.Get(pid); pid <= 0 || !alive {
				return false
			}
		}
	}
	return true
}

// listenerCacheOf is e's cache; g.lookMu is held.
func (g *GPU) listenerCacheOf(name string) *listenerCache {
	if g.listenCache == nil {
		g.listenCache = map[string]*listenerCache{}
	}
	lc := g.listenCache[name]
	if lc == nil {
		lc = &listenerCache{}
		g.listenCache[name] = lc
	}
	return lc
}
