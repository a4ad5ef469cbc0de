// Package gputest is the simulated GPU that the fake engines (Ollama,
// llama.cpp, llama-swap, vLLM, ComfyUI, Automatic1111) share. Each fake
// reports when it starts and stops occupying video memory; the GPU records
// a timeline and counts every instant at which two services occupied it
// together, which is the one thing the turnstile exists to prevent. LLM
// engines may share the GPU with one another (LLM requests share it):
// ShareAmong declares such a group.
//
// The card may also have a memory size (SetMemory). Each occupancy then
// charges its bytes (OccupyBytes), processes outside every engine take
// some too (Foreign), and every moment the charges exceed the size is
// recorded (OverCommits). FakeSMI writes an nvidia-smi that reads the
// card's memory and its processes. With no size (the default) nothing
// about memory is checked.
package gputest

import (
	"fmt"
	"os"
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
	Used    int64  // the bytes charged on the card after this event
}

func (e Event) String() string {
	s := fmt.Sprintf("%s %-6s %s (%d)", e.At.Format("15:04:05.000000"), e.Service, e.What, e.Users)
	if e.Used != 0 {
		s += fmt.Sprintf(" [%s used]", mib(e.Used))
	}
	return s
}

// GPU is a simulated card shared by the fakes. The zero value is not
// usable; call New.
type GPU struct {
	mu       sync.Mutex
	users    map[string]int
	events   []Event
	overlaps []string
	unbidden []string // overlaps and over-commits at the start of an unbidden use
	changed  chan struct{}
	group    map[string]int // the sharing group of a service (ShareAmong); 0: none
	groups   int

	total       int64         // the card's size (SetMemory); 0: unknown, nothing checked
	used        int64         // bytes charged now
	procs       map[int]*proc // the charges by process id
	overCommits []string      // every moment used exceeded total
	smi         smiState      // FakeSMI's files and failure modes

	charges  map[*Charge]bool // the charges held by processes' lives (ChargeProcess)
	watching bool             // watchCharges runs
}

// proc is one process's charge on the card, as nvidia-smi lists it.
type proc struct {
	name  string
	bytes int64
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
	return &GPU{users: map[string]int{}, changed: make(chan struct{}), procs: map[int]*proc{}}
}

// Occupy records that service starts using video memory for what (a model
// load, a job). The returned function records the end of that use; calling
// it twice is a no-op. It is OccupyBytes with 0 bytes.
func (g *GPU) Occupy(service, what string) (release func(string)) {
	return g.OccupyBytes(service, what, 0)
}

// OccupyBytes is Occupy for a use that also takes bytes of the card's
// memory until it is released. The bytes are charged to the test's own
// process (the fakes run in it), as nvidia-smi would show them.
func (g *GPU) OccupyBytes(service, what string, bytes int64) (release func(string)) {
	return g.OccupyProcess(service, what, os.Getpid(), bytes)
}

// OccupyProcess is OccupyBytes for a fake whose use is held by a process
// of its own (a runner), charged to pid.
func (g *GPU) OccupyProcess(service, what string, pid int, bytes int64) (release func(string)) {
	return g.occupy(service, what, pid, bytes, false)
}

// OccupyUnbidden is Occupy for a use that nobody asked for, which the
// service takes on its own (an engine that loads its model as it
// restarts): an overlap at its start is the service's own doing, which no
// orchestration can prevent, and is listed by Unbidden instead of
// Overlaps. An overlap with anything that starts while it lasts still
// counts.
func (g *GPU) OccupyUnbidden(service, what string) (release func(string)) {
	return g.OccupyUnbiddenBytes(service, what, 0)
}

// OccupyUnbiddenBytes is OccupyUnbidden for a use that takes bytes. An
// over-commit at its start is the service's own doing too: Unbidden lists
// it instead of OverCommits.
func (g *GPU) OccupyUnbiddenBytes(service, what string, bytes int64) (release func(string)) {
	return g.occupy(service, what, os.Getpid(), bytes, true)
}

func (g *GPU) occupy(service, what string, pid int, bytes int64, unbidden bool) (release func(string)) {
	if bytes < 0 {
		panic(fmt.Sprintf("gputest: %s %q occupies %d bytes", service, what, bytes))
	}
	g.mu.Lock()
	g.reapLocked()
	overlaps, overCommits := len(g.overlaps), len(g.overCommits)
	g.users[service]++
	g.chargeLocked(pid, "", bytes)
	g.record(service, what)
	g.overlapLocked(service, what)
	g.overCommitLocked(service, what)
	if unbidden {
		g.unbidden = append(g.unbidden, g.overlaps[overlaps:]...)
		g.unbidden = append(g.unbidden, g.overCommits[overCommits:]...)
		g.overlaps, g.overCommits = g.overlaps[:overlaps], g.overCommits[:overCommits]
	}
	g.mu.Unlock()
	var once sync.Once
	return func(why string) {
		once.Do(func() {
			g.mu.Lock()
			g.users[service]--
			g.chargeLocked(pid, "", -bytes)
			g.record(service, why)
			g.mu.Unlock()
		})
	}
}

// overlapLocked records an overlap with every service outside service's
// group that occupies the card now; g.mu is held.
func (g *GPU) overlapLocked(service, what string) {
	for other, n := range g.users {
		if !g.share(service, other) && n > 0 {
			g.overlaps = append(g.overlaps, fmt.Sprintf("%s %q while %s held %d", service, what, other, n))
		}
	}
}

// Unbidden lists the overlaps (and over-commits) that unbidden uses
// caused as they began.
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
	g.events = append(g.events, Event{At: time.Now(), Service: service, What: what, Users: g.users[service], Used: g.used})
	close(g.changed)
	g.changed = make(chan struct{})
	g.writeSMILocked()
}

// Users returns how many occupancies the service has now.
func (g *GPU) Users(service string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reapLocked()
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
