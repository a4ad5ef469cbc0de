package fleet

import (
	"math"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// Candidate is one upstream as Pick sees it.
type Candidate struct {
	Host     *Host  // its last status; nil when unknown (never seen, gone or stale)
	Up       bool   // its health checks pass (Caddy's Available)
	Requests int    // requests in flight to it through this front
	Pin      string // its PinCookie value
}

// None is what Pick returns when no upstream's state decides: the
// fallback policy chooses.
const None = -1

// tiers, best first.
const (
	tierReady   = iota // LLM: model loaded, nothing in the way; image: idle
	tierRoom           // LLM: idle or llm with room for the model
	tierLater          // ordered by the predicted start
	tierUnknown        // its state is not known
	tierTried          // already tried for this request
)

// rank orders candidates: lower is better, field by field.
type rank struct {
	tier int
	a, b int64
}

func (r rank) less(o rank) bool {
	switch {
	case r.tier != o.tier:
		return r.tier < o.tier
	case r.a != o.a:
		return r.a < o.a
	}
	return r.b < o.b
}

// Pick chooses the upstream for q among cs: its index, or None when the
// fallback policy is to choose (no candidate's state is known, or q is
// neither LLM nor image work and has no pin). pin is the PinCookie value
// of the host q's client is kept on ("" if none). An upstream whose
// health checks fail is never chosen; one already tried for q only when
// every other is. It does no I/O and allocates nothing.
func Pick(q *Request, cs []Candidate, pin string) int {
	if pin != "" && q.Class != route.LLM {
		for i := range cs {
			if cs[i].Up && cs[i].Pin == pin && !tried(q, i) {
				return i
			}
		}
	}
	if q.Class != route.LLM && q.Class != route.Image && pin == "" && q.Client == "" && q.Pin == "" {
		return None
	}
	best, bestRank := None, rank{tier: math.MaxInt}
	for i := range cs {
		c := &cs[i]
		if !c.Up {
			continue
		}
		var r rank
		if q.Class == route.LLM {
			r = llmRank(q, c)
		} else {
			r = imageRank(q, c)
		}
		if tried(q, i) {
			r.tier = tierTried
		}
		if r.less(bestRank) {
			best, bestRank = i, r
		}
	}
	if best != None && bestRank.tier >= tierUnknown && !anyKnown(cs) {
		return None
	}
	return best
}

func tried(q *Request, i int) bool { return i < 64 && q.Tried&(1<<uint(i)) != 0 }

// anyKnown reports whether some available candidate's state is known.
func anyKnown(cs []Candidate) bool {
	for i := range cs {
		if cs[i].Up && cs[i].Host != nil {
			return true
		}
	}
	return false
}

// llmRank ranks c for an LLM request: the model loaded and nothing in
// the way; else idle or llm with room for it (the fewest in flight
// first); else the earliest predicted start (now for one that must only
// unload; those with none after, the shortest queue first); unknown last.
func llmRank(q *Request, c *Candidate) rank {
	h := c.Host
	if h == nil || !h.LLMUp {
		return rank{tier: tierUnknown, a: int64(c.Requests)}
	}
	load := int64(h.LLMInflight + c.Requests)
	if !h.blocked() {
		if h.Loaded(q.Model) {
			return rank{tier: tierReady, a: load}
		}
		if (h.State == "idle" || h.State == "llm") && h.Fits(q.Model) {
			busy := int64(1)
			if h.State == "idle" {
				busy = 0
			}
			return rank{tier: tierRoom, a: busy, b: load}
		}
		// No room: it unloads what it must, with nothing in the way.
		return rank{tier: tierLater, a: 0, b: load}
	}
	return rank{tier: tierLater, a: startKey(h.LLMStart), b: int64(h.LLMWaiting+h.ImageWaiting+h.HoldWaiting) + load}
}

// imageRank ranks c for an image job (or a request of an image client):
// idle first, the one that last ran the workflow before the others; else
// the one that last ran it, then the earliest predicted start (a host
// in llm with nothing waiting starts once it has unloaded: now); unknown
// last.
func imageRank(q *Request, c *Candidate) rank {
	h := c.Host
	if h == nil || !h.ImageUp {
		return rank{tier: tierUnknown, a: int64(c.Requests)}
	}
	other := int64(1)
	if h.Ran(q.Workflow) {
		other = 0
	}
	if h.State == "idle" && !h.ImagePending && h.HoldWaiting == 0 && h.LLMWaiting == 0 {
		return rank{tier: tierReady, a: other, b: int64(c.Requests)}
	}
	start := startKey(h.ImageStart)
	if h.State == "llm" && !h.ImagePending && h.HoldWaiting == 0 {
		start = 0
	}
	return rank{tier: tierLater, a: other<<62 | min(start, 1<<62-1), b: int64(h.ImageWaiting+h.HoldWaiting) + int64(c.Requests)}
}

// startKey orders predicted starts: a known one by its time, none after
// every known one.
func startKey(t time.Time) int64 {
	if t.IsZero() {
		return math.MaxInt64 >> 1
	}
	return t.UnixNano()
}
