package gpu

import (
	"context"
	"fmt"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// TryLLM takes a shared place on the GPU for an LLM request if one is
// free now, without waiting: the fast path, an atomic operation or two
// and no allocation. ReleaseLLM gives it back.
func (g *GPU) TryLLM() bool {
	if !g.lock.TryAcquireShared() {
		return false
	}
	g.kickLook()
	return true
}

// ReleaseLLM gives back a shared place taken by TryLLM, WaitLLM or
// AcquireShared.
func (g *GPU) ReleaseLLM() {
	g.lock.ReleaseShared()
	g.kickLook() // what the request loaded is seen
}

// llmWait is how long an LLM request that found the GPU busy waits for
// it: wait (llm_wait_timeout); in reject mode none (ok is false: it is
// answered busy at once), except right after start-up, while the GPU is
// held only for the engines' probes (is work queued? is memory held?):
// that is no reason to turn requests away, so they wait, up to
// probe_timeout, for the answer.
func (g *GPU) llmWait(reject bool, wait time.Duration) (_ time.Duration, ok bool) {
	if !reject {
		return wait, true
	}
	c := g.cfg()
	if c == nil || !g.Probing() {
		return 0, false
	}
	return c.ProbeTimeout, true
}

// WaitLLM waits, until deadline, for a shared place on the GPU for an LLM
// request whose context is ctx, and returns how long it waited. Waited,
// if not nil, is called once the wait has ended. The error is nil (the
// place is the caller's, ReleaseLLM gives it back), a *ClientGoneError,
// or ErrWaitTimeout.
func (g *GPU) WaitLLM(ctx context.Context, deadline time.Time, waited func()) (time.Duration, error) {
	start := time.Now()
	wctx, cancel := context.WithDeadline(ctx, deadline)
	err := g.AcquireShared(wctx)
	cancel()
	if waited != nil {
		waited()
	}
	took := time.Since(start)
	switch {
	case err == nil:
		g.kickLook()
		return took, nil
	case ctx.Err() != nil:
		return took, &ClientGoneError{While: fmt.Sprintf("after waiting %v for the GPU", took.Round(time.Millisecond))}
	}
	return took, ErrWaitTimeout
}

// busyCause names what keeps LLM requests off the GPU, for a busy answer.
func (g *GPU) busyCause() string {
	if g.lock.State() == lock.Hold {
		return "an external hold"
	}
	return "an image job"
}

// WaitCause names what keeps a waiting LLM request off the GPU now (as
// a busy answer names it), for the notices it is sent while it waits
// (wait_notice).
func (g *GPU) WaitCause() string { return g.busyCause() }

// WaitOutlook is what a waiting LLM request can expect now (Outlook), for
// its notices: its place in line and, if known, its predicted wait.
func (g *GPU) WaitOutlook() (position int, wait time.Duration, known bool) {
	o := g.Outlook(false)
	return o.Position, o.Wait, o.Known
}

// RetryAfter is the Retry-After of a busy answer to an LLM request:
// fixed (busy_retry_after), or with auto the predicted wait of an LLM
// request arriving now (Outlook), rounded up to the second, between a
// second and fixed. Before anything was learned to predict it from, it
// is EstimateWait's (def standing for a job).
func (g *GPU) RetryAfter(auto bool, fixed, def time.Duration) time.Duration {
	return g.retryAfter(false, auto, fixed, def)
}

// ImageRetryAfter is RetryAfter for an image job arriving now.
func (g *GPU) ImageRetryAfter(auto bool, fixed, def time.Duration) time.Duration {
	return g.retryAfter(true, auto, fixed, def)
}

func (g *GPU) retryAfter(image, auto bool, fixed, def time.Duration) time.Duration {
	if !auto {
		return fixed
	}
	wait := g.EstimateWait(def)
	if o := g.Outlook(image); o.Known {
		wait = o.Wait.Truncate(time.Second)
		if wait < o.Wait {
			wait += time.Second
		}
	}
	return min(max(wait, time.Second), fixed)
}
