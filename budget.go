package turnstile

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dustin/go-humanize"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

// A request that may wait for the GPU reads its body into memory first, so
// that Go's server notices a client that leaves while it waits (see
// waitBodyLimit). Without a bound on the total, enough waiting requests with
// large bodies exhaust memory. The wait budget is that bound: per
// turnstile, the buffered bytes stay under wait_buffer_limit, and
// optionally the number of waiting requests under max_waiting. A request
// that would go past either is not buffered; it gets the busy answer at
// once. Requests already waiting keep their place.
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

// discardLimit bounds how much of a refused request's body is read (and
// dropped) so that the client gets the busy answer.
const discardLimit = 64 << 20

// chunked bodies (no Content-Length) are read in chunks reserved one at a
// time, growing from firstChunk to maxChunk.
const (
	firstChunk = 1 << 10
	maxChunk   = 1 << 20
)

// waitBudget counts what the requests waiting for one GPU hold.
type waitBudget struct {
	bytes   atomic.Int64 // body bytes held in memory now
	peak    atomic.Int64 // the most bytes ever held at once
	waiting atomic.Int64 // requests admitted to wait whose wait has not ended

	// A warning is logged when a limit turns the first request away, and
	// again only once the budget has fallen back below half the limit: one
	// line per burst, not one per request.
	bytesWarned, waitingWarned atomic.Bool
}

// reserve takes n bytes from the budget if that keeps it within limit.
func (b *waitBudget) reserve(n, limit int64) bool {
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
func (b *waitBudget) raisePeak(v int64) {
	for p := b.peak.Load(); v > p; p = b.peak.Load() {
		if b.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

// give returns n bytes to the budget.
func (b *waitBudget) give(n, limit int64) {
	if left := b.bytes.Add(-n); left < limit/2 {
		b.bytesWarned.Store(false)
	}
}

// enter takes a place among the waiting requests, within max (0: no cap).
func (b *waitBudget) enter(max int) bool {
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

func (b *waitBudget) leave(max int) {
	if left := b.waiting.Add(-1); left < int64(max)/2 || max <= 0 {
		b.waitingWarned.Store(false)
	}
}

func (b *waitBudget) status(c *config) WaitBufferStatus {
	st := WaitBufferStatus{Bytes: b.bytes.Load(), Peak: b.peak.Load()}
	if c != nil {
		st.Limit = c.WaitBuffer
	}
	return st
}

// overloadError says which limit turned a request away.
type overloadError struct {
	option  string // wait_buffer_limit or max_waiting
	started bool   // part of the body had been read
}

func (e *overloadError) Error() string { return "gpu_turnstile: " + e.option + " reached" }

// waitTicket is a request's place among the waiting requests and the body
// it buffered for the wait. The caller calls stopWaiting when the wait ends
// and done (deferred) when the request ends.
type waitTicket struct {
	ts      *turnstile
	body    *waitBody // nil for a request without a body
	waiting bool
}

// admitWait prepares a request to wait for the GPU: it takes a place among
// the waiting requests (max_waiting) and reads up to bodyLimit bytes of
// the body into memory, reserving each part from the budget before reading
// it, by deadline (the end of the request's wait). If a limit is reached
// it returns an *overloadError and holds nothing; past the deadline,
// admit.ErrLate (the read cut, nothing held); a body that cannot be read
// gives the error to answer with.
func (ts *turnstile) admitWait(w http.ResponseWriter, r *http.Request, c *config, bodyLimit int64, deadline time.Time) (*waitTicket, error) {
	b := &ts.budget
	if !b.enter(c.MaxWaiting) {
		return nil, ts.overload(c, "max_waiting")
	}
	t := &waitTicket{ts: ts, waiting: true}
	body, err := ts.readBy(w, r, c, min(bodyLimit, c.WaitBuffer), deadline)
	if err != nil {
		t.stopWaiting()
		return nil, err
	}
	t.body = body
	return t, nil
}

// stopWaiting gives back the request's place among the waiting requests.
// Its body's bytes stay counted until the upstream has read them.
func (t *waitTicket) stopWaiting() {
	if t.waiting {
		t.waiting = false
		t.ts.budget.leave(t.ts.cfg().MaxWaiting)
	}
}

// done gives back whatever the request still holds.
func (t *waitTicket) done() {
	t.stopWaiting()
	if t.body != nil {
		t.body.release()
	}
}

// overload counts and logs a request turned away by a limit.
func (ts *turnstile) overload(c *config, option string) *overloadError {
	b := &ts.budget
	warned := &b.bytesWarned
	if option == "max_waiting" {
		warned = &b.waitingWarned
	}
	if warned.CompareAndSwap(false, true) {
		ts.log().Warn("requests that would wait for the GPU are answered busy until the waiting ones drain",
			zap.String("limit", option), zap.Int64("wait_buffer_bytes", b.bytes.Load()),
			zap.Int64("wait_buffer_limit", c.WaitBuffer), zap.Int64("waiting", b.waiting.Load()),
			zap.Int("max_waiting", c.MaxWaiting))
	}
	ts.metrics.busyOverload.Inc()
	return &overloadError{option: option}
}

// refuseWait answers a request that admitWait did not admit. One turned
// away by a limit gets the busy answer at once, in the error shape of the
// API it spoke, with Retry-After: an LLM request as in reject mode
// (llm_busy_status), an image job (image, nil for LLM) in its engine's
// error shape with 503.
// Any other error (an unreadable body) is returned for Caddy to answer.
// The dropped rest of the body is read by deadline too.
func (ts *turnstile) refuseWait(w http.ResponseWriter, r *http.Request, c *config, err error, image gpu.ImageEngine, deadline time.Time) error {
	var o *overloadError
	if !errors.As(err, &o) {
		return err
	}
	// Many clients send the whole body before they read the answer; if
	// the connection closed under them they would see a broken pipe, not
	// the busy answer. So the rest is read and dropped (never kept), up to
	// discardLimit; past that the connection is closed after the answer.
	// A client that asked to be told first (Expect: 100-continue) and
	// has not been sent on is answered without its body, on a connection
	// that then closes (otherwise Go's server would try to read the body
	// it never asked for, and the answer would wait for the client's
	// expect timeout).
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") && !o.started {
		if r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
	} else if r.Body != nil {
		drain := func() error { _, err := io.CopyN(io.Discard, r.Body, discardLimit); return err }
		if admit.Read(deadline, drain, admit.Cutter(w)) == admit.ErrLate {
			admit.CloseAfter(w, r) // the rest is not read
		}
	}
	retry := retryAfterSeconds(ts.retryAfter(c))
	var msg string
	if o.option == "max_waiting" {
		msg = fmt.Sprintf("gpu_turnstile: %d requests already wait for the GPU (max_waiting); retry after %ds", c.MaxWaiting, retry)
	} else {
		msg = fmt.Sprintf("gpu_turnstile: the requests waiting for the GPU already hold %s of request bodies (wait_buffer_limit); retry after %ds",
			humanize.IBytes(uint64(c.WaitBuffer)), retry)
	}
	if image == nil {
		httpapi.Write(w, httpapi.ShapeOf(cleanPath(r), ""), httpapi.Error{Status: c.BusyStatus, Code: "gpu_busy", Message: msg, RetryAfter: retry})
		return nil
	}
	return writeImageError(w, image, httpapi.Error{Status: http.StatusServiceUnavailable, Code: "gpu_busy", Message: msg, RetryAfter: retry})
}
