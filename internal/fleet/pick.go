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
	// Sent is true when this front has the request's model in flight to
	// it, or had a moment ago: loaded or loading there, whatever its
	// status says yet (an engine lists a model once it has loaded).
	Sent bool
	// Capacity is the most models it has been seen with at once (0 if
	// none yet).
	Capacity int
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

// Policy is what Pick weighs beside the candidates.
type Policy struct {
	Now time.Time
	// KeepForChats is how much later an image job would rather start
	// behind another host's render than take a host kept for chats
	// (keptForChats).
	KeepForChats time.Duration
}

// Why says what decided a pick, for the picks' metric.
type Why uint8

// What decided a pick.
const (
	WhyFallback Why = iota // no host's state decided: the fallback policy chose
	WhyPinned              // the host the image client is kept on
	WhyReady               // LLM: the model loaded (or on its way); image: an idle host
	WhyRoom                // LLM: a host with room for the model, which loads it
	WhyLater               // the earliest predicted start
	WhyUnknown             // a host of unknown state, beside known ones
	WhyRetry               // a host already tried, the only one left
)

var whyNames = [...]string{"fallback", "pinned", "ready", "room", "later", "unknown", "retry"}

func (w Why) String() string { return whyNames[w] }

// Pick chooses the upstream for q among cs: its index, or None when the
// fallback policy is to choose (no candidate's state is known, or q is
// neither LLM nor image work and has no pin). pin is the PinCookie value
// of the host q's client is kept on ("" if none). An upstream whose
// health checks fail is never chosen; one already tried for q only when
// every other is. It does no I/O and allocates nothing.
func (p Policy) Pick(q *Request, cs []Candidate, pin string) int {
	i, _ := p.PickWhy(q, cs, pin)
	return i
}

// PickWhy is Pick, and what decided it.
func (p Policy) PickWhy(q *Request, cs []Candidate, pin string) (int, Why) {
	if pin != "" && q.Class != route.LLM {
		for i := range cs {
			if cs[i].Up && cs[i].Pin == pin && !tried(q, i) {
				return i, WhyPinned
			}
		}
	}
	if q.Class != route.LLM && q.Class != route.Image && pin == "" && q.Client == "" && q.Pin == "" {
		return None, WhyFallback
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
			r = p.imageRank(q, cs, i)
		}
		if tried(q, i) {
			r.tier = tierTried
		}
		if r.less(bestRank) {
			best, bestRank = i, r
		}
	}
	if best == None || bestRank.tier >= tierUnknown && !anyKnown(cs) {
		return None, WhyFallback
	}
	if bestRank.tier == tierRoom && q.Class == route.LLM {
		return fewestEvictions(q, cs), WhyRoom
	}
	return best, Why(int(WhyReady) + bestRank.tier - tierReady)
}

// fewestEvictions is, among the candidates with room for q's model, the
// one where loading it evicts least (by evictions, where memory figures
// do not say it fits), then by llmRank. Only a model that must load cold
// pays for this look at every host's models.
func fewestEvictions(q *Request, cs []Candidate) int {
	best, bestRank := None, rank{tier: math.MaxInt}
	for i := range cs {
		if !cs[i].Up || tried(q, i) {
			continue
		}
		r := llmRank(q, &cs[i])
		if r.tier != tierRoom {
			continue
		}
		if !cs[i].Host.Memory {
			r.a = evictions(cs, i)
		}
		if r.less(bestRank) {
			best, bestRank = i, r
		}
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

// llmRank ranks c for an LLM request: the model loaded (or on its way
// there from this front) and nothing in the way; else idle or llm with
// room for it (fewestEvictions orders those), then idle before busy, then
// the fewest in flight; else the earliest predicted start (now for one that must only
// unload; those with none after, the shortest queue first); unknown
// last.
func llmRank(q *Request, c *Candidate) rank {
	h := c.Host
	if h == nil || !h.LLMUp {
		return rank{tier: tierUnknown, a: int64(c.Requests)}
	}
	load := int64(h.LLMInflight + c.Requests)
	if !h.blocked() {
		if c.Sent || h.Loaded(q.Model) {
			return rank{tier: tierReady, a: load}
		}
		if h.Memory && !h.Fits(q.Model) {
			// No room: it unloads what it must, with nothing in the way.
			return rank{tier: tierLater, a: 0, b: load}
		}
		busy := int64(1)
		if h.State == "idle" {
			busy = 0
		}
		return rank{tier: tierRoom, b: busy<<32 | load}
	}
	return rank{tier: tierLater, a: startKey(h.LLMStart), b: int64(h.LLMWaiting+h.HoldWaiting+h.ImageWaiting) + load}
}

// imageRank ranks cs[i] for an image job (or a request of an image
// client): idle first, the one that last ran the workflow before the
// others, then the one whose models are fewest and most often loaded
// elsewhere (an image job empties the host's LLM engines); else the one
// that last ran it, then the earliest predicted start (a host in llm with
// nothing waiting starts once it has unloaded: now), a host kept for
// chats starting KeepForChats from now; unknown last.
func (p Policy) imageRank(q *Request, cs []Candidate, i int) rank {
	c := &cs[i]
	h := c.Host
	if h == nil || !h.ImageUp {
		return rank{tier: tierUnknown, a: int64(c.Requests)}
	}
	other := int64(1)
	if h.Ran(q.Workflow) {
		other = 0
	}
	cost := evictions(cs, i)<<16 | int64(c.Requests)
	if keptForChats(cs, i) {
		return rank{tier: tierLater, a: other<<62 | min(p.Now.Add(p.KeepForChats).UnixNano(), 1<<62-1), b: cost}
	}
	if h.State == "idle" && !h.ImagePending && h.HoldWaiting == 0 && h.LLMWaiting == 0 {
		return rank{tier: tierReady, a: other, b: cost}
	}
	start := startKey(h.ImageStart)
	if h.State == "llm" && !h.ImagePending && h.HoldWaiting == 0 {
		start = 0
	}
	return rank{tier: tierLater, a: other<<62 | min(start, 1<<62-1), b: cost + int64(h.ImageWaiting+h.HoldWaiting)}
}

// startKey orders predicted starts: a known one by its time, none after
// every known one.
func startKey(t time.Time) int64 {
	if t.IsZero() {
		return math.MaxInt64 >> 1
	}
	return t.UnixNano()
}
