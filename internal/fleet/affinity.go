package fleet

import (
	"cmp"
	"maps"
	"slices"
	"sync/atomic"
	"time"
)

// Affinity remembers which host each image client (by its client_id) was
// sent to, so that its later requests (its websocket, uploads, history,
// views, next jobs) go there too. Lookups read an immutable map without
// waiting; Keep hands the change to one writer, which copies the map:
// clients are few, and new ones rare next to the requests that read.
type Affinity struct {
	m      atomic.Pointer[map[string]affinity]
	writes chan keep
	done   chan struct{}
}

type affinity struct {
	pin     string
	expires int64 // Unix nanoseconds
}

type keep struct {
	client string
	a      affinity
}

// NewAffinity starts an empty Affinity; Destruct stops its writer.
func NewAffinity() *Affinity {
	a := &Affinity{writes: make(chan keep, 256), done: make(chan struct{})}
	empty := map[string]affinity{}
	a.m.Store(&empty)
	go a.write()
	return a
}

// Lookup is the pin of the host client was kept on, "" if none or if its
// affinity has expired.
func (a *Affinity) Lookup(client string, now time.Time) string {
	if client == "" {
		return ""
	}
	e, ok := (*a.m.Load())[client]
	if !ok || now.UnixNano() > e.expires {
		return ""
	}
	return e.pin
}

// Expires is when client's affinity ends; the zero time if it has none.
func (a *Affinity) Expires(client string) time.Time {
	e, ok := (*a.m.Load())[client]
	if !ok {
		return time.Time{}
	}
	return time.Unix(0, e.expires)
}

// Keep keeps client on the host of pin until ttl from now. It does not
// wait: under a burst of new clients the writer may drop some, whose
// next request is then placed afresh.
func (a *Affinity) Keep(client, pin string, now time.Time, ttl time.Duration) {
	if client == "" {
		return
	}
	select {
	case a.writes <- keep{client, affinity{pin, now.Add(ttl).UnixNano()}}:
	default:
	}
}

// Destruct stops the writer.
func (a *Affinity) Destruct() error {
	close(a.done)
	return nil
}

// write applies the kept affinities, a batch at a time, dropping the
// expired ones as it copies.
func (a *Affinity) write() {
	for {
		var k keep
		select {
		case <-a.done:
			return
		case k = <-a.writes:
		}
		now := time.Now().UnixNano()
		next := make(map[string]affinity, len(*a.m.Load())+1)
		for c, e := range maps.All(*a.m.Load()) {
			if e.expires >= now {
				next[c] = e
			}
		}
		next[k.client] = k.a
		for more := true; more; {
			select {
			case k = <-a.writes:
				next[k.client] = k.a
			default:
				more = false
			}
		}
		capAffinities(next, maxAffinities)
		a.m.Store(&next)
	}
}

// maxAffinities bounds the clients remembered: client ids come from
// requests, and each new one copies the map.
const maxAffinities = 4096

// capAffinities drops from m the affinities that end soonest until it
// holds at most limit.
func capAffinities(m map[string]affinity, limit int) {
	if len(m) <= limit {
		return
	}
	clients := slices.SortedFunc(maps.Keys(m), func(x, y string) int { return cmp.Compare(m[x].expires, m[y].expires) })
	for _, c := range clients[:len(clients)-limit] {
		delete(m, c)
	}
}
