// Package gputest is the simulated GPU that the fake engines (Ollama,
// llama.cpp, llama-swap, vLLM, ComfyUI, Automatic1111) share. Each fake
// reports when it starts and stops occupying video memory; the GPU records
// a timeline and counts every instant at which two services occupied it
// together, which is the one thing the turnstile exists to prevent. LLM
// engines may share the GPU with one another (LLM requests share it):
// ShareAmong declares such a group.
package gputest

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Event is one entry of the GPU's timeline.
type Event struct {
	At      time.Time
	Service string // "ollama" or "comfy"
	What    string // e.g. "load llama3.2:latest", "unload", "job p1 start"
	Users   int    // the service's occupancy count after this event
}

func (e Event) String() string {
	return fmt.Sprintf("%s %-6s %s (%d)", e.At.Format("15:04:05.000000"), e.Service, e.What, e.Users)
}

// GPU is a simulated card shared by the fakes. The zero value is not
// usable; call New.
type GPU struct {
	mu       sync.Mutex
	users    map[string]int
	events   []Event
	overlaps []string
	unbidden []string // overlaps at the start of an OccupyUnbidden
	changed  chan struct{}
	group    map[string]int // the sharing group of a service (ShareAmong); 0: none
	groups   int
}

// ShareAmong declares services that may occupy the GPU together, as LLM
// engines do: an overlap among them is not counted. An overlap with any
// service outside the group still is.
func (g *GPU) ShareAmong(services ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.group == nil {
		g.group = map[string]int{}
	}
	g.groups++
	for _, s := range services {
		g.group[s] = g.groups
	}
}

// share reports whether a and b may occupy the GPU together; g.mu is held.
func (g *GPU) share(a, b string) bool {
	if a == b {
		return true
	}
	ga, gb := g.group[a], g.group[b]
	return ga != 0 && ga == gb
}

// New returns an empty GPU.
func New() *GPU {
	return &GPU{users: map[string]int{}, changed: make(chan struct{})}
}

// Occupy records that service starts using video memory for what (a model
// load, a job). The returned function records the end of that use; calling
// it twice is a no-op.
func (g *GPU) Occupy(service, what string) (release func(string)) {
	g.mu.Lock()
	g.users[service]++
	g.record(service, what)
	for other, n := range g.users {
		if !g.share(service, other) && n > 0 {
			g.overlaps = append(g.overlaps, fmt.Sprintf("%s %q while %s held %d", service, what, other, n))
		}
	}
	g.mu.Unlock()
	var once sync.Once
	return func(why string) {
		once.Do(func() {
			g.mu.Lock()
			g.users[service]--
			g.record(service, why)
			g.mu.Unlock()
		})
	}
}

// OccupyUnbidden is Occupy for a use that nobody asked for, which the
// service takes on its own (an engine that loads its model as it
// restarts): an overlap at its start is the service's own doing, which no
// orchestration can prevent, and is listed by Unbidden instead of
// Overlaps. An overlap with anything that starts while it lasts still
// counts.
func (g *GPU) OccupyUnbidden(service, what string) (release func(string)) {
	g.mu.Lock()
	n := len(g.overlaps)
	g.mu.Unlock()
	release = g.Occupy(service, what)
	g.mu.Lock()
	g.unbidden = append(g.unbidden, g.overlaps[n:]...)
	g.overlaps = g.overlaps[:n]
	g.mu.Unlock()
	return release
}

// Unbidden lists the overlaps that unbidden uses caused as they began.
func (g *GPU) Unbidden() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.unbidden...)
}

// Mark records an event that does not change occupancy (a request served
// from a loaded model, a job start), so tests can order events.
func (g *GPU) Mark(service, what string) {
	g.mu.Lock()
	g.record(service, what)
	g.mu.Unlock()
}

func (g *GPU) record(service, what string) {
	g.events = append(g.events, Event{At: time.Now(), Service: service, What: what, Users: g.users[service]})
	close(g.changed)
	g.changed = make(chan struct{})
}

// Users returns how many occupancies the service has now.
func (g *GPU) Users(service string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.users[service]
}

// Overlaps lists every moment two services occupied the GPU together.
func (g *GPU) Overlaps() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.overlaps...)
}

// Events returns the timeline so far.
func (g *GPU) Events() []Event {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]Event(nil), g.events...)
}

// Changed returns a channel that is closed at the next event.
func (g *GPU) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// WaitFor blocks until cond holds over the timeline or timeout passes, and
// reports whether it held. It waits on events, not on a clock.
func (g *GPU) WaitFor(timeout time.Duration, cond func([]Event) bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ch := g.Changed()
		if cond(g.Events()) {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return cond(g.Events())
		}
	}
}

// Index returns the position of the first event after from whose service
// matches and whose text contains substr, or -1.
func Index(events []Event, from int, service, substr string) int {
	for i := max(from, 0); i < len(events); i++ {
		if events[i].Service == service && strings.Contains(events[i].What, substr) {
			return i
		}
	}
	return -1
}

// Dump formats the timeline for a test failure message.
func Dump(events []Event) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}
