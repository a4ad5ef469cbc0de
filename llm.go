package turnstile

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

// waitBodyLimit bounds how much of a request body is read into memory
// before the request waits for the GPU. Reading the body to its end is
// what lets Go's server notice a client that goes away while waiting; a
// larger body waits with its rest unread (llm_wait_timeout still bounds
// the wait). What all waiting requests buffer together is bounded by
// wait_buffer_limit (budget.go).
const waitBodyLimit = 8 << 20

// statusClientClosed is the status Caddy logs for a client that went away.
const statusClientClosed = 499

// clientGone is the error for a request whose client went away; when, as
// in "after waiting 2s for the GPU", is formatted from format and args.
func clientGone(format string, args ...any) error {
	return caddyhttp.Error(statusClientClosed, fmt.Errorf("gpu_turnstile: client went away "+format, args...))
}

// serveLLM serves a request that shares the GPU with other LLM requests.
func (h *Handler) serveLLM(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	ts := h.ts
	// Fast path: the GPU is free for LLM use; no buffering, no allocation.
	if ts.lock.TryAcquireShared() {
		ts.metrics.waitLLM.Observe(0)
		return ts.proxyLLM(w, r, next)
	}
	if h.DuringJob != "" && ts.ImageJobRunning() {
		return h.serveDuringJob(w, r, next)
	}
	c := ts.cfg()
	wait := c.LLMWait
	if c.Reject {
		// Right after start-up the GPU is held only while the engines
		// are probed (is work queued? is memory held?); that is no reason
		// to turn requests away, so they wait for the answer.
		if !ts.Probing() {
			ts.metrics.busyReject.Inc()
			return ts.writeBusy(w, r, c, "reject")
		}
		wait = c.GPU.ProbeTimeout
	}
	// The wait counts from the request's arrival: a body that trickles
	// in is waited for within it, not before it.
	deadline := admit.Arrival(r).Add(wait)
	ticket, err := ts.admitWait(w, r, c, waitBodyLimit, deadline)
	if errors.Is(err, admit.ErrLate) {
		return ts.waitedTooLong(w, r, c)
	}
	if err != nil {
		return ts.refuseWait(w, r, c, err, nil, deadline)
	}
	defer ticket.done()
	start := time.Now()
	ctx, cancel := context.WithDeadline(gpu.WithWaiter(r.Context(), waiterOf(r, ticket, true)), deadline)
	err = ts.AcquireShared(ctx)
	cancel()
	ticket.stopWaiting()
	waited := time.Since(start)
	if err != nil {
		if r.Context().Err() != nil {
			return clientGone("after waiting %v for the GPU", waited.Round(time.Millisecond))
		}
		return ts.waitedTooLong(w, r, c)
	}
	ts.metrics.waitLLM.Observe(waited.Seconds())
	return ts.proxyLLM(w, r, next)
}

// proxyLLM calls next with the shared place the request holds, and gives
// it back however next ends. reverse_proxy aborts the handler with a
// panic when the answer cannot be copied to a client that has gone: that
// too is an abnormal end, after which the next emptying of the LLM
// engines is confirmed more strictly.
func (ts *turnstile) proxyLLM(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	returned := false
	defer func() {
		if !returned {
			ts.NoteLLMEnd(r.Context(), errAnswerCut)
		}
		ts.lock.ReleaseShared()
	}()
	err := next.ServeHTTP(w, r)
	returned = true
	ts.NoteLLMEnd(r.Context(), err)
	return err
}

// serveDuringJob serves an LLM request made from within a running image
// job (as the operator's matcher says), which must not wait for that job.
func (h *Handler) serveDuringJob(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if h.DuringJob == "allow" {
		h.ts.log().Info("LLM request let through during an image job (during_job allow)", zap.String("path", r.URL.Path))
		return next.ServeHTTP(w, r)
	}
	msg := "gpu_turnstile: this LLM request comes from within a running image job and would wait for that job to end, which waits for it: refused (during_job reject)"
	httpapi.Write(w, httpapi.ShapeOf(cleanPath(r), ""), httpapi.Error{Status: http.StatusConflict, Code: "gpu_deadlock", Message: msg})
	return nil
}

// waitedTooLong answers an LLM request whose wait, its body's reading
// included, reached llm_wait_timeout, on a connection that then closes:
// a body cut short leaves the rest of it unread.
func (ts *turnstile) waitedTooLong(w http.ResponseWriter, r *http.Request, c *config) error {
	ts.metrics.busyTimeout.Inc()
	ts.log().Warn("LLM request waited llm_wait_timeout for the GPU; answered busy",
		zap.Duration("llm_wait_timeout", c.LLMWait), zap.String("path", r.URL.Path))
	admit.CloseAfter(w, r)
	return ts.writeBusy(w, r, c, "timeout")
}

// writeBusy answers an LLM request that cannot have the GPU now, in the
// error format of the API the client spoke, with Retry-After.
func (ts *turnstile) writeBusy(w http.ResponseWriter, r *http.Request, c *config, reason string) error {
	retry := retryAfterSeconds(ts.retryAfter(c))
	state := ts.lock.State().String()
	why := "an image job"
	if state == "hold" {
		why = "an external hold"
	}
	msg := fmt.Sprintf("gpu_turnstile: the GPU is busy with %s; retry after %ds", why, retry)
	if reason == "timeout" {
		msg = fmt.Sprintf("gpu_turnstile: waited %v for the GPU, busy with %s; retry after %ds", c.LLMWait, why, retry)
	}
	httpapi.Write(w, httpapi.ShapeOf(cleanPath(r), ""), httpapi.Error{Status: c.BusyStatus, Code: "gpu_busy", Message: msg, RetryAfter: retry})
	return nil
}

// retryAfter is the Retry-After of a busy answer: busy_retry_after, or
// with auto an estimate of when the GPU is free for LLM use, bounded by
// busy_retry_after.
func (ts *turnstile) retryAfter(c *config) time.Duration {
	if !c.BusyRetryAfterAuto {
		return c.RetryAfter
	}
	wait := ts.EstimateWait(tcfg.DefaultBusyRetryAfter)
	return min(max(wait, time.Second), c.RetryAfter)
}
