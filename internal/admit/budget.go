package admit

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"go.uber.org/zap"
)

// A request that may wait for the GPU reads its body into memory first, so
// that Go's server notices a client that leaves while it waits. Without a
// bound on the total, enough waiting requests with large bodies exhaust
// memory. The wait budget is that bound: per turnstile, the buffered bytes
// stay under wait_buffer_limit, and optionally the number of waiting
// requests under max_waiting. A request that would go past either is not
// buffered; it gets the busy answer at once. Requests already waiting keep
// their place.
//
// The budget is per turnstile, not per process: one GPU's queue filling up
// does not turn away the requests for another GPU, and the process's total
// is the sum of the limits its turnstiles were given.
//
// A body's bytes are reserved before they are read and stay counted while
// they are in memory on the turnstile's behalf: through the wait and until
// the upstream has read them (for an image job, also during Ollama's
// unload), or the request ends. Counting only the wait itself would let
// requests just admitted (their bodies still referenced while they are
// forwarded) and new waiters each fill the limit, twice it in all.
//
// The LLM fast path (the GPU is free) never reaches any of this.

// Limits are what one request may take from a Budget.
type Limits struct {
	Buffer     int64       // wait_buffer_limit: all the waiting requests' bodies
	MaxWaiting int         // max_waiting; 0: no cap
	Body       int64       // this request's body, at most (the rest waits unread)
	Log        *zap.Logger // where a limit that turns requests away is told
}

// Budget counts what the requests waiting for one GPU hold. The zero
// value is an empty budget.
type Budget struct {
	bytes   atomic.Int64 // body bytes held in memory now
	peak    atomic.Int64 // the most bytes ever held at once
	waiting atomic.Int64 // requests admitted to wait whose wait has not ended

	// A warning is logged when a limit turns the first request away, and
	// again only once the budget has fallen back below half the limit: one
	// line per burst, not one per request.
	bytesWarned, waitingWarned atomic.Bool
}

// reserve takes n bytes from the budget if that keeps it within limit.
func (b *Budget) reserve(n, limit int64) bool {
	for {
		cur := b.bytes.Load()
		if cur+n > limit {
			return false
		}
		if b.bytes.CompareAndSwap(cur, cur+n) {
			b.raisePeak(cur + n)
			return true
		}
	}
}

// raisePeak records v as the high-water mark if it is one.
func (b *Budget) raisePeak(v int64) {
	for p := b.peak.Load(); v > p; p = b.peak.Load() {
		if b.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

// give returns n bytes to the budget.
func (b *Budget) give(n, limit int64) {
	if left := b.bytes.Add(-n); left < limit/2 {
		b.bytesWarned.Store(false)
	}
}

// enter takes a place among the waiting requests, within max (0: no cap).
func (b *Budget) enter(max int) bool {
	if max <= 0 {
		b.waiting.Add(1)
		return true
	}
	for {
		cur := b.waiting.Load()
		if cur >= int64(max) {
			return false
		}
		if b.waiting.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

func (b *Budget) leave(max int) {
	if left := b.waiting.Add(-1); left < int64(max)/2 || max <= 0 {
		b.waitingWarned.Store(false)
	}
}

// Bytes is what the waiting requests' bodies hold in memory now.
func (b *Budget) Bytes() int64 { return b.bytes.Load() }

// Peak is the most the waiting requests' bodies ever held at once.
func (b *Budget) Peak() int64 { return b.peak.Load() }

// Waiting is the number of requests admitted to wait whose wait has not
// ended.
func (b *Budget) Waiting() int64 { return b.waiting.Load() }

// OverloadError says which limit turned a request away.
type OverloadError struct {
	Option  string // wait_buffer_limit or max_waiting
	started bool   // part of the body had been read
}

func (e *OverloadError) Error() string { return "gpu_turnstile: " + e.Option + " reached" }

// Message is the busy answer's message for a request this limit turned
// away, with lim the limits it was given and retry its Retry-After.
func (e *OverloadError) Message(lim Limits, retry int) string {
	if e.Option == "max_waiting" {
		return fmt.Sprintf("gpu_turnstile: %d requests already wait for the GPU (max_waiting); retry after %ds", lim.MaxWaiting, retry)
	}
	return fmt.Sprintf("gpu_turnstile: the requests waiting for the GPU already hold %s of request bodies (wait_buffer_limit); retry after %ds",
		humanize.IBytes(uint64(lim.Buffer)), retry)
}

// Ticket is a request's place among the waiting requests and the body it
// buffered for the wait. The caller calls StopWaiting when the wait ends
// and Done (deferred) when the request ends.
type Ticket struct {
	b       *Budget
	max     int   // max_waiting
	body    *body // nil for a request without a body, else &wb
	waiting bool

	wb  body   // the body read, once body is set
	cut cutter // the cut of its reading at the deadline
}

// Admit prepares a request to wait for the GPU: it takes a place among
// the waiting requests (max_waiting) and reads up to lim.Body bytes of
// the body into memory, reserving each part from the budget before reading
// it, by deadline (the end of the request's wait). If a limit is reached
// it returns an *OverloadError and holds nothing; past the deadline,
// ErrLate (the read cut, nothing held); a body that cannot be read gives
// the error to answer with.
func (b *Budget) Admit(w http.ResponseWriter, r *http.Request, lim Limits, deadline time.Time) (*Ticket, error) {
	t := new(Ticket)
	if err := b.admit(t, w, r, lim, deadline); err != nil {
		return nil, err
	}
	return t, nil
}

// admit is Admit into t, a zero Ticket: one allocation for the request's
// place, its body and its reading.
func (b *Budget) admit(t *Ticket, w http.ResponseWriter, r *http.Request, lim Limits, deadline time.Time) error {
	if !b.enter(lim.MaxWaiting) {
		return b.overload(lim, "max_waiting", false)
	}
	t.b, t.max, t.waiting = b, lim.MaxWaiting, true
	if err := b.readBy(t, w, r, lim, deadline); err != nil {
		t.StopWaiting()
		return err
	}
	return nil
}

// StopWaiting gives back the request's place among the waiting requests.
// Its body's bytes stay counted until the upstream has read them.
func (t *Ticket) StopWaiting() {
	if t.waiting {
		t.waiting = false
		t.b.leave(t.max)
	}
}

// Done gives back whatever the request still holds.
func (t *Ticket) Done() {
	t.StopWaiting()
	if t.body != nil {
		t.body.release()
	}
}

// overload logs a request turned away by a limit, once per burst.
func (b *Budget) overload(lim Limits, option string, started bool) *OverloadError {
	warned := &b.bytesWarned
	if option == "max_waiting" {
		warned = &b.waitingWarned
	}
	if warned.CompareAndSwap(false, true) && lim.Log != nil {
		lim.Log.Warn("requests that would wait for the GPU are answered busy until the waiting ones drain",
			zap.String("limit", option), zap.Int64("wait_buffer_bytes", b.bytes.Load()),
			zap.Int64("wait_buffer_limit", lim.Buffer), zap.Int64("waiting", b.waiting.Load()),
			zap.Int("max_waiting", lim.MaxWaiting))
	}
	return &OverloadError{Option: option, started: started}
}
