package turnstile

import (
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
// wait_buffer_limit (internal/admit).
const waitBodyLimit = 8 << 20

// serveLLM serves a request that shares the GPU with other LLM requests.
func (h *Handler) serveLLM(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	ts := h.ts
	// Fast path: the GPU is free for LLM use; no buffering, no allocation.
	if ts.TryLLM() {
		ts.metrics.waitLLM.Observe(0)
		return ts.proxyLLM(w, r, next)
	}
	if h.DuringJob != "" && ts.ImageJobRunning() {
		return h.serveDuringJob(w, r, next)
	}
	c := ts.cfg()
	wait, ok := ts.LLMWait(c.Reject, c.LLMWait)
	if !ok {
		ts.metrics.busyReject.Inc()
		return ts.writeBusy(w, r, c, "")
	}
	// The wait counts from the request's arrival: a body that trickles
	// in is waited for within it, not before it.
	deadline := admit.Arrival(r).Add(wait)
	ticket, err := ts.budget.Admit(w, r, ts.limits(c, waitBodyLimit), deadline)
	if err != nil {
		return ts.notAdmitted(w, r, c, nil, err, deadline)
	}
	defer ticket.Done()
	waited, err := ts.WaitLLM(gpu.WithWaiter(r.Context(), ticket.Waiter(r, true)), deadline, ticket.StopWaiting)
	if err != nil {
		return ts.notAdmitted(w, r, c, nil, err, deadline)
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
			ts.NoteLLMEnd(r.Context(), gpu.ErrAnswerCut)
		}
		ts.ReleaseLLM()
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

// writeBusy answers an LLM request that cannot have the GPU now, in the
// error format of the API the client spoke, with Retry-After; waited is
// how long it waited ("" if it did not).
func (ts *turnstile) writeBusy(w http.ResponseWriter, r *http.Request, c *config, waited string) error {
	retry := retryAfterSeconds(ts.retryAfter(c))
	msg := fmt.Sprintf("gpu_turnstile: the GPU is busy with %s; retry after %ds", ts.BusyCause(), retry)
	if waited != "" {
		msg = fmt.Sprintf("gpu_turnstile: waited %s for the GPU, busy with %s; retry after %ds", waited, ts.BusyCause(), retry)
	}
	httpapi.Write(w, httpapi.ShapeOf(cleanPath(r), ""), httpapi.Error{Status: c.BusyStatus, Code: "gpu_busy", Message: msg, RetryAfter: retry})
	return nil
}

// retryAfter is the Retry-After of a busy answer (gpu.RetryAfter).
func (ts *turnstile) retryAfter(c *config) time.Duration {
	return ts.GPU.RetryAfter(c.BusyRetryAfterAuto, c.RetryAfter, tcfg.DefaultBusyRetryAfter)
}
