package gputest

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
)

// Charge is an occupancy held by a process's life (ChargeProcess): it
// lasts while that process lives, and ends by itself when it exits,
// however it exits.
type Charge struct {
	g       *GPU
	service string
	what    string
	id      procs.ID
	watch   *exitWatch
	done    chan struct{} // closed when the charge ends

	bytes int64 // guarded by g.mu
	ended bool  // guarded by g.mu
	idle  bool  // guarded by g.mu: no occupancy (Idle)
}

// watchPeriod bounds how late the watcher notices an exit where the
// platform cannot wake it at once, and how late it picks up a new charge.
// Checks never depend on it: each first drops the charges of dead
// processes.
const watchPeriod = 20 * time.Millisecond

// ChargeProcess records that service occupies the card for what, with
// bytes charged to pid (nvidia-smi lists them under it), for as long as
// that process lives: the process is the one with pid now, named by its
// start time, so a PID the kernel reuses later is not it. The charge ends
// by itself when the process exits in any way, SIGKILL included,
// recording the event what+" exit". Every check of overlaps, over-commits
// and occupancy first drops the charges of processes dead at that
// instant. A process already gone makes a charge that ends at once.
func (g *GPU) ChargeProcess(service, what string, pid int, bytes int64) *Charge {
	id := procs.ID{PID: int32(pid)}
	if tb, err := procs.Snapshot(context.Background()); err == nil {
		if p, ok := tb.Get(int32(pid)); ok {
			id = p.ID
		}
	}
	return g.chargeID(service, what, id, bytes)
}

// chargeID is ChargeProcess for the process id; a Start of 0 names no
// living process.
func (g *GPU) chargeID(service, what string, id procs.ID, bytes int64) *Charge {
	if bytes < 0 {
		panic(fmt.Sprintf("gputest: %s %q charges %d bytes", service, what, bytes))
	}
	c := &Charge{g: g, service: service, what: what, id: id, done: make(chan struct{}), bytes: bytes}
	c.watch = watchProcess(id)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reapLocked()
	g.users[service]++
	g.chargeLocked(c.pid(), "", bytes)
	g.record(service, what)
	g.overlapLocked(service, what)
	g.overCommitLocked(service, what)
	if g.charges == nil {
		g.charges = map[*Charge]bool{}
	}
	g.charges[c] = true
	if c.watch.exited() {
		g.endLocked(c, what+" exit")
		return c
	}
	if !g.watching {
		g.watching = true
		go g.watchCharges()
	}
	return c
}

// pid is the process the charge is listed under.
func (c *Charge) pid() int {
	if c.id.PID <= 0 {
		return os.Getpid()
	}
	return int(c.id.PID)
}

// PID is the process whose life holds the charge.
func (c *Charge) PID() int { return int(c.id.PID) }

// Done is closed when the charge has ended: its process exited, or
// Release.
func (c *Charge) Done() <-chan struct{} { return c.done }

// Set changes the charge's bytes (vLLM's sleep frees all but a residue),
// recording the event what+" set to N MiB". A charge that has ended
// stays ended.
func (c *Charge) Set(bytes int64) {
	if bytes < 0 {
		panic(fmt.Sprintf("gputest: %s %q set to %d bytes", c.service, c.what, bytes))
	}
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reapLocked()
	if c.ended {
		return
	}
	g.chargeLocked(c.pid(), "", bytes-c.bytes)
	c.bytes = bytes
	what := fmt.Sprintf("%s set to %s", c.what, mib(bytes))
	g.record(c.service, what)
	g.overCommitLocked(c.service, what)
}

// Release ends the charge before its process exits, recording why. It
// is a no-op on a charge that has ended.
func (c *Charge) Release(why string) {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if !c.ended {
		g.endLocked(c, why)
	}
}

// End records why the charge ends, whether its process still lives or
// has exited. A live process's charge is released with why, as Release.
// Once the process has exited, the charge ends with its exit (what+" exit",
// if not recorded already) and why follows as a mark. Checking Done and
// then calling Release instead can lose why: the watcher may end the
// charge at the exit in between, and Release is then a no-op.
func (c *Charge) End(why string) {
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reapLocked()
	if c.ended {
		g.record(c.service, why)
		return
	}
	g.endLocked(c, why)
}

// endLocked ends c; g.mu is held.
func (g *GPU) endLocked(c *Charge, why string) {
	c.ended = true
	delete(g.charges, c)
	c.watch.close()
	if !c.idle {
		g.users[c.service]--
	}
	g.chargeLocked(c.pid(), "", -c.bytes)
	g.record(c.service, why)
	close(c.done)
}

// reapLocked ends the charges whose processes have exited; g.mu is held.
func (g *GPU) reapLocked() {
	for c := range g.charges {
		if c.watch.exited() {
			g.endLocked(c, c.what+" exit")
		}
	}
}

// watchCharges ends the charges of processes that exit, until no charge
// is left.
func (g *GPU) watchCharges() {
	for {
		g.mu.Lock()
		g.reapLocked()
		if len(g.charges) == 0 {
			g.watching = false
			g.mu.Unlock()
			return
		}
		ws := make([]*exitWatch, 0, len(g.charges))
		for c := range g.charges {
			ws = append(ws, c.watch)
		}
		g.mu.Unlock()
		waitExit(ws, watchPeriod)
	}
}
