package gputest

import (
	"fmt"
	"os"
	"sync"
)

// SetMemory gives the card its size in bytes. While it is 0 (the
// default) nothing about memory is checked.
func (g *GPU) SetMemory(total int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reapLocked()
	g.total = total
	g.overCommitLocked("gpu", fmt.Sprintf("size set to %s", mib(total)))
	g.writeSMILocked()
}

// Foreign records a process outside every engine (a game, a desktop
// application) that uses bytes of the card's memory until released. It
// is no occupancy (it overlaps nothing), but it counts in Used and in the
// over-commit check, and nvidia-smi lists it as a compute process with
// pid. Its start and end are events of service "foreign".
func (g *GPU) Foreign(name string, pid int, bytes int64) (release func()) {
	if bytes < 0 {
		panic(fmt.Sprintf("gputest: foreign %q uses %d bytes", name, bytes))
	}
	g.mu.Lock()
	g.reapLocked()
	g.chargeLocked(pid, name, bytes)
	g.record("foreign", fmt.Sprintf("%s (pid %d) takes %s", name, pid, mib(bytes)))
	g.overCommitLocked("foreign", name)
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.chargeLocked(pid, name, -bytes)
			g.record("foreign", fmt.Sprintf("%s (pid %d) gives back %s", name, pid, mib(bytes)))
			g.mu.Unlock()
		})
	}
}

// Total is the card's size (0: none set).
func (g *GPU) Total() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.total
}

// Used is the bytes charged on the card now, by engines and foreign
// processes.
func (g *GPU) Used() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reapLocked()
	return g.used
}

// Free is the card's size minus what is used, never below 0 (and 0 when
// the card has no size).
func (g *GPU) Free() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reapLocked()
	return g.freeLocked()
}

func (g *GPU) freeLocked() int64 {
	return max(g.total-g.used, 0)
}

// OverCommits lists every moment the charges exceeded the card's size
// (when it has one): the charge that did it, and the sum then.
func (g *GPU) OverCommits() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.overCommits...)
}

// chargeLocked adds delta bytes to pid's charge; g.mu is held. An engine's
// charge (name "") is listed under the test binary's name.
func (g *GPU) chargeLocked(pid int, name string, delta int64) {
	if delta == 0 {
		return
	}
	p := g.procs[pid]
	if p == nil {
		p = &proc{name: name}
		if name == "" {
			p.name = os.Args[0]
		}
		g.procs[pid] = p
	}
	p.bytes += delta
	g.used += delta
	if p.bytes == 0 {
		delete(g.procs, pid)
	}
}

// overCommitLocked records an over-commit if the charges exceed the size
// now; g.mu is held.
func (g *GPU) overCommitLocked(service, what string) {
	if g.total > 0 && g.used > g.total {
		g.overCommits = append(g.overCommits, fmt.Sprintf("%s %q: %s used of %s (%d bytes over)",
			service, what, mib(g.used), mib(g.total), g.used-g.total))
	}
}

// mib formats bytes in MiB for messages.
func mib(b int64) string {
	if b%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", b>>20)
	}
	return fmt.Sprintf("%.2f MiB", float64(b)/(1<<20))
}
