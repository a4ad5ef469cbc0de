package gpu

import (
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// historySize is how many entries each ring keeps: at a few bytes an
// entry, memory stays fixed whatever the uptime.
const historySize = 512

// history keeps the recent past of one turnstile in fixed-size rings: state
// transitions, finished jobs, and timed steps (unload, free, warm). The
// status page and GET .../history read it. It is part of the GPU's state,
// under g.mu.
type history struct {
	transitions ring[TransitionEntry]
	jobs        ring[JobEntry]
	events      ring[EventEntry]
}

type TransitionEntry struct {
	At   time.Time `json:"at"`
	From string    `json:"from"`
	To   string    `json:"to"`
}

type JobEntry struct {
	PromptID string    `json:"prompt_id,omitempty"`
	Engine   string    `json:"engine,omitempty"`
	Source   string    `json:"source"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Outcome  string    `json:"outcome"`
}

type EventEntry struct {
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"` // unload, free, wake, warm, prepare, interrupt
	Seconds float64   `json:"seconds"`
	Detail  string    `json:"detail,omitempty"`
}

func newHistory(size int) history {
	return history{
		transitions: newRing[TransitionEntry](size),
		jobs:        newRing[JobEntry](size),
		events:      newRing[EventEntry](size),
	}
}

// idleGapMerge is the shortest idle gap between two LLM periods that the
// timeline keeps; shorter ones (one chat after another) would flood it.
const idleGapMerge = time.Second

func (h *history) addTransition(at time.Time, from, to lock.State) {
	if last, ok := h.transitions.last(); ok && from == lock.Idle && to == lock.LLM &&
		last.From == "llm" && last.To == "idle" && at.Sub(last.At) < idleGapMerge {
		h.transitions.pop()
		return
	}
	h.transitions.add(TransitionEntry{At: at, From: from.String(), To: to.String()})
}

// addJob records a job's end, and sends it to the live events.
func (g *GPU) addJob(j JobEntry) {
	g.mu.Lock()
	g.history.jobs.add(j)
	g.recordedLocked("job", j)
	g.mu.Unlock()
}

// addEvent records a timed step, and sends it to the live events.
func (g *GPU) addEvent(kind string, took time.Duration, detail string) {
	e := EventEntry{At: time.Now(), Kind: kind, Seconds: took.Seconds(), Detail: detail}
	g.mu.Lock()
	g.history.events.add(e)
	g.recordedLocked("step", e)
	g.mu.Unlock()
}

// HistoryView is the JSON form of a history.
type HistoryView struct {
	Transitions []TransitionEntry `json:"transitions"`
	Jobs        []JobEntry        `json:"jobs"`
	Events      []EventEntry      `json:"events"`
}

// view returns the entries newer than since (all if zero), oldest first.
func (h *history) view(since time.Time) HistoryView {
	return HistoryView{
		Transitions: filter(h.transitions.items(), func(e TransitionEntry) bool { return e.At.After(since) }),
		Jobs: filter(h.jobs.items(), func(e JobEntry) bool {
			return e.Started.Add(time.Duration(e.Seconds * float64(time.Second))).After(since)
		}),
		Events: filter(h.events.items(), func(e EventEntry) bool { return e.At.After(since) }),
	}
}

// recentJobSeconds returns the durations of the last n successful jobs.
func (h *history) recentJobSeconds(n int) []float64 {
	var out []float64
	items := h.jobs.items()
	for i := len(items) - 1; i >= 0 && len(out) < n; i-- {
		if items[i].Outcome == "success" {
			out = append(out, items[i].Seconds)
		}
	}
	return out
}

func filter[T any](items []T, keep func(T) bool) []T {
	out := items[:0]
	for _, it := range items {
		if keep(it) {
			out = append(out, it)
		}
	}
	return out
}

// ring is a fixed-size circular buffer; once full, each new entry
// replaces the oldest.
type ring[T any] struct {
	buf   []T
	start int // index of the oldest entry
	n     int // entries held
}

func newRing[T any](size int) ring[T] { return ring[T]{buf: make([]T, size)} }

func (r *ring[T]) add(v T) {
	if r.n < len(r.buf) {
		r.buf[(r.start+r.n)%len(r.buf)] = v
		r.n++
		return
	}
	r.buf[r.start] = v
	r.start = (r.start + 1) % len(r.buf)
}

func (r *ring[T]) last() (T, bool) {
	if r.n == 0 {
		var zero T
		return zero, false
	}
	return r.buf[(r.start+r.n-1)%len(r.buf)], true
}

// pop removes the newest entry.
func (r *ring[T]) pop() {
	if r.n > 0 {
		r.n--
	}
}

// items returns a copy of the entries, oldest first.
func (r *ring[T]) items() []T {
	out := make([]T, r.n)
	for i := range out {
		out[i] = r.buf[(r.start+i)%len(r.buf)]
	}
	return out
}
