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
func (g *GPU) ReleaseLLM() { g.lock.ReleaseShared() }

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

// RetryAfter is the Retry-After of a busy answer: fixed
// (busy_retry_after), or with auto an estimate of when the GPU is free
// for LLM use (def standing for a job before any has ended), between a
// second and fixed.
func (g *GPU) RetryAfter(auto bool, fixed, def time.Duration) time.Duration {
	if !auto {
		return fixed
	}
	return min(max(g.EstimateWait(def), time.Second), fixed)
}
