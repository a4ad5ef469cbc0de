package turnstile

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
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
	c := ts.cfg()
	// Fast path: the GPU is free for LLM use; no buffering, no allocation.
	// With vram_admission the model a request names is read first.
	memory := c.GPU.Memory != nil
	if !memory && ts.TryLLM() {
		ts.metrics.waitLLM.Observe(0)
		return ts.proxyLLM(w, r, next, nil)
	}
	held := ts.TryLLM()
	if !held && h.DuringJob != "" && ts.ImageJobRunning() {
		return h.serveDuringJob(w, r, next)
	}
	wait, ok := ts.LLMWait(c.Reject, c.LLMWait)
	// Where a co_resident model may run beside an image job, a request
	// that cannot wait is still read for its model.
	besideOnly := !held && !ok && memory && len(c.GPU.Memory.CoResident) > 0
	switch {
	case held, besideOnly:
		wait = c.LLMWait // bounds the body's reading, and a wait for memory
	case !ok:
		ts.metrics.busyReject.Inc()
		return ts.writeBusy(w, r, c, 0)
	}
	// The wait counts from the request's arrival: a body that trickles
	// in is waited for within it, not before it.
	deadline := admit.Arrival(r).Add(wait)
	ticket, err := ts.budget.Admit(w, r, c.Limits(waitBodyLimit, ts.log()), deadline)
	if err != nil {
		if held {
			ts.ReleaseLLM()
		}
		return ts.notAdmitted(w, r, c, nil, err, deadline)
	}
	defer ticket.Done()
	return ts.serveLLMRead(w, r, next, c, ticket, held, besideOnly, deadline)
}

// serveLLMRead serves an LLM request whose body has been read: held says
// whether it holds a shared place already; besideOnly, that it cannot
// wait (reject mode) and goes beside the running image job or is
// answered busy.
func (ts *turnstile) serveLLMRead(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, c *config, ticket *admit.Ticket, held, besideOnly bool, deadline time.Time) error {
	waiter := ticket.Waiter(r, true)
	ctx := gpu.WithWaiter(r.Context(), waiter)
	switch {
	case besideOnly:
		ticket.StopWaiting()
		if beside := ts.TryBeside(waiter.Model); beside != nil {
			return ts.proxyLLM(w, r, next, beside)
		}
		ts.metrics.busyReject.Inc()
		return ts.writeBusy(w, r, c, 0)
	case !held:
		beside, waited, err := ts.WaitLLMFor(ctx, waiter.Model, deadline, ticket.StopWaiting)
		if err != nil {
			return ts.notAdmitted(w, r, c, nil, err, deadline)
		}
		ts.metrics.waitLLM.Observe(waited.Seconds())
		if beside != nil {
			return ts.proxyLLM(w, r, next, beside)
		}
	}
	if c.GPU.Memory == nil {
		return ts.proxyLLM(w, r, next, nil)
	}
	return ts.admitModel(ctx, w, r, next, c, waiter.Model, deadline, ticket.StopWaiting)
}

// admitModel serves an LLM request, for which a shared place is held,
// once the card's memory has room for its model (vram_admission);
// waited ends its count among the waiting requests.
func (ts *turnstile) admitModel(ctx context.Context, w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, c *config, model string, deadline time.Time, waited func()) error {
	adm, err := ts.AdmitModel(ctx, model, deadline, c.Reject)
	waited()
	if timedOut := errors.Is(err, gpu.ErrWaitTimeout); timedOut || errors.Is(err, gpu.ErrNoMemory) {
		ts.metrics.busyVRAM.Inc()
		var waited time.Duration
		if timedOut {
			waited = c.LLMWait
			admit.CloseAfter(w, r)
		}
		busy := httpapi.Busy(c.BusyStatus, ts.MemoryCause(model), waited, retryAfterSeconds(ts.retryAfter(c)))
		httpapi.Write(w, httpapi.ShapeOf(route.CleanPath(r), ""), busy)
		return nil
	}
	if err != nil {
		return ts.notAdmitted(w, r, c, nil, err, deadline)
	}
	return ts.proxyLLM(w, r, next, adm)
}

// proxyLLM calls next with the shared place the request holds, and gives
// it back however next ends. reverse_proxy aborts the handler with a
// panic when the answer cannot be copied to a client that has gone: that
// too is an abnormal end, after which the next emptying of the LLM
// engines is confirmed more strictly. adm, if not nil, is told how the
// answer went.
func (ts *turnstile) proxyLLM(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, adm *gpu.Admission) error {
	returned := false
	var out *admit.Outcome
	if adm != nil {
		out = &admit.Outcome{ResponseWriter: w}
		w = out
	}
	defer func() {
		if !returned {
			ts.NoteLLMEnd(r.Context(), gpu.ErrAnswerCut)
		}
		if adm != nil {
			adm.Done(out.Result())
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
	httpapi.Write(w, httpapi.ShapeOf(route.CleanPath(r), ""), httpapi.DuringJob())
	return nil
}
