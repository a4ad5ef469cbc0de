package gpu

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// Event is one event of a GPU's live stream, its data already JSON:
// "status" (the status, as SetStatusView shapes it), "step" (an unload,
// free, wake, warm, prepare or interrupt, with its duration) or "job" (an
// image job's end, with its outcome).
type Event struct {
	Name string
	Data []byte
}

// How the live stream is paced.
const (
	// eventGap is the least time between two rounds of status events: a
	// burst of changes (LLM requests coming and going) is sent as one
	// status per state it went through, not one per request.
	eventGap = 25 * time.Millisecond
	// eventBuffer is how many events a subscriber may fall behind before
	// it is dropped.
	eventBuffer = 64
	// pendingMax bounds the changes waiting for the publisher; past it,
	// status changes coalesce into the newest and steps are dropped.
	pendingMax = 256
	// maxSubscribers bounds the subscribers of one GPU: the status handler
	// usually sits on an open port, and each subscriber costs a buffer and
	// a place in every round.
	maxSubscribers = 256
)

// ErrTooManySubscribers is returned by Subscribe past maxSubscribers.
var ErrTooManySubscribers = errors.New("too many subscribers to the live events")

// Subscription receives a GPU's events until it ends: closed by its
// owner, dropped for falling behind, or ended by the GPU's Close. C is
// closed then.
type Subscription struct {
	C       <-chan Event
	c       chan Event
	g       *GPU
	dropped bool // under g.mu
}

// Close ends the subscription.
func (s *Subscription) Close() {
	s.g.mu.Lock()
	s.g.removeLocked(s, false)
	s.g.mu.Unlock()
}

// Dropped reports whether the subscription was ended for falling behind.
func (s *Subscription) Dropped() bool {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	return s.dropped
}

// hub fans a GPU's events out to its subscribers; its fields are part of
// the GPU's state, under g.mu. Changes are queued by whoever makes them,
// without waiting, and sent by one publisher goroutine, which runs while
// anyone subscribes.
type hub struct {
	pending []change
	// dirty is set by a change of the GPU's own state since the last
	// round: the round sends the status as it is then, if it differs
	// from the last one sent.
	dirty   bool
	subs    map[*Subscription]struct{}
	running bool // the publisher runs
	// wake has the publisher look at the queue. It is made once and never
	// replaced, so the publisher receives from it without g.mu.
	wake chan struct{}
	view func(Status) any // shapes the status events; nil sends the Status as is
}

// change is one queued change: a status (with the lock as it was then),
// or a step or job to send as it is.
type change struct {
	event string // "status", "step" or "job"
	snap  lock.Snapshot
	data  any
}

func newHub() hub { return hub{subs: map[*Subscription]struct{}{}, wake: make(chan struct{}, 1)} }

// queue adds a change for the publisher and wakes it, never waiting. A
// status change of the same lock state as the last one queued replaces
// it: only the newest counts of each state are sent. g.mu is held.
func (h *hub) queue(c change) {
	last := len(h.pending) - 1
	switch {
	case c.event == "status" && last >= 0 && h.pending[last].event == "status" &&
		(h.pending[last].snap.State == c.snap.State || len(h.pending) >= pendingMax):
		h.pending[last] = c
	case len(h.pending) < pendingMax:
		h.pending = append(h.pending, c)
	}
	h.poke()
}

// poke wakes the publisher, never waiting; g.mu is held.
func (h *hub) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// take returns the queued changes, oldest first, and whether the GPU's
// own state changed since the last round; spare is an emptied slice to
// queue into next, so that queueing rarely allocates. With nobody
// subscribed any more it marks the publisher stopped (the next Subscribe
// starts another) and reports idle.
func (g *GPU) take(spare []change) (changes []change, dirty, idle bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := &g.hub
	if len(h.subs) == 0 {
		h.running = false
		h.pending, h.dirty = h.pending[:0], false
		return nil, false, true
	}
	changes, dirty = h.pending, h.dirty
	h.pending, h.dirty = spare[:0], false
	return changes, dirty, false
}

// send hands ev to every subscriber, dropping those whose buffer is full.
// It logs after unlocking.
func (g *GPU) send(ev Event) {
	dropped := 0
	g.mu.Lock()
	for s := range g.hub.subs {
		select {
		case s.c <- ev:
		default:
			g.removeLocked(s, true)
			dropped++
		}
	}
	g.mu.Unlock()
	if dropped > 0 {
		g.log().Info("live event subscribers dropped: they fell behind by more events than their buffer holds",
			zap.Int("dropped", dropped), zap.Int("buffer", eventBuffer))
	}
}

// removeLocked ends s; g.mu is held.
func (g *GPU) removeLocked(s *Subscription, dropped bool) {
	if _, ok := g.hub.subs[s]; !ok {
		return
	}
	delete(g.hub.subs, s)
	s.dropped = dropped
	close(s.c)
	g.watched.Store(g.changed != nil || len(g.hub.subs) > 0)
	g.hub.poke() // the publisher stops once the last one has left
}

// closeSubscribers ends every subscription; the GPU is closing.
func (g *GPU) closeSubscribers() {
	g.mu.Lock()
	for s := range g.hub.subs {
		g.removeLocked(s, false)
	}
	g.mu.Unlock()
}

// SetStatusView sets what a status event carries: view(status), in JSON.
// The caller adds what it knows beyond the GPU (the status JSON of the
// HTTP handler).
func (g *GPU) SetStatusView(view func(Status) any) {
	g.mu.Lock()
	g.hub.view = view
	g.mu.Unlock()
}

// Subscribe returns a subscription to the GPU's live events, from now on,
// or ErrTooManySubscribers. The caller sends the status at subscription
// time itself.
func (g *GPU) Subscribe() (*Subscription, error) {
	c := make(chan Event, eventBuffer)
	s := &Subscription{C: c, c: c, g: g}
	g.mu.Lock()
	defer g.mu.Unlock()
	h := &g.hub
	if g.closed || g.ctx.Err() != nil {
		close(c)
		return s, nil
	}
	if len(h.subs) >= maxSubscribers {
		return nil, ErrTooManySubscribers
	}
	h.subs[s] = struct{}{}
	g.watched.Store(true)
	// The first round sends the status as it is, as a change would.
	h.dirty = true
	h.poke()
	if !h.running {
		h.running = g.spawnLocked(g.publish)
	}
	return s, nil
}

// recordedLocked queues a step or job event as history records it; g.mu
// is held.
func (g *GPU) recordedLocked(event string, v any) {
	if len(g.hub.subs) == 0 {
		return
	}
	switch e := v.(type) {
	case EventEntry:
		v = StepEvent{Turnstile: g.name, EventEntry: e}
	case JobEntry:
		v = JobEvent{Turnstile: g.name, JobEntry: e}
	}
	g.hub.queue(change{event: event, data: v})
}

// StepEvent is the data of a step event: a timed step of the GPU.
type StepEvent struct {
	Turnstile string `json:"turnstile"`
	EventEntry
}

// JobEvent is the data of a job event: an image job's end.
type JobEvent struct {
	Turnstile string `json:"turnstile"`
	JobEntry
}

// publish sends the queued changes as events, a round at most every
// eventGap, until the last subscriber leaves or the GPU closes. It waits
// for a change: the lock's observer queues each of the lock's, and every
// change of the GPU's own state (an engine's reachability or state, a
// presence condition, a renewed hold) wakes it too.
func (g *GPU) publish() {
	p := publisher{g: g}
	gap := time.NewTimer(0)
	defer gap.Stop()
	var spare []change
	for {
		select {
		case <-g.ctx.Done():
			g.closeSubscribers()
			return
		case <-g.hub.wake:
		}
		<-gap.C
		changes, dirty, idle := g.take(spare)
		if idle {
			return
		}
		p.sendAll(changes)
		if dirty {
			p.sendIfChanged()
		}
		spare = changes
		gap.Reset(eventGap)
	}
}

// publisher is the state of the publish loop.
type publisher struct {
	g *GPU
	// last is the last status sent, with its ages zeroed: what a round
	// for a change of the GPU's own state compares the status with.
	last []byte
}

// sendIfChanged sends the status as it is now, if it differs from the
// last one sent in more than its ages.
func (p *publisher) sendIfChanged() {
	data, key := p.render(p.g.Status())
	if data == nil || bytes.Equal(key, p.last) {
		return
	}
	p.last = key
	p.g.send(Event{Name: "status", Data: data})
}

// sendAll sends a round of changes in order, each lock state's status
// once, at its last change in the round: a lock switched back and forth
// faster than the round shows each state it went through, with its newest
// counts, and a round is never longer than a subscriber's buffer.
func (p *publisher) sendAll(changes []change) {
	g := p.g
	var last [lock.Hold + 1]int
	for i, c := range changes {
		if c.event == "status" {
			last[c.snap.State] = i
		}
	}
	for i, c := range changes {
		if c.event == "status" && last[c.snap.State] != i {
			continue
		}
		var data []byte
		switch c.event {
		case "status":
			data, p.last = p.render(g.statusAt(c.snap))
		default:
			data, _ = json.Marshal(c.data)
		}
		if data != nil {
			g.send(Event{Name: c.event, Data: data})
		}
	}
}

// render returns st as the status event carries it, and the same with
// its ages zeroed, which say nothing changed.
func (p *publisher) render(st Status) (data, key []byte) {
	p.g.mu.Lock()
	view := p.g.hub.view
	p.g.mu.Unlock()
	shape := func(st Status) []byte {
		var v any = st
		if view != nil {
			v = view(st)
		}
		b, err := json.Marshal(v)
		if err != nil {
			p.g.log().Error("status event not encoded", zap.Error(err))
		}
		return b
	}
	data = shape(st)
	st.OldestWaitSeconds = 0
	if st.Job != nil {
		j := *st.Job
		j.AgeSeconds = 0
		st.Job = &j
	}
	return data, shape(st)
}
