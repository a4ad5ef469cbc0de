package gpu

import (
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/eta"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/words"
)

// What keeps the GPU from a waiter now (WaiterStatus.WaitingFor), beside
// waitingForVRAM and waitingForReading.
const (
	waitingForJob      = "job"      // an image job (or the start-up probe, or work started on the engine directly)
	waitingForLLM      = "llm"      // LLM requests in flight, draining
	waitingForHold     = "hold"     // an external hold
	waitingForPresence = "presence" // a presence hold (hold_while)
	waitingForUnload   = "unload"   // the LLM engines being emptied for an exclusive user
	waitingForFree     = "free"     // an image engine being freed after exclusive use
	waitingForWake     = "wake"     // an LLM engine being woken after exclusive use
)

// foreseeLocked fills in each waiter of list (the first of the waiters,
// oldest first, as waiterList gave them) its position, expected start
// and what keeps the GPU from it. g.mu is held, inside the lock's mutex
// (lock.View), snap being the lock's snapshot.
func (g *GPU) foreseeLocked(snap lock.Snapshot, now time.Time, c *Config, list []WaiterStatus) {
	ids := g.act.waiterIDs()
	s, queued := g.situationLocked(snap, now, c, ids)
	p := eta.Predict(&g.learned, s)
	places := make(map[uint64]eta.Place, len(queued))
	for i, id := range queued {
		places[id] = p.Queue[i]
	}
	blocker := g.blockerLocked(snap, c)
	memRank := map[string]int{}
	for i, id := range ids[:len(list)] {
		w, ws := g.act.waiters[id], &list[i]
		var pl eta.Place
		switch {
		case w.waitingFor != "":
			memRank[w.waitingFor]++
			pl.Position = memRank[w.waitingFor]
		case w.kind == lock.LLM:
			pl, ws.WaitingFor = p.LLM, blocker
		default:
			pl, ws.WaitingFor = places[id], blocker
		}
		ws.Position = pl.Position
		if pl.Known() {
			at := pl.Start
			ws.ExpectedStart = &at
		}
	}
}

// situationLocked is what a prediction starts from: the lock as snap
// shows it, the GPU's state, and the waiters ids (oldest first); queued
// are the ids of the exclusive waiters, in the order of its Queue. g.mu
// is held.
func (g *GPU) situationLocked(snap lock.Snapshot, now time.Time, c *Config, ids []uint64) (s eta.Situation, queued []uint64) {
	a := &g.act
	s = eta.Situation{Now: now, Holder: g.holderLocked(snap), Freeing: snap.Freeing, Streak: snap.Streak,
		LLMWaiting: snap.SharedWaiting > 0}
	for _, id := range ids {
		w := a.waiters[id]
		var q eta.Waiter
		switch {
		case w.kind == lock.LLM:
			s.LLMWaiting = s.LLMWaiting || w.waitingFor == ""
			continue
		case w.kind == lock.Image:
			q = eta.Waiter{Kind: eta.Job, Engine: w.engine, Workflow: w.workflow}
		case w.presence:
			q = eta.Waiter{Kind: eta.Presence}
		default:
			q = eta.Waiter{Kind: eta.Hold, Lease: w.lease}
		}
		s.Queue = append(s.Queue, q)
		queued = append(queued, id)
	}
	if c == nil {
		return s, queued
	}
	s.MaxStreak = c.MaxImageStreak
	for _, e := range c.LLMs {
		r := g.runLocked(e.Name())
		_, sleeps := e.(Waker)
		loaded := r.state == stateReady || r.state == stateEmptying || r.state == stateUnemptiable
		s.LLMs = append(s.LLMs, eta.LLMEngine{Name: e.Name(), Loaded: loaded, Asleep: sleeps && r.owed, Sleeps: sleeps})
	}
	for _, e := range c.Images {
		if g.runLocked(e.Name()).owed {
			s.OwesFree = append(s.OwesFree, e.Name())
		}
	}
	return s, queued
}

// holderLocked is what holds the GPU as snap shows it; g.mu is held.
func (g *GPU) holderLocked(snap lock.Snapshot) eta.Holder {
	a := &g.act
	switch snap.State {
	case lock.Image:
		if a.job == nil {
			return eta.Holder{} // given back: its free, if any, is Freeing
		}
		h := eta.Holder{Kind: eta.Job, Engine: a.job.Engine, Workflow: a.job.workflow, Started: a.job.Started, Ran: a.job.ran}
		if a.image == nil {
			h.Ran = a.job.Started // the probe, or work started directly: it runs from the start
		}
		return h
	case lock.Hold:
		for _, h := range a.holds {
			if h.Presence() {
				return eta.Holder{Kind: eta.Presence}
			}
			return eta.Holder{Kind: eta.Hold, Expires: h.expires}
		}
		return eta.Holder{Kind: eta.Hold} // being readied: its lease not known yet
	case lock.LLM:
		return eta.Holder{Kind: eta.LLM}
	}
	return eta.Holder{}
}

// blockerLocked is what keeps the GPU from the requests waiting for the
// lock now, as snap shows it; g.mu is held.
func (g *GPU) blockerLocked(snap lock.Snapshot, c *Config) string {
	emptying := false
	if c != nil {
		for _, e := range c.LLMs {
			switch g.runLocked(e.Name()).state {
			case stateWaking:
				return waitingForWake
			case stateEmptying:
				emptying = true
			}
		}
	}
	if snap.Freeing {
		return waitingForFree
	}
	a := &g.act
	switch snap.State {
	case lock.Image:
		if a.job != nil && a.job.Phase == "unloading" {
			return waitingForUnload
		}
		return waitingForJob
	case lock.Hold:
		for _, h := range a.holds {
			if h.Presence() {
				return waitingForPresence
			}
		}
		if emptying {
			return waitingForUnload
		}
		return waitingForHold
	case lock.LLM:
		return waitingForLLM
	}
	return waitingForJob // idle: the start-up settling, or a grant under way
}

// Outlook is what a request arriving now can expect: its position in
// the order the lock serves, and how long until it has the GPU.
type Outlook struct {
	Position int
	Wait     time.Duration
	Known    bool // Wait could be predicted
}

// Outlook is what an LLM request (image false) or an image job on the
// first image engine arriving now can expect.
func (g *GPU) Outlook(image bool) Outlook {
	var o Outlook
	now := time.Now()
	g.lock.View(func(snap lock.Snapshot) {
		g.mu.Lock()
		defer g.mu.Unlock()
		c := g.cfg()
		s, _ := g.situationLocked(snap, now, c, g.act.waiterIDs())
		if image {
			w := eta.Waiter{Kind: eta.Job}
			if c != nil && len(c.Images) > 0 {
				w.Engine = c.Images[0].Name()
			}
			s.Queue = append(s.Queue, w)
		} else {
			s.LLMWaiting = true
		}
		p := eta.Predict(&g.learned, s)
		pl := p.LLM
		if image {
			pl = p.Queue[len(p.Queue)-1]
		}
		o = Outlook{Position: pl.Position, Known: pl.Known()}
		if o.Known {
			o.Wait = max(pl.Start.Sub(now), 0)
		}
	})
	return o
}

// Words is the outlook as a busy answer says it: "you would be 2nd in
// line, expected to start in about 40 s".
func (o Outlook) Words() string {
	if o.Position == 0 {
		return ""
	}
	s := "you would be " + words.Ordinal(o.Position) + " in line"
	if o.Known {
		s += ", expected to start in " + words.About(o.Wait)
	}
	return s
}
