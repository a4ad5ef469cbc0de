package gpu

import (
	"bytes"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
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
	// eventRecheck is how often the status is compared with the last one
	// sent while anyone subscribes, for the changes nothing signals (an
	// engine's reachability or state, a presence condition, a renewed
	// hold): those too are sent within 100 ms.
	eventRecheck = 50 * time.Millisecond
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
	hub     *hub
	dropped atomic.Bool
}

// Close ends the subscription.
func (s *Subscription) Close() { s.hub.remove(s, false) }

// Dropped reports whether the subscription was ended for falling behind.
func (s *Subscription) Dropped() bool { return s.dropped.Load() }

// hub fans a GPU's events out to its subscribers. Changes are queued by
// whoever makes them, without waiting, and sent by one publisher
// goroutine, which runs while anyone subscribes.
type hub struct {
	// n counts the subscribers: the lock's hot path reads it, and does
	// nothing more while it is 0.
	n atomic.Int32

	// pendingMu guards pending alone: queue runs under the lock's mutex,
	// and must not wait for a fan-out under mu.
	pendingMu sync.Mutex
	pending   []change

	mu      sync.Mutex
	subs    map[*Subscription]struct{}
	running bool // the publisher runs
	wake    chan struct{}
	view    func(Status) any // shapes the status events; nil sends the Status as is
}

// change is one queued change: a status (with the lock as it was then),
// or a step or job to send as it is.
type change struct {
	event string // "status", "step" or "job"
	snap  lock.Snapshot
	data  any
}

func newHub() *hub { return &hub{subs: map[*Subscription]struct{}{}, wake: make(chan struct{}, 1)} }

// queue adds a change for the publisher and wakes it, never waiting. A
// status change of the same lock state as the last one queued replaces
// it: only the newest counts of each state are sent.
func (h *hub) queue(c change) {
	h.pendingMu.Lock()
	last := len(h.pending) - 1
	switch {
	case c.event == "status" && last >= 0 && h.pending[last].event == "status" &&
		(h.pending[last].snap.State == c.snap.State || len(h.pending) >= pendingMax):
		h.pending[last] = c
	case len(h.pending) < pendingMax:
		h.pending = append(h.pending, c)
	}
	h.pendingMu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// take returns the queued changes, oldest first; spare is an emptied
// slice to queue into next, so that queueing rarely allocates.
func (h *hub) take(spare []change) []change {
	h.pendingMu.Lock()
	out := h.pending
	h.pending = spare[:0]
	h.pendingMu.Unlock()
	return out
}

// send hands ev to every subscriber, dropping those whose buffer is full.
// It logs after unlocking: the lock's hot path waits for h.mu.
func (h *hub) send(ev Event, log *zap.Logger) {
	dropped := 0
	h.mu.Lock()
	for s := range h.subs {
		select {
		case s.c <- ev:
		default:
			h.removeLocked(s, true)
			dropped++
		}
	}
	h.mu.Unlock()
	if dropped > 0 {
		log.Info("live event subscribers dropped: they fell behind by more events than their buffer holds",
			zap.Int("dropped", dropped), zap.Int("buffer", eventBuffer))
	}
}

func (h *hub) remove(s *Subscription, dropped bool) {
	h.mu.Lock()
	h.removeLocked(s, dropped)
	h.mu.Unlock()
}

func (h *hub) removeLocked(s *Subscription, dropped bool) {
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	h.n.Add(-1)
	s.dropped.Store(dropped)
	close(s.c)
}

func (h *hub) closeAll() {
	h.mu.Lock()
	for s := range h.subs {
		h.removeLocked(s, false)
	}
	h.mu.Unlock()
}

// SetStatusView sets what a status event carries: view(status), in JSON.
// The caller adds what it knows beyond the GPU (the status JSON of the
// HTTP handler).
func (g *GPU) SetStatusView(view func(Status) any) {
	g.hub.mu.Lock()
	g.hub.view = view
	g.hub.mu.Unlock()
}

// Subscribe returns a subscription to the GPU's live events, from now on,
// or ErrTooManySubscribers. The caller sends the status at subscription
// time itself.
func (g *GPU) Subscribe() (*Subscription, error) {
	c := make(chan Event, eventBuffer)
	s := &Subscription{C: c, c: c, hub: g.hub}
	h := g.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if g.ctx.Err() != nil {
		close(c)
		return s, nil
	}
	if len(h.subs) >= maxSubscribers {
		return nil, ErrTooManySubscribers
	}
	h.subs[s] = struct{}{}
	h.n.Add(1)
	if !h.running {
		h.running = true
		g.spawn(g.publish)
	}
	return s, nil
}

// Changed implements lock.Observer. It runs under the lock's mutex, on
// every LLM request's way in and out: with no subscriber it does nothing
// more than read a counter.
func (g *GPU) Changed(s lock.Snapshot) {
	if g.hub.n.Load() == 0 {
		return
	}
	g.hub.queue(change{event: "status", snap: s})
}

// notify queues a status event for a change the lock does not see (a
// job's phase, a hold, a waiter). It must not be called under the lock's
// mutex.
func (g *GPU) notify() {
	if g.hub.n.Load() == 0 {
		return
	}
	g.hub.queue(change{event: "status", snap: g.lock.Snapshot()})
}

// recorded queues a step or job event as history records it.
func (g *GPU) recorded(event string, v any) {
	if g.hub.n.Load() == 0 {
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
// eventGap, and looks for unsignalled changes every eventRecheck, until
// the last subscriber leaves or the GPU closes.
func (g *GPU) publish() {
	p := publisher{g: g}
	recheck := time.NewTicker(eventRecheck)
	defer recheck.Stop()
	gap := time.NewTimer(0)
	defer gap.Stop()
	var spare []change
	for {
		select {
		case <-g.ctx.Done():
			g.hub.closeAll()
			return
		case <-g.hub.wake:
		case <-recheck.C:
			if g.hub.idle() {
				return
			}
			if !p.statusChanged() {
				continue
			}
		}
		<-gap.C
		changes := g.hub.take(spare)
		p.sendAll(changes)
		spare = changes
		gap.Reset(eventGap)
	}
}

// idle reports whether nobody subscribes any more, and if so marks the
// publisher stopped: the next Subscribe starts another.
func (h *hub) idle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) > 0 {
		return false
	}
	h.running = false
	return true
}

// publisher is the state of the publish loop.
type publisher struct {
	g *GPU
	// last is the last status sent, with its ages zeroed: what the
	// recheck compares the status with.
	last []byte
}

// statusChanged reports whether the status differs from the last one
// sent in more than its ages; if so it queues it.
func (p *publisher) statusChanged() bool {
	snap := p.g.lock.Snapshot()
	_, key := p.render(p.g.statusAt(snap))
	if bytes.Equal(key, p.last) {
		return false
	}
	p.g.hub.queue(change{event: "status", snap: snap})
	return true
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
			g.hub.send(Event{Name: c.event, Data: data}, g.log())
		}
	}
}

// render returns st as the status event carries it, and the same with
// its ages zeroed, which say nothing changed.
func (p *publisher) render(st Status) (data, key []byte) {
	p.g.hub.mu.Lock()
	view := p.g.hub.view
	p.g.hub.mu.Unlock()
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
