package gputest

import "fmt"

// Idle makes the charge no occupancy while its process keeps bytes on the
// card: what a sleeping engine leaves (vLLM's residue after its sleep)
// counts in Used, in the over-commit check and in nvidia-smi's list, but
// overlaps nothing, as the turnstile budgets it rather than hands the card
// over around it. It records what+" idle, keeps N MiB". A charge that has
// ended, or is idle, is left as it is.
func (c *Charge) Idle(bytes int64) {
	if bytes < 0 {
		panic(fmt.Sprintf("gputest: %s %q idle with %d bytes", c.service, c.what, bytes))
	}
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reapLocked()
	if c.ended || c.idle {
		return
	}
	c.idle = true
	g.users[c.service]--
	g.chargeLocked(c.pid(), "", bytes-c.bytes)
	c.bytes = bytes
	g.record(c.service, fmt.Sprintf("%s idle, keeps %s", c.what, mib(bytes)))
}

// Busy makes an idle charge an occupancy again, of bytes (a wake),
// recording what+" busy with N MiB"; an overlap or an over-commit then
// counts. A charge that has ended, or is not idle, is left as it is.
func (c *Charge) Busy(bytes int64) {
	if bytes < 0 {
		panic(fmt.Sprintf("gputest: %s %q busy with %d bytes", c.service, c.what, bytes))
	}
	g := c.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reapLocked()
	if c.ended || !c.idle {
		return
	}
	c.idle = false
	g.users[c.service]++
	g.chargeLocked(c.pid(), "", bytes-c.bytes)
	c.bytes = bytes
	what := fmt.Sprintf("%s busy with %s", c.what, mib(bytes))
	g.record(c.service, what)
	g.overlapLocked(c.service, what)
	g.overCommitLocked(c.service, what)
}
